"""The plan of a GPU scale (``snakemake plan --config scale=paper``): every run priced on one H100
(``lpdt.plan.gpu``), the grid's GPU-hours with a low-high range, evaluation's share, the three
most expensive model x precision groups, and what each lever would change (``LEVERS``).
Writes the per-run table with each price's basis (docs/compute.md, "The paper's price")."""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lpdt import grid
from lpdt.plan import gpu, runtime
from lpdt.plan.samples import plan_rows

# The 8-bit step issue 51 aims at: the batched compiled 8-bit round at most 2x the fp32 one.
INT8_TARGET = 2.0


# The levers the plan prints beside the grid total: what the price would be if ...
LEVERS = {
    "int8": f"the 8-bit step cost {INT8_TARGET:g}x the fp32 step (issue 51's target)",
    "reader": "the host's data term were its reader's alone (the loop no longer waits for the GPU)",
    "both": "both of these",
    "floor": "k jobs shared each GPU, at best: each run's GPU work (FLOPs, bytes, kernels)",
}


def levers(
    cfg: Mapping[str, Any], samples: int | None, lm: gpu.LaunchModel, price: gpu.Price, k: int
) -> dict[str, tuple[float, float, float]]:
    """Each lever's (low, central, high) GPU-seconds for one run that ``price`` prices at k
    jobs per GPU (``LEVERS``): the 8-bit step at ``INT8_TARGET`` x fp32's, the data term the
    reader's alone, both, and the run's GPU work (``gpu.Price.work``: the least GPU time any
    number of jobs per GPU leaves it)."""

    def share(p: gpu.Price | None) -> tuple[float, float, float]:
        assert p is not None  # priced as ``price`` was, with a lever
        return gpu_share(shared(p, cfg["model"]["name"], k), k)

    return {
        "int8": share(gpu.run_price(cfg, samples, lm, int8_as_fp32=INT8_TARGET)),
        "reader": share(gpu.run_price(cfg, samples, lm, reader_only=True)),
        "both": share(gpu.run_price(cfg, samples, lm, int8_as_fp32=INT8_TARGET, reader_only=True)),
        "floor": price.work,
    }


def shared(price: gpu.Price, model: str, k: int) -> gpu.Price:
    """``price`` of a run that shares its GPU with k - 1 other jobs: slowed by their measured
    slowdown (``gpu.share_slowdown``; none where k is 1)."""
    return price.scaled(gpu.share_slowdown(model, k, price.batched) or 1.0)


def gpu_share(price: gpu.Price, k: int) -> tuple[float, float, float]:
    """The (low, central, high) GPU-seconds of a run priced ``price`` (``shared`` already) at k
    jobs per GPU: its share of the GPU."""
    return (price.low / k, price.seconds / k, price.high / k)


def job_k(config: Mapping[str, Any], model: str, batched: bool, on_cluster: bool) -> int:
    """k, the run's jobs per GPU in the price: config gpu_jobs_per_gpu, but 1 where its
    slowdown s(k) was not measured (``gpu.share_slowdown``; batched jobs: never) and on a
    cluster without GPU shards (config slurm_gpu_shards 0: a whole GPU per job)."""
    from lpdt.gpus import jobs_per_gpu

    k = jobs_per_gpu(config.get("gpu_jobs_per_gpu", "auto"), model)
    if on_cluster and int(config.get("slurm_gpu_shards", 0) or 0) <= 0:
        return 1
    return k if gpu.share_slowdown(model, k, batched) is not None else 1


def write_gpu_plan(
    runs: Mapping[str, grid.GridRun],
    config: Mapping[str, Any],
    scale: str,
    out: str | Path,
    on_cluster: bool = False,
) -> None:
    """Price every run, print the totals and write one row per run to ``out``."""
    lm = gpu.fit()
    rows = plan_rows(dict(runs))
    jobs: list[tuple[float, int]] = []
    # GPU-seconds (low, central, high) with each lever (``levers``)
    lever = {name: [0.0, 0.0, 0.0] for name in LEVERS}
    group: dict[tuple[str, str], float] = {}
    samples: Counter[tuple[str, str]] = Counter()
    low_high: dict[tuple[str, str], list[float]] = {}
    total = [0.0, 0.0, 0.0]
    eval_s = 0.0
    eval_share = 0.0
    unpriced = 0
    for r in rows:
        cfg = runs[r["run_id"]].config
        r["job"] = r["run_id"]
        price = gpu.run_price(cfg, r["samples"], lm)
        g = (r["model"], r["precision"])
        samples[g] += r["samples"] or 0
        if price is None:
            unpriced += 1
            r.update(est_s=None, low_s=None, high_s=None, eval_s=None, k=None, basis="no counts")
            continue
        k = job_k(config, r["model"], price.batched, on_cluster)
        price = shared(price, r["model"], k)
        r.update(
            est_s=round(price.seconds),
            low_s=round(price.low),
            high_s=round(price.high),
            eval_s=round(price.eval_s),
            k=k,
            basis=price.basis,
        )
        jobs.append((price.seconds, k))
        own = gpu_share(price, k)
        total = [t + o for t, o in zip(total, own, strict=True)]
        group[g] = group.get(g, 0.0) + own[1]
        low_high.setdefault(g, [0.0, 0.0])
        low_high[g] = [low_high[g][0] + own[0], low_high[g][1] + own[2]]
        eval_s += price.eval_s / k
        eval_share = max(eval_share, price.eval_s / price.seconds)
        for name, seconds in levers(cfg, r["samples"], lm, price, k).items():
            lever[name] = [x + y for x, y in zip(lever[name], seconds, strict=True)]
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t")
        w.writeheader()
        w.writerows(rows)
    if unpriced == len(rows):  # it printed "~0 GPU-hours (range 0-0)" and levers at ~0
        print(
            f"scale {scale}: none of its {len(rows)} runs can be priced on {gpu.MACHINE}: "
            "lpdt.plan.counts holds the step counts of the paper grid's models and input sizes "
            "only; plan_machine=cpu prices this scale on this machine"
        )
        print(f"per-run table: {out}")
        return
    n_gpus = int(config.get("plan_gpus", 1))
    measured = sum(1 for r in rows if str(r["basis"]).startswith("measured"))
    h = [t / 3600 for t in total]
    print(f"scale {scale}: {len(rows)} runs, {sum(samples.values()):,} training samples in all")
    for g in sorted(samples):
        lo, hi = (x / 3600 for x in low_high.get(g, [0.0, 0.0]))
        print(
            f"  {g[0]:<12} {g[1]:<5} {samples[g]:>13,} samples  ~{group.get(g, 0.0) / 3600:7.1f} GPU-h "
            f"({lo:.1f}-{hi:.1f})"
        )
    print(
        f"price of each run on {gpu.MACHINE}: {measured} measured, "
        f"{len(rows) - measured - unpriced} derived (the basis column of {out}; lpdt.plan.gpu)"
    )
    print(
        f"grid total: ~{h[1]:.0f} GPU-hours (range {h[0]:.0f}-{h[2]:.0f}); evaluation "
        f"{eval_s / max(total[1], 1e-9):.1%} of it, at most {eval_share:.1%} of a run"
    )
    ks = sorted({k for _, k in jobs}) or [1]
    wall = runtime.shared_gpu_wall_seconds(jobs, n_gpus)
    why = (
        "a whole GPU per SLURM job (slurm_gpu_shards 0)" if on_cluster else "k > 1 only as measured"
    )
    print(
        f"wall time on {n_gpus} GPU(s): ~{wall / 3600:.0f} h, "
        f"{', '.join(map(str, ks))} job(s) per GPU ({why})"
    )
    top = sorted(group.items(), key=lambda x: -x[1])[:3]
    print(
        "most expensive: "
        + ";  ".join(
            f"{m} {p} ~{s / 3600:.0f} GPU-h ({s / max(total[1], 1e-9):.0%})" for (m, p), s in top
        )
    )
    print("what would change it (levers, none measured on a GPU yet):")
    for name, text in LEVERS.items():
        lo, mid, hi = (x / 3600 for x in lever[name])
        print(f"  {text}: ~{mid:.0f} GPU-hours (range {lo:.0f}-{hi:.0f})")
    if unpriced:
        print(f"  ({unpriced} runs have no step counts in lpdt.plan.counts and are not counted)")
    print(f"per-run table: {out}")
