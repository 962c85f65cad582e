"""Communication graphs as column-stochastic mixing matrices.

Convention (reference §2.3): ``W[i, j]`` is the weight node i applies to the message it receives
from node j (``j -> i`` is an edge); every sender splits its mass ``1/(out_degree + 1)`` over
itself and its out-peers, so each *column* sums to 1. Self-loops are always included.

Graphs:
- ``directed_ring``: the paper's ring, node i sends to i+1 only (W = (I + P)/2).
- ``ring``: undirected ring, weights 1/3.
- ``torus``: a true r x c 2-D torus (4 x 4 for 16 nodes), weight 1/(d+1) over distinct neighbours.
- ``code_grid``: the reference code's circulant C_n(1, 4) with 4 peers and weight 1/5, duplicate
  edges counted (for n = 8, r+4 == r-4 so that peer gets 2/5), for fidelity with the code.
- ``complete``: everybody talks to everybody (exact averaging in one round).
- ``exponential``: directed exponential graph, i sends to i + 2^k for 2^k < n.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch

from lpdt.decentral.catalog import TOPOLOGIES, shaped_topologies
from lpdt.io import emit_json, output_file, write_json_atomic

# The graphs are registered, with their names in runs and whether they are directed, in
# lpdt.decentral.catalog (TOPOLOGIES).


def _check_n(n: int, minimum: int = 1) -> None:
    if not isinstance(n, int) or n < minimum:
        raise ValueError(f"number of nodes must be an integer >= {minimum}, got {n!r}")


def directed_ring(n: int, **_: object) -> list[list[int]]:
    """Out-peers of each node: i -> i+1."""
    _check_n(n)
    return [[(i + 1) % n] if n > 1 else [] for i in range(n)]


def ring(n: int, **_: object) -> list[list[int]]:
    _check_n(n)
    return [sorted({(i + 1) % n, (i - 1) % n} - {i}) for i in range(n)]


def torus_shape(n: int, rows: int | None = None) -> tuple[int, int]:
    """The r x c shape: ``rows`` if given, else the most square factorisation (r <= c)."""
    if rows is None:
        rows = max(r for r in range(1, int(math.isqrt(n)) + 1) if n % r == 0)
    if rows < 1 or n % rows:
        raise ValueError(f"torus: {n} nodes cannot be arranged in {rows} rows")
    return rows, n // rows


def shape_note(name: str, n: int, rows: int | None) -> str | None:
    """A line when a graph laid out in rows (``TopologySpec.shaped``: the torus) gets one row
    by itself: a prime node count has no other factorisation, and 1 x n is a ring."""
    if rows is not None or n < 4 or not TOPOLOGIES.get(name).shaped or torus_shape(n)[0] > 1:
        return None
    return (
        f"note: {name} on {n} nodes is 1 x {n}, a ring: {n} is prime (choose a node count with "
        "factors, or set the rows)"
    )


def torus(n: int, rows: int | None = None, **_: object) -> list[list[int]]:
    """True 2-D torus: (r, c) talks to (r +- 1, c) and (r, c +- 1), distinct neighbours only."""
    _check_n(n)
    r_, c_ = torus_shape(n, rows)
    out = []
    for i in range(n):
        r, c = divmod(i, c_)
        peers = {
            ((r + 1) % r_) * c_ + c,
            ((r - 1) % r_) * c_ + c,
            r * c_ + (c + 1) % c_,
            r * c_ + (c - 1) % c_,
        }
        out.append(sorted(peers - {i}))
    return out


def code_grid(n: int, **_: object) -> list[list[int]]:
    """The reference's GridGraph with 4 peers: C_n(1, 4), duplicates kept (a multigraph)."""
    _check_n(n, 2)
    return [[(i + 1) % n, (i - 1) % n, (i + 4) % n, (i - 4) % n] for i in range(n)]


def complete(n: int, **_: object) -> list[list[int]]:
    _check_n(n)
    return [[j for j in range(n) if j != i] for i in range(n)]


def exponential(n: int, **_: object) -> list[list[int]]:
    """Directed exponential graph: i -> i + 2^k (mod n) for every 2^k < n."""
    _check_n(n)
    hops = [2**k for k in range(max(0, math.ceil(math.log2(n)))) if 2**k < n]
    return [sorted({(i + h) % n for h in hops} - {i}) for i in range(n)]


def out_peers(name: str, n: int, rows: int | None = None) -> list[list[int]]:
    """Each node's out-peers in topology ``name`` on ``n`` nodes; ``rows`` only for a graph
    registered as ``shaped`` (the torus), where any other would silently ignore them."""
    spec = TOPOLOGIES.get(name)
    if rows is not None and not spec.shaped:
        shaped = ", ".join(shaped_topologies())
        raise ValueError(
            f"rows ({rows}) apply only to a graph laid out in rows ({shaped}), not {name}"
        )
    return spec.load()(n, rows=rows)


def matrix_from_peers(peers: list[list[int]]) -> torch.Tensor:
    """Column-stochastic W: sender j gives 1/(len(peers[j]) + 1) to itself and to each out-peer."""
    n = len(peers)
    w = torch.zeros(n, n, dtype=torch.float64)
    for j, outs in enumerate(peers):
        a = 1.0 / (len(outs) + 1)
        w[j, j] += a
        for i in outs:
            w[i, j] += a  # duplicates accumulate (code_grid with n = 8)
    check_strongly_connected(w)
    return w


def mixing_matrix(name: str, n: int, rows: int | None = None) -> torch.Tensor:
    """The float64 column-stochastic mixing matrix of topology ``name`` on ``n`` nodes."""
    return matrix_from_peers(out_peers(name, n, rows))


def check_strongly_connected(w: torch.Tensor) -> None:
    """Raise ValueError if the directed graph with edges j -> i where W[i, j] > 0 is not strongly connected."""
    adj = (w.abs() > 0).numpy()
    n = adj.shape[0]

    def reach(a: np.ndarray) -> int:
        seen = {0}
        stack = [0]
        while stack:
            j = stack.pop()
            for i in np.nonzero(a[:, j])[0]:
                if int(i) not in seen:
                    seen.add(int(i))
                    stack.append(int(i))
        return len(seen)

    if reach(adj) != n or reach(adj.T) != n:
        raise ValueError("the communication graph is not strongly connected")


def spectral_gap(w: torch.Tensor) -> float:
    """1 - (second largest eigenvalue modulus) of W.

    An undirected graph's W is symmetric, and its eigenvalues come from the symmetric solver,
    which is much faster: for a 2,000-node ring on the 2-core VM, 0.4 s against the general
    solver's 23 s, side by side under load (2026-11-30)."""
    a = np.asarray(w, dtype=np.float64)
    values = np.linalg.eigvalsh(a) if np.array_equal(a, a.T) else np.linalg.eigvals(a)
    ev = np.sort(np.abs(values))[::-1]
    return float(1.0 - (ev[1] if len(ev) > 1 else 0.0))


def out_degrees(w: torch.Tensor) -> list[int]:
    """Number of distinct out-peers of each node (messages sent per round)."""
    adj = w.abs() > 0
    adj.fill_diagonal_(False)
    return adj.sum(0).tolist()


def describe(name: str, n: int, rows: int | None = None) -> dict:
    """A JSON-friendly description (for Figure 3 and the CLI)."""
    peers = out_peers(name, n, rows)
    w = matrix_from_peers(peers)
    gap = spectral_gap(w)
    d: dict = {
        "name": name,
        "nodes": n,
        "W": w.tolist(),
        "edges": sorted({(j, i) for j, outs in enumerate(peers) for i in outs}),
        "directed": TOPOLOGIES.get(name).directed,
        "spectral_gap": gap,
        "second_eigenvalue_modulus": 1.0 - gap,
        "out_peers": peers,
    }
    if name == "torus":
        r, c = torus_shape(n, rows)
        d["positions"] = [[i % c, -(i // c)] for i in range(n)]
    else:
        d["positions"] = [
            [math.cos(2 * math.pi * i / n), math.sin(2 * math.pi * i / n)] for i in range(n)
        ]
    return d


# --- `lpdt topology` -------------------------------------------------------------------------


# The largest graph ``lpdt topology`` describes: its spectral gap solves a dense n x n
# eigenproblem, whose time grows as n^3 (a 4,000-node directed ring took 60 s and 1.3 GB on the
# 2-core VM, 2026-11-30; 50,000 nodes asked for a 20 GB matrix).
MAX_CLI_NODES = 4096
SLOW_CLI_NODES = 1024  # from here on the command says what it computes first (1,024: about 4 s)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", default="directed_ring", help=f"one of: {', '.join(TOPOLOGIES)}")
    p.add_argument("--nodes", type=int, default=8, help=f"1 to {MAX_CLI_NODES:,}")
    p.add_argument("--rows", type=int, default=None, help="torus rows (default: most square)")
    p.add_argument(
        "--json",
        type=output_file,
        default=None,
        help="write the description to this JSON file (-: print it instead of the listing)",
    )


def _gap_text(gap: float) -> str:
    """Four decimals, or three significant digits for a gap under 0.001 (a 2,000-node ring's is
    3.3e-06, which four decimals print as 0.0000: a graph that never mixes)."""
    return f"{gap:.4f}" if gap == 0 or abs(gap) >= 1e-3 else f"{gap:.3g}"


def run(args: argparse.Namespace) -> int:
    if args.nodes > MAX_CLI_NODES:
        raise ValueError(
            f"--nodes {args.nodes:,}: at most {MAX_CLI_NODES:,} (the spectral gap is a dense "
            "n x n eigenproblem: 4,000 nodes of a directed ring take about a minute, n^3 beyond)"
        )
    if args.nodes >= SLOW_CLI_NODES:  # seconds to a minute without a word (a loaded VM: more)
        print(
            f"computing the spectral gap of {args.nodes:,} nodes (a dense n x n eigenproblem: "
            "about a minute at 4,000) ...",
            file=sys.stderr,
            flush=True,
        )
    d = describe(args.name, args.nodes, args.rows)
    if args.json == "-":
        emit_json(d, "-")
        return 0
    if args.json:  # first: the file is whole even if the reader of the listing stops early
        write_json_atomic(Path(args.json), d)
    print(
        f"{d['name']} on {d['nodes']} nodes: spectral gap {_gap_text(d['spectral_gap'])} "
        f"(second eigenvalue modulus {d['second_eigenvalue_modulus']:.4f})"
    )
    note = shape_note(args.name, args.nodes, args.rows)
    if note:
        print(note)
    for j, outs in enumerate(d["out_peers"]):
        print(f"  node {j:>2} -> {outs}")
    if args.json:
        print(f"wrote {args.json}")
    return 0
