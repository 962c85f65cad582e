import json
import math

import pytest
import torch

from lpdt.decentral.catalog import TOPOLOGIES
from lpdt.decentral.topology import (
    check_strongly_connected,
    describe,
    matrix_from_peers,
    mixing_matrix,
    out_degrees,
    shape_note,
    spectral_gap,
    torus_shape,
)


@pytest.mark.parametrize("name", TOPOLOGIES.names())
@pytest.mark.parametrize("n", [8, 16])
def test_column_stochastic_with_self_loops(name, n):
    w = mixing_matrix(name, n)
    assert torch.allclose(w.sum(0), torch.ones(n, dtype=w.dtype))
    assert (torch.diagonal(w) > 0).all()
    assert (w >= 0).all()


def test_directed_ring_matches_paper():
    w = mixing_matrix("directed_ring", 8)
    # node i sends to i+1 with weight 1/2 and keeps 1/2
    for i in range(8):
        assert w[i, i] == 0.5 and w[(i + 1) % 8, i] == 0.5
    assert out_degrees(w) == [1] * 8
    assert spectral_gap(w) == pytest.approx(1 - math.cos(math.pi / 8), abs=1e-9)
    assert 1 - spectral_gap(mixing_matrix("directed_ring", 16)) == pytest.approx(
        math.cos(math.pi / 16), abs=1e-9
    )


def test_true_torus_differs_from_code_grid():
    t = mixing_matrix("torus", 16)
    g = mixing_matrix("code_grid", 16)
    assert torus_shape(16) == (4, 4)
    # node 3 = (row 0, col 3): true torus wraps within the row to node 0; C_16(1,4) goes to 4
    assert t[0, 3] > 0 and t[4, 3] == 0
    assert g[4, 3] > 0 and g[0, 3] == 0
    assert torch.allclose(t, t.T)  # undirected, weights 1/5
    assert t[1, 0] == pytest.approx(0.2)


def test_code_grid_duplicates_on_8_nodes():
    w = mixing_matrix("code_grid", 8)
    assert w[4, 0] == pytest.approx(2 / 5)  # r+4 == r-4: the same peer gets two edges


def test_complete_graph_has_unit_gap_and_ring_gaps_order():
    assert spectral_gap(mixing_matrix("complete", 8)) == pytest.approx(1.0)
    gaps = [spectral_gap(mixing_matrix(k, 16)) for k in ("directed_ring", "ring", "torus")]
    assert gaps[0] < gaps[1] < gaps[2]


def test_not_strongly_connected_is_rejected():
    with pytest.raises(ValueError, match="strongly connected"):
        matrix_from_peers([[1], [0], [3], [2]])  # two separate 2-cycles
    with pytest.raises(ValueError, match="strongly connected"):
        check_strongly_connected(torch.eye(3, dtype=torch.float64))


def test_bad_torus_shape_and_unknown_name():
    with pytest.raises(ValueError, match="rows"):
        mixing_matrix("torus", 16, rows=3)
    with pytest.raises(KeyError, match="unknown topology"):
        mixing_matrix("star", 8)


def test_rows_are_refused_where_no_graph_reads_them(capsys):
    """``topology.rows`` / ``--rows`` on a graph other than the torus was silently ignored (``lpdt
    cost comm --topology ring --rows 3`` priced an 8-node ring); a config says which key."""
    from lpdt.cli import main
    from lpdt.config import ConfigError, config_from_dict

    with pytest.raises(ValueError, match=r"rows \(3\) apply only .* \(torus\), not ring"):
        mixing_matrix("ring", 8, rows=3)
    assert mixing_matrix("torus", 12, rows=3).shape == (12, 12)
    for argv in (["topology", "--name", "ring"], ["cost", "comm", "--topology", "ring"]):
        assert main([*argv, "--rows", "3"]) == 2
        assert "apply only to a graph laid out in rows" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="'topology.rows': has no effect with .*'ring'"):
        config_from_dict({"topology": {"name": "ring", "rows": 2}})


def test_the_command_refuses_a_graph_too_large_to_solve(capsys):
    """``lpdt topology --nodes 50000`` asked for a 20 GB matrix and an n^3 eigen-solve."""
    from lpdt.cli import main
    from lpdt.decentral.topology import MAX_CLI_NODES

    assert main(["topology", "--nodes", str(MAX_CLI_NODES + 1)]) == 2
    assert f"at most {MAX_CLI_NODES:,}" in capsys.readouterr().err


def test_a_large_graph_says_what_it_computes_first(capsys, monkeypatch):
    """4,096 nodes printed nothing for a minute or more (on a loaded 2-core VM); from 1,024 the
    command says first, on stderr (the JSON on stdout stays whole)."""
    import argparse

    from lpdt.decentral import topology

    small = describe("directed_ring", 4)
    monkeypatch.setattr(topology, "describe", lambda *a: small)  # not the minute's solve
    for n, says in ((topology.SLOW_CLI_NODES - 1, False), (topology.SLOW_CLI_NODES, True)):
        topology.run(argparse.Namespace(name="ring", nodes=n, rows=None, json="-"))
        got = capsys.readouterr()
        assert got.err.startswith(f"computing the spectral gap of {n:,} nodes") == says, got.err
        assert json.loads(got.out)["nodes"] == 4


def test_describe_is_json_friendly():
    d = describe("directed_ring", 8)
    assert d["edges"][0] == (0, 1) and len(d["edges"]) == 8
    assert d["spectral_gap"] == pytest.approx(1 - math.cos(math.pi / 8))


def test_a_symmetric_matrix_has_the_general_solvers_gap_and_a_tiny_gap_prints_its_digits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The undirected graphs' W is symmetric, and their gap comes from the symmetric solver: the
    same number as the general one. A gap under 0.001 prints its digits, not 0.0000."""
    import argparse

    import numpy as np

    from lpdt.decentral.topology import run

    for name in ("ring", "torus", "complete"):
        w = mixing_matrix(name, 16)
        assert torch.equal(w, w.T)
        general = np.sort(np.abs(np.linalg.eigvals(w.numpy())))[::-1]
        assert spectral_gap(w) == pytest.approx(1 - general[1], abs=1e-12)
    run(argparse.Namespace(name="ring", nodes=300, rows=None, json=None))
    first = capsys.readouterr().out.splitlines()[0]
    gap = 2 / 3 * (1 - math.cos(2 * math.pi / 300))  # 1 - (1/3 + 2/3 cos(2 pi / n))
    assert f"spectral gap {gap:.3g} " in first, first


def test_the_json_is_written_before_the_listing(tmp_path, monkeypatch) -> None:
    """``lpdt topology --json t.json | head``: the JSON is whole even when the reader of the
    listing stops after its first line (it was written after the listing, and never)."""
    import argparse
    import json

    from lpdt.decentral import topology

    printed: list[str] = []

    def closed_pipe(*args: object, **kwargs: object) -> None:
        if printed:
            raise BrokenPipeError(32, "Broken pipe")
        printed.append(str(args[0]))

    monkeypatch.setattr(topology, "print", closed_pipe, raising=False)
    out = tmp_path / "t.json"
    with pytest.raises(BrokenPipeError):
        topology.run(argparse.Namespace(name="ring", nodes=8, rows=None, json=str(out)))
    assert printed[0].startswith("ring on 8 nodes")
    assert json.loads(out.read_text())["nodes"] == 8


def test_a_torus_of_a_prime_node_count_is_named_a_ring(capsys):
    """``--name torus --nodes 7`` built a 1 x 7 torus, a ring, without a word (before
    2026-12-01); a run's notes say the same."""
    from lpdt.cli import main

    assert main(["topology", "--name", "torus", "--nodes", "7"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == (
        "note: torus on 7 nodes is 1 x 7, a ring: 7 is prime (choose a node count with "
        "factors, or set the rows)"
    )
    for n, rows in ((8, None), (3, None), (7, 1)):  # 2 x 4; too small to differ; asked for
        assert shape_note("torus", n, rows) is None
    assert shape_note("ring", 7, None) is None
