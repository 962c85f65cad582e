"""What each run of a grid processes, for the plans (``lpdt.plan.table``, ``lpdt.plan.gpu_table``,
the workflow's job prices): training samples per run over all nodes, and the plan's one row per
run (its coordinates and samples)."""

from __future__ import annotations

from typing import Any

from lpdt.grid import GridRun, train_size


def samples_per_run(cfg: dict[str, Any]) -> int | None:
    """Training samples one run processes over all nodes (None if the dataset size is unknown).
    Iterations per epoch as the cost model counts them (equal partitions)."""
    from lpdt.cost.comm import iterations_per_epoch  # imports torch: only for the plan

    n, batch = cfg["topology"]["nodes"], cfg["train"]["batch_size"]
    per_node_batch = max(1, batch // n)
    size = train_size(cfg)
    if size is None:
        return None
    iters = iterations_per_epoch(size, n, batch)
    cap = cfg["train"].get("max_iters_per_epoch")
    if cap:
        iters = min(iters, cap)
    return iters * per_node_batch * n * cfg["train"]["epochs"]


def plan_rows(runs: dict[str, GridRun]) -> list[dict[str, Any]]:
    """One row per run: its id, studies, seed, coordinates and training samples."""
    rows = []
    for r in runs.values():
        c = r.config
        rows.append(
            {
                "run_id": r.run_id,
                "studies": ",".join(sorted(r.studies)),
                "seed": c.get("seed"),
                "dataset": c["data"]["dataset"],
                "model": c["model"]["name"],
                "precision": c["precision"]["mode"],
                "nodes": c["topology"]["nodes"],
                "topology": c["topology"]["name"],
                "algorithm": c["algorithm"]["name"],
                "compression": c["algorithm"]["compression"]["ratio"],
                "skew": c["partition"]["skew"],
                "epochs": c["train"]["epochs"],
                "samples": samples_per_run(c),
            }
        )
    return rows
