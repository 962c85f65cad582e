"""The model zoo: configs name a model by string (``model.name: resnet20``), and the rest of lpdt
reads what it needs to know about a model from the spec registered here under that name: the
config check (a known name), the engines (its factory), the planner (token inputs? entries
gossiped per round), the GPU slots (jobs that share one GPU) and the report (the paper's model it
stands in for). Measurements stay with what they measure, keyed by the name: the planner's step
times (``lpdt.plan.runtime``) and the rows of the cost model's Table 10.

A factory ``impl(cfg: ModelConfig, num_classes, input_shape) -> nn.Module`` returns a
full-precision model that maps one input tensor to logits; ``build_model`` applies the 8-bit
conversion when the run asks for ``precision.mode: int8``. This module imports no torch (the
workflow's DAG and the MLflow log process read the specs): a factory is named as
``"module:function"`` and imported on first use.

Adding one (docs/extending.md): write the factory and register its spec from the module that
defines it, ``MODELS.add("cnn3", ModelSpec(impl=cnn3))``; the built-ins are listed below.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Literal

from lpdt.registry import Registry, Spec

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True)
class ModelSpec(Spec):
    """A model: ``impl(cfg, num_classes, input_shape)`` returns it in full precision."""

    # "text": it reads token ids ([B, L]; the planner prices L = data.max_length), else images
    inputs: Literal["image", "text"] = "image"
    # The paper's model whose cells its runs fill at the smaller scales (the report's model
    # coordinate): "minilm" stands in for "distilbert"; None: itself
    stands_in_for: str | None = None
    # Training jobs of it that share one GPU (config gpu_jobs_per_gpu: auto; lpdt.gpus)
    jobs_per_gpu: int = 1
    # Entries one node gossips per round (trainable parameters; 8-bit models add their ranges),
    # from ``lpdt train`` records (``model.gossiped``, 10 classes): the planner's gossip term;
    # None: the plan leaves it out
    gossiped: int | None = None
    # Its factory reads files (pretrained weights under the data root, or an installed package's):
    # the workflow's rule data_check builds it once before any training job, so that missing or
    # damaged files stop the grid there
    reads_files: bool = False


MODELS: Registry[ModelSpec] = Registry("model", ModelSpec)

# ResNet-20's jobs per GPU are MEASURED (2026-11-27, one H100, Table 3 jobs;
# lpdt.plan.gpu.H100_SHARE): 8 jobs give 4.7x the images/s of one, 12 only 5.0x. The others
# are PROVISIONAL, NOT MEASURED: guesses from the models' sizes (ResNet-8 / -54 launch-bound and
# small like ResNet-20; VGG-11, ResNet-18 at 64 px or larger and MiniLM fill more of a GPU).
_RESNET = "lpdt.models.resnet"
MODELS.add("tiny_cnn", ModelSpec("lpdt.models.small:tiny_cnn"))
MODELS.add("resnet8", ModelSpec(f"{_RESNET}:resnet8", jobs_per_gpu=8, gossiped=78_378))
MODELS.add("resnet20", ModelSpec(f"{_RESNET}:resnet20", jobs_per_gpu=8, gossiped=273_258))
MODELS.add("resnet54", ModelSpec(f"{_RESNET}:resnet54", jobs_per_gpu=8, gossiped=760_458))
MODELS.add("resnet18", ModelSpec(f"{_RESNET}:resnet18", jobs_per_gpu=2, gossiped=11_186_442))
MODELS.add("vgg11", ModelSpec("lpdt.models.vgg:vgg11", jobs_per_gpu=4, gossiped=9_496_522))
_TEXT = "lpdt.models.text"
MODELS.add("distilbert", ModelSpec(f"{_TEXT}:distilbert", inputs="text", reads_files=True))
MODELS.add(
    "minilm",
    ModelSpec(
        f"{_TEXT}:minilm",
        inputs="text",
        stands_in_for="distilbert",
        jobs_per_gpu=2,
        gossiped=22_714_756,
        reads_files=True,
    ),
)
MODELS.add(
    "distilbert_tiny",
    ModelSpec(f"{_TEXT}:distilbert_tiny", inputs="text", stands_in_for="distilbert"),
)


def make_model(name: str, cfg: Any, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """The full-precision model ``name`` (its registered factory called with the rest)."""
    return MODELS.get(name).load()(cfg, num_classes, tuple(input_shape))


def build_model(run_cfg: Any, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """The model of a run config, its dropout hashed when ``model.dropout_noise == 'hash'``
    (``lpdt.layers.dropout``), converted to 8 bits when ``precision.mode == 'int8'``.

    Factories receive the model section plus the run's data ``root`` and ``download`` flag
    (pretrained weights, e.g. DistilBERT's, live under the data root like the datasets do).
    """
    spec = SimpleNamespace(
        **vars(run_cfg.model), root=run_cfg.data.root, download=run_cfg.data.download
    )
    model = make_model(run_cfg.model.name, spec, num_classes, input_shape)
    if run_cfg.model.dropout_noise == "hash":
        from lpdt.layers.dropout import hash_dropout_

        model = hash_dropout_(model)
    if run_cfg.precision.mode == "int8":
        from lpdt.layers.quant import convert_to_int8

        # Transformers mark themselves: only their nn.Linear layers become 8-bit (docs/nlp.md).
        linear_only = bool(getattr(model, "int8_linear_only", False))
        model = convert_to_int8(model, run_cfg.precision, run_cfg.model, linear_only=linear_only)
    return model
