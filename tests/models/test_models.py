"""Vision model zoo: parameter counts (= the reference's), shapes, structure, init, state handling."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from lpdt.config import ModelConfig, RunConfig
from lpdt.layers import Add
from lpdt.layers.norms import NORM_KINDS, NORM_MODULES, BatchNormAct2d, EvoNormS0
from lpdt.layers.quant.convert import init_lp_
from lpdt.models import MODELS, build_model, make_model

CIFAR = (3, 32, 32)

# Trainable parameters for 10 classes, enumerated from the reference code (reference §4.5, §7).
REFERENCE_PARAMS = [
    ("resnet20", "evonorm", CIFAR, 273_258),
    ("resnet54", "evonorm", CIFAR, 760_458),
    ("vgg11", "evonorm", CIFAR, 9_496_522),
    ("resnet18", "evonorm", (3, 64, 64), 11_186_442),
    ("resnet18", "batchnorm", (3, 64, 64), 11_181_642),
    ("resnet20", "batchnorm", CIFAR, 272_474),
    ("resnet54", "batchnorm", CIFAR, 758_554),
    ("vgg11", "batchnorm", CIFAR, 9_493_770),
    ("resnet20", "rangeen", CIFAR, 273_258),
    ("resnet54", "rangeen", CIFAR, 760_458),
    ("vgg11", "rangeen", CIFAR, 9_496_522),
]


def _model(name: str, norm: str = "evonorm", shape=CIFAR, classes: int = 10, **kw) -> nn.Module:
    torch.manual_seed(0)
    return make_model(name, ModelConfig(name=name, norm=norm, **kw), classes, shape)


def _params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters() if p.requires_grad)


@pytest.mark.parametrize("name, norm, shape, expected", REFERENCE_PARAMS)
def test_parameter_counts_equal_the_reference(name, norm, shape, expected):
    assert _params(_model(name, norm, shape)) == expected


def test_resnet8_is_resnet20_with_one_block_per_stage():
    """ResNet-8 (the quick scale's claims model; not in the reference) is ResNet-20 less two
    identity blocks per stage: two 3x3 convolutions of c -> c and two EvoNorms (3c) each."""
    blocks = sum(2 * (2 * (c * c * 9 + 3 * c)) for c in (16, 32, 64))
    assert _params(_model("resnet8")) == _params(_model("resnet20")) - blocks == 78_378
    assert [len(stage) for stage in _model("resnet8").stages] == [1, 1, 1]


def test_top_k_message_sizes_equal_the_reference():
    """K = sum over tensors of max(1, int(numel * 0.01)) (reference §4.5): same tensor list."""
    expected = {"resnet20": 2_767, "resnet54": 7_687, "vgg11": 94_955}
    for name, k in expected.items():
        m = _model(name)
        assert sum(max(1, int(p.numel() * 0.01)) for p in m.parameters()) == k


def test_paper_parameter_column():
    # Paper Table 2: 0.27 M, 0.76 M, 9.49 M, 11.2 M (to its last printed digit).
    for name, shape, m_params, digit in [
        ("resnet20", CIFAR, 0.27, 0.01),
        ("resnet54", CIFAR, 0.76, 0.01),
        ("vgg11", CIFAR, 9.49, 0.01),
        ("resnet18", (3, 64, 64), 11.2, 0.1),
    ]:
        assert abs(_params(_model(name, shape=shape)) / 1e6 - m_params) < digit


def test_registry_names_and_specs():
    """Every spec's factory imports and is callable; a stand-in names a registered model that
    is not itself a stand-in; text models are the ones that read token ids."""
    assert {"resnet8", "resnet20", "resnet54", "resnet18", "vgg11", "tiny_cnn"} <= set(
        MODELS.names()
    )
    for name in MODELS:
        spec = MODELS.get(name)
        assert callable(spec.load()), name
        assert spec.jobs_per_gpu >= 1, name
        if spec.stands_in_for is not None:
            assert MODELS.get(spec.stands_in_for).stands_in_for is None, name
    assert {n for n in MODELS if MODELS.get(n).inputs == "text"} == {
        "distilbert",
        "distilbert_tiny",
        "minilm",
    }


@pytest.mark.parametrize("norm", NORM_KINDS)
@pytest.mark.parametrize("name", ["resnet20", "resnet54", "vgg11"])
def test_cifar_output_shapes(name, norm):
    m = _model(name, norm, classes=7)
    y = m(torch.randn(2, *CIFAR))
    assert y.shape == (2, 7) and torch.isfinite(y).all()


@pytest.mark.parametrize("norm", NORM_KINDS)
def test_resnet18_output_shape_64px(norm):
    m = _model("resnet18", norm, (3, 64, 64))
    assert m(torch.randn(2, 3, 64, 64)).shape == (2, 10)


def test_imagenet_resolution_shapes():
    """224 px (Imagenette): VGG-11 averages its 7x7 features, ResNet-18 its 7x7 last stage."""
    x = torch.randn(1, 3, 224, 224)
    vgg = _model("vgg11", shape=(3, 224, 224))
    with torch.no_grad():
        assert vgg.features(x).shape == (1, 512, 7, 7)
        assert isinstance(vgg.pool, nn.AdaptiveAvgPool2d)
        assert isinstance(_model("vgg11").pool, nn.Identity)  # 32 px: features already 1x1
        assert vgg(x).shape == (1, 10)
        r18 = _model("resnet18", shape=(3, 224, 224))
        assert r18.stages(r18.stem(x)).shape == (1, 512, 7, 7)
        assert r18(x).shape == (1, 10)


def test_single_channel_inputs_and_other_sizes():
    m = _model("resnet20", shape=(1, 28, 28), norm="rangeen")
    assert m(torch.randn(2, 1, 28, 28)).shape == (2, 10)  # 7x7 maps: chunk-count fallback
    assert _model("resnet18", shape=(3, 32, 32))(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_bad_input_shapes_raise_clear_errors():
    with pytest.raises(ValueError, match="image inputs"):
        _model("resnet20", shape=(128,))
    with pytest.raises(ValueError, match="at least 32x32"):
        _model("vgg11", shape=(3, 16, 16))
    with pytest.raises(ValueError, match="at least 32x32"):
        _model("resnet18", shape=(3, 28, 28))


# ---------------------------------------------------------------------------------------------
# Structure
# ---------------------------------------------------------------------------------------------


def _count(m: nn.Module, cls) -> int:
    return sum(isinstance(x, cls) for x in m.modules())


def test_resnet20_structure_matches_reference():
    m = _model("resnet20")
    convs = [x for x in m.modules() if isinstance(x, nn.Conv2d)]
    assert len(convs) == 1 + 9 * 2 + 2  # stem, 9 blocks x 2, two option-B shortcuts
    assert all(c.bias is None for c in convs)
    assert sum(c.kernel_size == (1, 1) for c in convs) == 2
    assert _count(m, Add) == 9
    assert _count(m, EvoNormS0) == 1 + 18 + 2  # every norm, the shortcuts' included
    assert _count(m, nn.ReLU) == 0  # EvoNorm is a norm-activation layer
    bn = _model("resnet20", "batchnorm")
    assert _count(bn, nn.ReLU) == 9  # after every addition
    relu_slots = [x.has_act for x in bn.modules() if isinstance(x, BatchNormAct2d)]
    assert sum(relu_slots) == 1 + 9 and len(relu_slots) == 21  # stem + first norm of each block


def test_resnet54_has_eight_blocks_per_stage():
    m = _model("resnet54")
    assert [len(stage) for stage in m.stages] == [8, 8, 8]


def test_resnet18_uses_the_configured_norm_everywhere_and_stem_relu():
    """The reference builds EvoNorm blocks whatever --normtype says (reference §14.5); we do not."""
    m = _model("resnet18", "batchnorm", (3, 64, 64))
    norms = [x for x in m.modules() if isinstance(x, NORM_MODULES)]
    assert len(norms) == 1 + 16 + 3 and all(isinstance(x, BatchNormAct2d) for x in norms)
    assert m.stem[1].has_act  # ReLU after the BN stem
    assert isinstance(m.stem[2], nn.MaxPool2d)
    assert m.stem[0].kernel_size == (7, 7) and m.stem[0].stride == (2, 2)


def test_vgg11_structure():
    for norm, relus in (("evonorm", 1), ("batchnorm", 1)):
        m = _model("vgg11", norm)
        convs = [x for x in m.modules() if isinstance(x, nn.Conv2d)]
        assert [c.out_channels for c in convs] == [64, 128, 256, 256, 512, 512, 512, 512]
        assert all(c.bias is not None for c in convs)
        assert _count(m, nn.MaxPool2d) == 5
        assert _count(m, nn.ReLU) == relus  # only the classifier's; norms carry theirs
        lin = [x for x in m.classifier if isinstance(x, nn.Linear)]
        assert [(x.in_features, x.out_features) for x in lin] == [(512, 512), (512, 10)]
        assert isinstance(m.classifier[0], nn.Dropout) and m.classifier[0].p == 0.5


# ---------------------------------------------------------------------------------------------
# Initialisation
# ---------------------------------------------------------------------------------------------


def test_fp_init_matches_reference():
    m = _model("vgg11")
    conv = [x for x in m.modules() if isinstance(x, nn.Conv2d)][-1]  # 512 -> 512, 2.4 M weights
    assert conv.weight.std().item() == pytest.approx(math.sqrt(2.0 / (9 * 512)), rel=0.02)
    assert abs(conv.weight.mean().item()) < 1e-3
    assert all((c.bias == 0).all() for c in m.modules() if isinstance(c, nn.Conv2d))
    for n in (x for x in m.modules() if isinstance(x, EvoNormS0)):
        assert (n.weight == 1).all() and (n.bias == 0).all() and (n.v == 1).all()
    # Linear keeps the PyTorch default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    fc = m.classifier[1]
    assert fc.weight.abs().max() <= 1 / math.sqrt(512) and fc.weight.std() > 0.01
    r = _model("resnet20")
    stem = r.stem[0]
    assert stem.weight.std().item() == pytest.approx(math.sqrt(2.0 / (9 * 16)), rel=0.15)


@pytest.mark.parametrize("norm", ["rangeen", "batchnorm"])
def test_lp_init_zeroes_each_blocks_last_norm_and_shrinks_fc(norm):
    m = _model("resnet20", norm)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3)  # move away from the FP init so that the LP init has to reset things
    assert init_lp_(m) is m
    for block in m.blocks():
        assert (block.norm2.weight == 0).all() and (block.norm2.bias == 0).all()
        assert (block.norm1.weight == 1).all() and (block.norm1.bias == 0).all()
    assert (m.stem[1].weight == 1).all()
    assert m.fc.weight.std().item() == pytest.approx(0.01, rel=0.1) and (m.fc.bias == 0).all()
    # Zero-init residual: every block is the identity on its shortcut path at init.
    block = m.blocks()[0]
    x = torch.randn(2, 16, 8, 8)
    torch.testing.assert_close(
        block.add(block.norm2(block.conv2(block.norm1(block.conv1(x)))), x), x
    )


def test_lp_init_on_vgg_is_a_no_op():
    m = _model("vgg11")
    before = copy.deepcopy(m.state_dict())
    init_lp_(m)
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k])


# ---------------------------------------------------------------------------------------------
# State: buffers, deepcopy, parameters as views into a flat tensor
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", NORM_KINDS)
def test_only_batch_norms_have_buffers_and_nothing_is_gossiped(norm):
    m = _model("resnet20", norm)
    buffers = {n.rsplit(".", 1)[-1] for n, _ in m.named_buffers()}
    expected = {
        "batchnorm": {"running_mean", "running_var", "num_batches_tracked"},
        "rangebn": {"running_mean", "running_scale"},
    }.get(norm, set())
    assert buffers == expected
    assert all(not getattr(x, "gossip_buffers", ()) for x in m.modules())


@pytest.mark.parametrize(
    "name, norm", [("resnet20", "rangeen"), ("vgg11", "evonorm"), ("resnet20", "batchnorm")]
)
def test_deepcopy_and_flat_parameter_views(name, norm):
    m = _model(name, norm).eval()
    x = torch.randn(2, *CIFAR)
    ref = m(x)
    c = copy.deepcopy(m)
    torch.testing.assert_close(c(x), ref)
    # Re-home every parameter into one flat tensor (as the node-state engine does).
    params = list(c.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    grad = torch.zeros_like(flat)
    off = 0
    for p in params:
        p.data = flat[off : off + p.numel()].view_as(p)
        p.grad = grad[off : off + p.numel()].view_as(p)
        off += p.numel()
    torch.testing.assert_close(c(x), ref)
    c(x).sum().backward()
    assert grad.abs().sum() > 0  # gradients land in the flat buffer
    with torch.no_grad():
        flat.mul_(0.5)  # an update of the flat tensor must change the model
    assert not torch.allclose(c(x), ref)


def test_build_model_from_run_config():
    cfg = RunConfig()
    cfg.model = ModelConfig(name="resnet20", norm="groupnorm", gn_groups=4)
    m = build_model(cfg, 10, CIFAR)
    assert m(torch.randn(2, *CIFAR)).shape == (2, 10)
    assert {x.num_groups for x in m.modules() if isinstance(x, nn.GroupNorm)} == {4}


def test_evonorm_models_are_deterministic_and_train_eval_equal():
    m = _model("resnet20", "rangeen")
    x = torch.randn(3, *CIFAR)
    y_train = m.train()(x)
    torch.testing.assert_close(m.eval()(x), y_train)
