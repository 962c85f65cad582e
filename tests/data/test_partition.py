"""The skew partitioner against a literal transcription of the reference algorithm (reference §1.2)."""

import random

import numpy as np
import pytest

from lpdt.data.partition import class_histograms, dirichlet_partition, skew_partition

IMAGENETTE_SIZES = {0: 963, 1: 955, 2: 993, 3: 858, 4: 941, 5: 956, 6: 961, 7: 931, 8: 951, 9: 960}


def reference_partition(labels, world_size, skew, seed, class_size):
    """The reference's skew_sort + DataPartitioner, transcribed with lists and Python random."""
    order = list(np.argsort(labels, kind="stable"))
    data_len = len(labels)
    sorted_part, random_part = [], []
    start = 0
    for c in range(len(class_size)):
        block = order[start : start + class_size[c]]
        split = int(skew * class_size[c])
        sorted_part += block[:split]
        random_part += block[split:]
        start += class_size[c]
    rng = random.Random()
    rng.seed(seed)
    rng.shuffle(random_part)
    sizes = [1.0 / world_size for _ in range(world_size)]
    partitions = []
    if skew == 1:
        for frac in sizes:
            part_len = int(frac * data_len)
            partitions.append(sorted_part[0:part_len])
            sorted_part = sorted_part[part_len:]
    elif skew == 0:
        for frac in sizes:
            part_len = int(frac * data_len)
            partitions.append(random_part[0:part_len])
            random_part = random_part[part_len:]
    else:
        for frac in sizes:
            len_s = int(frac * data_len * skew)
            len_r = int(frac * data_len * (1 - skew))
            partitions.append(sorted_part[0:len_s] + random_part[0:len_r])
            sorted_part = sorted_part[len_s:]
            random_part = random_part[len_r:]
    return partitions


def cifar_labels(shuffle_seed=0):
    y = np.repeat(np.arange(10), 5000)
    return np.random.default_rng(shuffle_seed).permutation(y)


def imagenette_labels():
    y = np.repeat(np.arange(10), list(IMAGENETTE_SIZES.values()))
    return np.random.default_rng(1).permutation(y)


@pytest.mark.parametrize(
    "nodes,skew", [(8, 0.0), (8, 0.4), (8, 0.8), (8, 0.9), (8, 1.0), (16, 0.8), (4, 0.3), (5, 0.55)]
)
def test_matches_reference_cifar(nodes, skew):
    y = cifar_labels()
    ours = skew_partition(y, nodes, skew, seed=1234)
    ref = reference_partition(y, nodes, skew, 1234, {c: 5000 for c in range(10)})
    assert [p.tolist() for p in ours] == [list(map(int, r)) for r in ref]
    ref_hist = class_histograms(y, [np.asarray(r, dtype=np.int64) for r in ref], 10)
    np.testing.assert_array_equal(class_histograms(y, ours, 10), ref_hist)


@pytest.mark.parametrize("nodes,skew", [(4, 0.0), (4, 0.6), (8, 0.6), (8, 0.8)])
def test_matches_reference_imagenette(nodes, skew):
    y = imagenette_labels()
    ours = skew_partition(y, nodes, skew, seed=1234, class_sizes=IMAGENETTE_SIZES)
    ref = reference_partition(y, nodes, skew, 1234, IMAGENETTE_SIZES)
    assert [p.tolist() for p in ours] == [list(map(int, r)) for r in ref]


def test_imagenette_sizes_section_1_2():
    parts = skew_partition(imagenette_labels(), 4, 0.6, seed=1234)
    assert [len(p) for p in parts] == [2366, 2366, 2366, 2362]


def test_cifar_n8_s08_sizes_and_leftovers():
    parts = skew_partition(cifar_labels(), 8, 0.8)
    assert [len(p) for p in parts] == [6249] * 8
    used = np.concatenate(parts)
    assert len(np.unique(used)) == len(used) == 50000 - 8


def test_cifar_n8_s04_node0_histogram():
    y = cifar_labels()
    h = class_histograms(y, skew_partition(y, 8, 0.4), 10)
    # sorted part: 2000 of class 0 + 500 of class 1; random part ~3750 / 10 per class.
    assert h[0, 0] - 2000 == pytest.approx(375, abs=60)
    assert h[0, 1] - 500 == pytest.approx(375, abs=60)
    assert all(abs(v - 375) < 60 for v in h[0, 2:])
    assert h.sum(axis=1).tolist() == [6250] * 8


def test_skew_extremes():
    y = cifar_labels()
    iid = class_histograms(y, skew_partition(y, 8, 0.0), 10)
    assert iid.min() > 500  # ~625 per class everywhere
    sorted_ = class_histograms(y, skew_partition(y, 8, 1.0), 10)
    assert ((sorted_ > 0).sum(axis=1) <= 2).all()
    assert sorted_[0].tolist()[:2] == [5000, 1250]


def test_seed_changes_random_part_only():
    y = cifar_labels()
    a, b = skew_partition(y, 8, 0.5, seed=1), skew_partition(y, 8, 0.5, seed=2)
    assert [p.tolist() for p in a] != [p.tolist() for p in b]
    assert [p.tolist() for p in a] == [p.tolist() for p in skew_partition(y, 8, 0.5, seed=1)]


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"skew": 1.5}, "skew"),
        ({"skew": -0.1}, "skew"),
        ({"nodes": 0}, "nodes"),
        ({"nodes": 100}, "more nodes"),
        ({"labels": np.zeros((4, 2), dtype=int)}, "1-D"),
        ({"labels": np.array([0, -1, 1])}, "non-negative"),
        ({"labels": np.array([0.5, 1.0])}, "integers"),
        ({"class_sizes": {0: 5, 1: 6}}, "class_sizes"),
    ],
)
def test_invalid_inputs(kwargs, match):
    args = {"labels": np.repeat(np.arange(2), 5), "nodes": 2, "skew": 0.5}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        skew_partition(**args)


def test_dirichlet():
    y = cifar_labels()
    parts = dirichlet_partition(y, 8, 0.5, seed=3)
    sizes = [len(p) for p in parts]
    assert sum(sizes) <= len(y) and min(sizes) > 0
    cat = np.concatenate(parts)
    assert len(np.unique(cat)) == len(cat)
    again = dirichlet_partition(y, 8, 0.5, seed=3)
    assert all((a == b).all() for a, b in zip(parts, again, strict=True))

    def skewness(alpha):
        h = class_histograms(y, dirichlet_partition(y, 8, alpha, seed=3), 10).astype(float)
        return (h.max(axis=1) / h.sum(axis=1)).mean()

    assert skewness(0.05) > skewness(100.0) + 0.3
    with pytest.raises(ValueError, match="alpha"):
        dirichlet_partition(y, 8, 0.0, seed=0)


def test_dirichlet_every_node_nonempty_tiny():
    y = np.array([0, 0, 0, 1, 1, 1])
    parts = dirichlet_partition(y, 6, 0.01, seed=0)
    assert all(len(p) > 0 for p in parts)
