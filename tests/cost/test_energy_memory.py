import pytest

from lpdt.cost.energy import HOROWITZ_45NM, energy_pj
from lpdt.cost.memory import inference_memory, stored_elements, training_memory
from lpdt.cost.model import model_cost
from lpdt.cost.ops import Ops
from lpdt.cost.trace import trace_model
from tests.cost.nets import TINY_SHAPE, Tiny


def test_energy_uses_the_precision_of_the_model():
    ops = Ops(adds=10, mults=1)
    assert energy_pj(ops, "fp32") == pytest.approx(10 * 0.9 + 3.7)
    assert energy_pj(ops, "int8") == pytest.approx(10 * 0.03 + 0.2)
    # One multiply-accumulate: (0.9 + 3.7) / (0.03 + 0.2) = 20, the paper's ~20x.
    mac = Ops(1, 1)
    assert energy_pj(mac, "fp32") / energy_pj(mac, "int8") == pytest.approx(20.0)


def test_energy_table_overrides_and_errors():
    t = HOROWITZ_45NM.with_overrides({"int8_mult": 0.4})
    assert t.int8_mult == 0.4 and t.fp32_add == 0.9 and "overridden" in t.source
    with pytest.raises(ValueError, match="unknown energy table key"):
        HOROWITZ_45NM.with_overrides({"int4_add": 0.01})
    for bad in (-1, float("inf"), float("nan")):  # inf made every energy NaN
        with pytest.raises(ValueError, match="must be a finite number >= 0"):
            HOROWITZ_45NM.with_overrides({"fp32_add": bad})


def test_tiny_training_memory_by_hand():
    recs = trace_model(Tiny("rangeen"), TINY_SHAPE)
    stored = stored_elements(recs, 2 * 8 * 8)
    # input + conv outputs (conv1, conv2, shortcut) + norm + two ReLU calls + add; the pooled
    # vector and the Linear output are not feature maps and are not stored.
    assert stored == {
        "input": 128,
        "conv": 256 + 64 + 64,
        "norm": 256,
        "relu": 2 * 64,
        "add": 64,
        "maxpool": 0,
    }
    per_sample = 128 + 384 + 256 + 128 + 64
    p = 259
    for prec, nbytes in (("fp32", 4), ("int8", 1)):
        mem = training_memory(recs, p, 128, batch=2, precision=prec, algorithm="choco")
        assert mem["activations"] == mem["activation_gradients"] == 2 * per_sample * nbytes
        # Model-sized buffers stay fp32 in 8-bit training.
        assert mem["weights"] == mem["weight_gradients"] == mem["momentum"] == 4 * p
        assert mem["algorithm_buffers"] == 2 * 4 * p
    assert training_memory(recs, p, 128, 2, "fp32", "sgp")["algorithm_buffers"] == 0


def test_fused_relu_of_a_batch_norm_slot_is_stored():
    recs = trace_model(Tiny("rangebn"), TINY_SHAPE)
    assert stored_elements(recs, 128)["relu"] == 256 + 2 * 64


def test_inference_memory_and_model_cost_consistency(tiny):
    assert inference_memory(1000, "fp32") == 4000 and inference_memory(1000, "int8") == 1000
    c = model_cost(tiny, TINY_SHAPE, batch=2, precision="int8")
    assert c.params == 259 and c.memory_inference == 259
    assert sum(c.memory_training.values()) == 2 * 2 * 960 + 5 * 4 * 259
    d = c.to_dict()
    assert d["training"]["energy_mj"] == pytest.approx(c.energy_mj("training"))
    assert set(d["training"]["by_layer_type"]) >= {"conv", "quant_act", "norm_ren"}
