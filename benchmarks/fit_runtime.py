"""Fit the plan's wall-time model (``lpdt.plan.runtime``) to the jobs of a finished pipeline.

Usage: ``.venv/bin/python benchmarks/fit_runtime.py [--results results] [--speed fp32=1.8,...]
[--fit-start] [--hold GOSSIP_NS,minilm,...]``

A training job is what Snakemake timed (``results/benchmarks/train/<job>.tsv``): one run, or a
batch of runs that one ``lpdt train`` trained one after another (config ``batch_runs``; its runs
listed, in order, in the batch's stamp ``results/batches/<job>.txt``). Its time is
modelled as the plan models it (``runtime.run_seconds``, summed over its runs):

    time = fp32 x (START_S + (runs - 1) x BATCHED_START_S)
         + compiling (held at what the job's log says it spent: cold compiles stay out of the rest)
         + sum over its runs of
             evaluated images x eval_ms[key] x (its evaluation's factor)          (held)
           + samples x train_ms[key] x (its training steps' factor)
           + rounds x nodes x gossiped entries x (GOSSIP_NS + TOPK_NS [sparse]) x fp32

and the training and gossip constants are fitted by least squares (``--fit-start``: the two
start-up constants too; ``--hold``: the columns whose labels start with the given prefixes keep
the plan's values). ``key`` is the run's (model, precision, px), with its own column for a
compiled step (``runtime.COMPILED_MS``). The factors are the speed probe's on the machine that
ran the jobs: by default those the plan recorded beside its table
(``results/plan-<scale>.probe.json``), else ``--speed`` as the plan's line printed them
(``fp32=1.81,int8=2.21,int8_ops=1.99``), so the fitted constants are the reference machine's
whatever machine ran the jobs, and the probe's ``PROBE_REF_MS`` stays. With ``--speed
reference`` (1) they are the running machine's, and its probe must become ``PROBE_REF_MS``
(``benchmarks/bench_runtime.py --probe 5 --jobs 2``).

It prints each column's constant (fitted or held, beside the plan's) and each job's time:
measured, with the plan's constants and with these (in sample: the fit is checked on the jobs it
was fitted to, no measure of the plan's error elsewhere). Columns that the jobs cannot tell
apart (a model trained on one node count only: its gossip grows with its samples) make the
split between them arbitrary; the printed rank says when.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lpdt import record
from lpdt.plan import probe, runtime

COMPILED_LINE = re.compile(r"compiled the [a-z ]+ in ([0-9.]+) s")


def compile_seconds(log: Path) -> float | None:
    """Seconds a job spent compiling, from its log's "compiled the ... in X s" lines (0: none;
    None: no log). A cold compile (empty cache) takes minutes, a warm one seconds: holding the
    measured value keeps cold compiles out of the per-sample cost."""
    if not log.exists():
        return None
    found = [float(m.group(1)) for m in COMPILED_LINE.finditer(log.read_text(errors="replace"))]
    return sum(found)


@dataclass
class Run:
    run_id: str
    cfg: dict[str, Any]
    samples: int
    kinds: runtime.CostKinds


@dataclass
class Job:
    name: str
    seconds: float
    runs: list[Run]
    compile_s: float


def job_runs(results: Path, job: str) -> list[str]:
    """The runs a job trained, in order: its batch's stamp, else the job is one run."""
    stamp = results / "batches" / f"{job}.txt"
    if stamp.exists():
        return stamp.read_text().split()
    return [job]


def jobs(
    results: Path, speed: dict[str, float] | None = None, skipped: list[str] | None = None
) -> list[Job]:
    """Every finished training job under ``results`` whose runs all have a readable record and a
    cost (``runtime.cost_kinds``); the others are named in ``skipped``, with why. A job without a
    log is held at the plan's warm compiles on a machine of ``speed``."""
    out = []
    for bench in sorted((results / "benchmarks" / "train").glob("*.tsv")):
        seconds = runtime.benchmark_seconds(bench)
        if seconds is None:  # a job still running (its file being written): nothing to fit
            continue
        runs = []
        for run_id in job_runs(results, bench.stem):
            try:
                rec = record.read(results / "runs" / run_id / record.METRICS_FILE)
            except record.RecordError as e:
                why = f"{bench.stem}: {e}"
                break
            cfg = rec.config
            kinds = runtime.cost_kinds(cfg)
            if kinds is None:
                why = f"{bench.stem}: run {run_id} has no cost in lpdt.plan.runtime.STEP_MS"
                break
            samples = rec.time.iterations * runtime.per_node_batch(cfg) * cfg["topology"]["nodes"]
            runs.append(Run(run_id, cfg, samples, kinds))
        else:
            measured = compile_seconds(results / "logs" / "train" / f"{bench.stem}.log")
            if measured is None:  # no log: each graph's first run compiles warm, as planned
                graphs = {runtime.compiled_shape(r.cfg): r for r in runs if r.kinds.compiled}
                measured = sum(
                    r.kinds.factors(speed)[2] * runtime.warm_compile_seconds(r.cfg)
                    for r in graphs.values()
                )
            out.append(Job(bench.stem, seconds, runs, measured))
            continue
        if skipped is not None:
            skipped.append(why)
    return out


def parse_speed(text: str | None, results: Path) -> dict[str, float] | None:
    """``--speed``: ``fp32=1.81,int8=2.21,int8_ops=1.99`` -> factors; ``reference`` -> None (the
    reference machine); none given: the factors the newest plan under ``results`` scaled its
    estimates by (``plan-<scale>.probe.json``, which ``snakemake plan`` writes beside its table),
    else None."""
    if not text:
        plans = sorted(results.glob("plan-*.probe.json"), key=lambda p: p.stat().st_mtime)
        if not plans:
            print("--speed: no plan's factors under the results: the reference machine's (1)")
            return None
        try:
            speed = probe.read_factors(plans[-1])
        except ValueError as e:
            raise SystemExit(f"--speed: {e}") from None
        print(f"--speed: {speed or 'the reference machine (unscaled)'}, from {plans[-1]}")
        return speed
    if text == "reference":
        return None
    try:
        pairs = [item.split("=") for item in text.split(",")]
        return {k.strip(): float(v) for k, v in pairs}
    except ValueError as e:
        raise SystemExit(f"--speed {text!r}: expected KIND=FACTOR,... ({e})") from e


def design(
    js: list[Job], speed: dict[str, float] | None, fit_start: bool
) -> tuple[list[Any], np.ndarray, np.ndarray]:
    """(column names, the design matrix, the measured times less the held terms)."""
    keys = sorted(
        {
            (*r.kinds.key, "compiled") if r.kinds.compiled else r.kinds.key
            for j in js
            for r in j.runs
        }
    )
    names: list[Any] = [*keys, "GOSSIP_NS", "TOPK_NS"] + (
        ["START_S", "BATCHED_START_S"] if fit_start else []
    )
    x, y = np.zeros((len(js), len(names))), np.zeros(len(js))
    for i, j in enumerate(js):
        y[i] = j.seconds - j.compile_s
        base = j.runs[0].kinds.factors(speed)[2]
        later = len(j.runs) - 1
        if fit_start:
            x[i, names.index("START_S")] = base
            x[i, names.index("BATCHED_START_S")] = base * later
        else:
            y[i] -= base * (runtime.START_S + later * runtime.BATCHED_START_S)
        for r in j.runs:
            train_f, eval_f, base = r.kinds.factors(speed)
            key = (*r.kinds.key, "compiled") if r.kinds.compiled else r.kinds.key
            y[i] -= eval_f * runtime.evaluated_images(r.cfg) * runtime.STEP_MS[r.kinds.key][1] / 1e3
            x[i, names.index(key)] += train_f * r.samples / 1e3  # -> ms per sample
            units = base * runtime.gossip_units(r.cfg, r.samples) / 1e9  # -> ns per entry
            x[i, names.index("GOSSIP_NS")] += units
            x[i, names.index("TOPK_NS")] += units if runtime.sparse(r.cfg) else 0.0
    return names, x, y


def label(name: Any) -> str:
    """A column's name as ``--hold`` matches it: ``resnet8/int8/12/compiled``, ``GOSSIP_NS``."""
    return name if isinstance(name, str) else "/".join(str(part) for part in name)


def current(name: Any) -> float:
    """The plan's constant for a column of ``design``."""
    if isinstance(name, str):
        return float(getattr(runtime, name))
    if len(name) == 4:
        return runtime.COMPILED_MS[name[:3]][0]
    return runtime.STEP_MS[name][0]


def held_columns(names: list[Any], hold: tuple[str, ...]) -> np.ndarray:
    """Which columns ``hold`` names (their labels start with one of its prefixes); a prefix that
    names none is an error, not a fit of everything."""
    labels = [label(n) for n in names]
    unknown = [h for h in hold if not any(lab.startswith(h) for lab in labels)]
    if unknown:
        raise SystemExit(
            f"--hold {','.join(unknown)}: no such column; columns: {', '.join(labels)}"
        )
    return np.array([lab.startswith(hold) if hold else False for lab in labels], dtype=bool)


def least_squares(
    names: list[Any], x: np.ndarray, y: np.ndarray, hold: tuple[str, ...] = ()
) -> tuple[np.ndarray, np.ndarray, int]:
    """(the constants: the plan's own for the columns ``hold`` names, fitted for the others, 0
    for a column no job uses; which were fitted; their rank)."""
    held = held_columns(names, hold)
    coef = np.array([current(n) if h else 0.0 for n, h in zip(names, held, strict=True)])
    fit = x.any(axis=0) & ~held
    coef[fit], *_ = np.linalg.lstsq(x[:, fit], y - x @ coef, rcond=None)
    return coef, fit, int(np.linalg.matrix_rank(x[:, fit]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="results")
    ap.add_argument(
        "--speed",
        help="the probe's factors on the machine that ran the jobs (KIND=FACTOR,...; "
        "'reference': none; default: those the newest plan under --results recorded)",
    )
    ap.add_argument("--fit-start", action="store_true", help="fit START_S and BATCHED_START_S")
    ap.add_argument(
        "--hold",
        default="",
        help="columns held at the plan's values: comma-separated prefixes of their labels "
        "(resnet8/int8, GOSSIP_NS, minilm, ...)",
    )
    a = ap.parse_args()
    speed = parse_speed(a.speed, Path(a.results))
    skipped: list[str] = []
    js = jobs(Path(a.results), speed, skipped)
    for why in skipped:
        print(f"skipped {why}")
    if not js:
        raise SystemExit(f"no finished training jobs with a benchmark file under {a.results}")
    names, x, y = design(js, speed, a.fit_start)
    coef, fitted, rank = least_squares(names, x, y, tuple(h for h in a.hold.split(",") if h))
    print(
        f"{len(js)} jobs, {sum(len(j.runs) for j in js)} runs; {int(fitted.sum())} columns "
        f"fitted, rank {rank}"
        + (" (the split between them is arbitrary)" if rank < fitted.sum() else "")
    )
    for name, value, fit in zip(names, coef, fitted, strict=True):
        how = "fitted" if fit else "held"
        print(f"  {label(name):<26} {value:8.3f}  ({how}; the plan's: {current(name)})")
    act = np.array([j.seconds for j in js])
    held_s = act - y
    before = x @ np.array([current(n) for n in names]) + held_s
    pred = x @ coef + held_s
    print(
        f"\nmeasured {act.sum():,.0f} s; estimated {before.sum():,.0f} s with the plan's constants "
        f"and {pred.sum():,.0f} s with these (in sample), each with the compile time its log "
        "measured"
    )
    for j, b, p in sorted(zip(js, before, pred, strict=True), key=lambda t: -t[0].seconds):
        print(
            f"  {j.name:<28} {len(j.runs):>3} runs {label(j.runs[0].kinds.key):<18} measured "
            f"{j.seconds:7.0f} s  compile {j.compile_s:5.0f} s  plan's {b:7.0f}  these {p:7.0f}"
        )


if __name__ == "__main__":
    main()
