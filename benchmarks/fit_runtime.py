"""Fit the plan's wall-time model (``lpdt.plan.runtime``) to the jobs of a finished pipeline.

Usage: ``.venv/bin/python benchmarks/fit_runtime.py [--results results] [--plan PLAN.tsv]``

Reads every training job's measured time (Snakemake's ``results/benchmarks/train/<id>.tsv``) and
its record, and fits by least squares, with the start-up and evaluation costs held at their
``runtime`` values,

    time - start-up - evaluation = samples x train_ms[model, precision, px]
                                 + rounds x nodes x gossiped entries x (gossip_ns + topk_ns [sparse])

(``rounds``: training iterations plus final gossip rounds; single-node runs do not gossip). A
compiled job (``train.compile`` with an entry in ``runtime.COMPILED_MS``) has its own per-sample
column, its compile time held at what its log says it spent compiling (else the ``COMPILED_MS``
value), so that the cold compiles of a fresh machine do not inflate the per-sample costs. It prints the fitted constants in the
form of ``runtime.STEP_MS`` / ``COMPILED_MS`` / ``GOSSIP_NS`` / ``TOPK_NS``, and
the estimate's error per job and in total, before and after the fit (in-sample: the fit is
checked on the jobs it was fitted to). New constants come with the machine they were fitted on:
record its speed probe too (``benchmarks/bench_runtime.py --probe 5 --jobs 2`` ->
``probe.PROBE_REF_MS``), or the plan will scale them by the old machine's probe.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

from lpdt import record
from lpdt.plan import runtime

COMPILED_LINE = re.compile(r"compiled the [a-z ]+ in ([0-9.]+) s")


def compile_seconds(log: Path) -> float | None:
    """Seconds a job spent compiling, from its log's "compiled the ... in X s" lines (None: no
    log, or nothing compiled). A cold compile (empty cache) takes minutes, a warm one seconds:
    holding the measured value keeps cold compiles out of the per-sample cost."""
    if not log.exists():
        return None
    found = [float(m.group(1)) for m in COMPILED_LINE.finditer(log.read_text(errors="replace"))]
    return sum(found) if found else None


def jobs(results: Path) -> list[dict]:
    out = []
    for bench in sorted((results / "benchmarks" / "train").glob("*.tsv")):
        rec_path = results / "runs" / bench.stem / record.METRICS_FILE
        if not rec_path.exists():
            continue
        rec = record.read(rec_path)
        cfg = rec.config
        seconds = runtime.benchmark_seconds(bench)
        if seconds is None:  # a job still running (its file being written): nothing to fit
            continue
        samples = (
            rec.time.iterations
            * (cfg["train"]["batch_size"] // cfg["topology"]["nodes"])
            * cfg["topology"]["nodes"]
        )
        key = (cfg["model"]["name"], cfg["precision"]["mode"], runtime.input_px(cfg))
        compiled = bool(cfg["train"].get("compile")) and key in runtime.COMPILED_MS
        out.append(
            {
                "run_id": rec.run_id,
                "cfg": cfg,
                "seconds": seconds,
                "samples": samples,
                "key": (*key, "compiled") if compiled else key,
                "estimate": runtime.run_seconds(cfg, samples),
                "compile_s": compile_seconds(results / "logs" / "train" / f"{bench.stem}.log"),
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="results")
    a = ap.parse_args()
    js = [j for j in jobs(Path(a.results)) if j["key"][:3] in runtime.STEP_MS]
    if not js:
        raise SystemExit(f"no finished training jobs with a benchmark file under {a.results}")
    keys = sorted({j["key"] for j in js})
    cols = len(keys) + 2
    x, y = np.zeros((len(js), cols)), np.zeros(len(js))
    for i, j in enumerate(js):
        cfg = j["cfg"]
        eval_ms = runtime.STEP_MS[j["key"][:3]][1]
        y[i] = j["seconds"] - runtime.START_S - runtime.evaluated_images(cfg) * eval_ms / 1e3
        if len(j["key"]) == 4:  # compiled: its compile time is held (measured, else the table's)
            measured = j["compile_s"]
            y[i] -= measured if measured is not None else runtime.warm_compile_seconds(cfg)
        x[i, keys.index(j["key"])] = j["samples"] / 1e3  # -> ms per sample
        units = runtime.gossip_units(cfg, j["samples"]) / 1e9  # -> ns per entry and round
        x[i, -2] = units
        x[i, -1] = units if runtime.sparse(cfg) else 0.0
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    coefs = dict(zip(keys, coef, strict=False))
    gossip_ns, topk_ns = float(coef[-2]), float(coef[-1])
    pred = x @ coef + (np.array([j["seconds"] for j in js]) - y)
    print("STEP_MS = {")
    for k, c in coefs.items():
        if len(k) == 3:
            print(f"    {k!r}: {(round(float(c), 3), runtime.STEP_MS[k][1])},")
    print("}\nCOMPILED_MS = {")
    for k, c in coefs.items():
        if len(k) == 4:
            print(f"    {k[:3]!r}: {(round(float(c), 3), *runtime.COMPILED_MS[k[:3]][1:])},")
    print("}")
    print(f"GOSSIP_NS = {gossip_ns:.2f}\nTOPK_NS = {topk_ns:.2f}")
    act = np.array([j["seconds"] for j in js])
    before = np.array([j["estimate"] for j in js])
    print(
        f"\n{len(js)} jobs: measured {act.sum():.0f} s; estimated {before.sum():.0f} s with the "
        f"current constants, {pred.sum():.0f} s with the fitted ones (in-sample)"
    )
    print(
        f"per job |error| / measured: median {np.median(abs(before - act) / act):.0%} -> "
        f"{np.median(abs(pred - act) / act):.0%}, largest {np.max(abs(before - act) / act):.0%}"
        f" -> {np.max(abs(pred - act) / act):.0%}"
    )
    worst = sorted(zip(js, pred, strict=True), key=lambda t: -abs(t[1] - t[0]["seconds"]))[:5]
    for j, p in worst:
        print(
            f"  {j['run_id']} {j['key']} nodes {j['cfg']['topology']['nodes']}: measured "
            f"{j['seconds']:.0f} s, fitted {p:.0f} s"
        )
    print(json.dumps({"gossip_ns": gossip_ns, "topk_ns": topk_ns}))
    print(
        "with new constants, record this machine's speed probe as probe.PROBE_REF_MS: "
        "benchmarks/bench_runtime.py --probe 5 --jobs 2"
    )


if __name__ == "__main__":
    main()
