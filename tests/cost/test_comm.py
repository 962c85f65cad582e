"""Communication volume: the formula, and the paper's Table 3 "Data" column (real models)."""

import pytest

from lpdt.cost.comm import comm_volume, gossiped_numels, iterations_per_epoch
from lpdt.cost.model import build
from lpdt.cost.published import agrees_to_printed


def test_iterations_per_epoch_follows_the_reference_loader():
    assert iterations_per_epoch(50000, 8, 256) == 196  # 6250 / 32 = 195.3
    assert iterations_per_epoch(50000, 16, 256) == 196  # 3125 / 16 = 195.3
    assert iterations_per_epoch(9469, 4, 256) == 37  # Imagenette, n = 4
    assert iterations_per_epoch(64, 2, 32) == 2
    with pytest.raises(ValueError):
        iterations_per_epoch(50000, 8, 4)


def test_volume_formula_on_a_small_case():
    numels = [100, 10]
    v = comm_volume(
        numels,
        topology="torus",
        nodes=4,
        compression="topk",
        ratio=0.5,
        epochs=3,
        train_size=400,
        batch_size=40,
    )
    assert v.iterations_per_epoch == 10 and v.iterations == 30
    assert v.out_peers == 2  # a 2 x 2 torus has 2 distinct neighbours
    assert v.kept == 50 + 5 and v.bytes_per_message == 6 * 55 + 3
    assert v.bytes_per_node == 30 * 2 * (6 * 55 + 3)
    assert v.gb_per_node_8bit_analytic == pytest.approx(v.gb_per_node / 4)
    w = comm_volume(
        numels,
        topology="torus",
        nodes=4,
        compression="none",
        ratio=0.0,
        epochs=3,
        train_size=400,
        batch_size=40,
        off_by_one=True,
    )
    assert w.messages_counted == 29 and w.bytes_per_node == 29 * 2 * 4 * 111


@pytest.fixture(scope="module")
def numels():
    return {m: gossiped_numels(build(m, "evonorm")) for m in ("resnet20", "resnet54")}


def test_parameter_counts_of_the_real_models(numels):
    assert sum(numels["resnet20"]) == 273_258  # reference §4.5
    assert sum(numels["resnet54"]) == 760_458


@pytest.mark.parametrize(
    "model, nodes, ratio, fp, lp",
    [
        ("resnet20", 8, 0.0, "42.85", "10.71"),
        ("resnet20", 16, 0.99, "0.651", "0.163"),
        ("resnet54", 8, 0.0, "119.2", "29.81"),
        ("resnet54", 16, 0.99, "1.808", "0.452"),
    ],
)
@pytest.mark.parametrize("off_by_one", [False, True])
def test_table3_data_agrees_with_the_paper_to_its_printed_digits(
    numels, model, nodes, ratio, fp, lp, off_by_one
):
    v = comm_volume(
        numels[model],
        topology="directed_ring",
        nodes=nodes,
        compression="topk" if ratio else "none",
        ratio=ratio,
        epochs=200,
        train_size=50000,
        batch_size=256,
        off_by_one=off_by_one,
    )
    assert v.iterations == 39_200
    assert agrees_to_printed(v.gb_per_node, fp)
    assert agrees_to_printed(v.gb_per_node_8bit_analytic, lp)


def test_agrees_to_printed():
    assert agrees_to_printed(42.847, "42.85") and not agrees_to_printed(42.844, "42.85")
    assert agrees_to_printed(8.1204, "8.120") and not agrees_to_printed(8.1204, "8.121")
    assert agrees_to_printed(3.996, "4") and not agrees_to_printed(3.4, "4")
