"""Model zoo (registry). Configs name models by string: ``resnet20``, ``vgg11``, ...

Every factory has the signature ``fn(cfg: ModelConfig, num_classes: int, input_shape) -> nn.Module``
and returns a full-precision model; ``build_model`` applies the 8-bit conversion when the run
asks for ``precision.mode: int8``. Models map one input tensor to logits.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

from torch import nn

from lpdt.registry import Registry

ModelFactory = Callable[..., nn.Module]
MODELS: Registry[ModelFactory] = Registry("model")


@MODELS.register("tiny_cnn")
def tiny_cnn(cfg, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """A very small CNN for tests and engine benchmarks (no normalisation layers)."""
    c = input_shape[0]
    return nn.Sequential(
        nn.Conv2d(c, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, num_classes),
    )


def build_model(run_cfg, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """The model of a run config, converted to 8 bits when ``precision.mode == 'int8'``.

    Factories receive the model section plus the run's data ``root`` and ``download`` flag
    (pretrained weights, e.g. DistilBERT's, live under the data root like the datasets do).
    """
    spec = SimpleNamespace(
        **vars(run_cfg.model), root=run_cfg.data.root, download=run_cfg.data.download
    )
    model = MODELS.get(run_cfg.model.name)(spec, num_classes, input_shape)
    if run_cfg.precision.mode == "int8":
        from lpdt.layers.quant import convert_to_int8

        # Transformers mark themselves: only their nn.Linear layers become 8-bit (docs/nlp.md).
        linear_only = bool(getattr(model, "int8_linear_only", False))
        model = convert_to_int8(model, run_cfg.precision, run_cfg.model, linear_only=linear_only)
    return model


# Model families register themselves on import (added as they land).
from lpdt.models import resnet, text, vgg  # noqa: E402,F401
from lpdt.models.common import init_fp_, init_lp_  # noqa: E402,F401
