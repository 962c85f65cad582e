"""Valid run records (``lpdt.record``) with the numbers a test chooses, for the readers' tests
(tracking, report) that need finished runs without training them."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from typing import Any

from lpdt.config import RunConfig, deep_merge
from lpdt.record import (
    Communication,
    DatasetRecord,
    FinalMetrics,
    HistoryRow,
    ModelRecord,
    Provenance,
    RunRecord,
    SystemMetrics,
    Timing,
    Versions,
)

STARTED = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def fake_record(
    run_id: str = "run00",
    acc: float = 50.0,
    *,
    status: str = "ok",
    epochs: int = 3,
    epoch_s: float = 10.0,
    stand_in: bool = True,
    config: dict[str, Any] | None = None,
    gb_per_node: float = 1.0,
    total_s: float | None = None,
    provenance: dict[str, Any] | None = None,
) -> RunRecord:
    """A complete record: ``epochs`` epochs of ``epoch_s`` seconds each, evaluated every epoch
    (node-mean accuracy ``acc - 5 + e``, average model ``acc - 4 + e``, loss ``2 - e / 10``),
    then final metrics around ``acc`` (min ``acc - 1``, max ``acc + 1``, average model
    ``acc + 0.5``) unless ``status`` is "diverged" (no final metrics, the last epoch's loss NaN).
    Epoch rows and the ``system`` section carry fixed system metrics (CPU share ``40 + e`` %,
    "Test CPU 9000" with 4 cores). ``config`` is deep-merged over the default run config;
    ``provenance`` over a fixed one (started at ``STARTED``)."""
    cfg = deep_merge(RunConfig().to_dict(), config or {})
    history = [
        HistoryRow(
            epoch=e,
            lr=0.1,
            train_loss=2.0 - e / 10,
            acc_node_mean=acc - 5 + e,
            acc_avg_model=acc - 4 + e,
            consensus_distance=0.1,
            bytes_per_node=1e6 * (e + 1),
            wall_s=epoch_s * (e + 1),
            cpu_share=40.0 + e,
            peak_rss_mb=500.0 + e,
            threads=8,
            images_per_s=100.0,
        )
        for e in range(epochs)
    ]
    final = None
    if status == "ok":
        final = FinalMetrics(
            acc_node_mean=acc,
            acc_node_min=acc - 1,
            acc_node_max=acc + 1,
            acc_avg_model=acc + 0.5,
            consensus_distance=0.1,
            train_loss=1.0,
        )
        history.append(
            HistoryRow(
                epoch="final",
                **dataclasses.asdict(final),
                bytes_per_node=1e6 * (epochs + 1),
                wall_s=epoch_s * epochs + 1.0,
            )
        )
    else:
        history[-1] = HistoryRow(epoch=epochs - 1, lr=0.1, train_loss=math.nan)
    total = total_s if total_s is not None else epoch_s * epochs + 1.0
    prov = Provenance.from_dict(
        {
            "lpdt_version": "0.1.0",
            "git_commit": "c" * 40,
            "git_dirty": False,
            "command": "lpdt train",
            "host": "trainer",
            "device": "cpu",
            "gpu": None,
            "python": "3.11",
            "torch": "2.x",
            "cuda": None,
            "started": STARTED.isoformat(),
            "finished": (STARTED + dt.timedelta(seconds=total + 1.0)).isoformat(),
            **(provenance or {}),
        }
    )
    return RunRecord(
        run_id=run_id,
        name=None,
        status=status,  # type: ignore[arg-type]
        config=cfg,
        dataset=DatasetRecord(
            name="fashion_mnist" if stand_in else "cifar10",
            source="test",
            stand_in=stand_in,
            stand_in_for="cifar10" if stand_in else None,
            num_classes=10,
            train_samples=1000,
            test_samples=200,
        ),
        model=ModelRecord(name=cfg["model"]["name"], params=1000, gossiped=1000),
        final=final,
        communication=Communication(
            bytes_per_message=4004,
            messages_per_node=250.0,
            bytes_per_node=gb_per_node * 1e9,
            bytes_per_node_train=gb_per_node * 1e9,
            gb_per_node=gb_per_node,
            gb_per_node_train=gb_per_node,
            gb_per_node_8bit_analytic=gb_per_node / 4,
        ),
        time=Timing(
            train_s=epoch_s * epochs,
            total_s=total,
            images_per_s=100.0,
            s_per_iter=0.1,
            iterations=10 * epochs,
        ),
        epochs_completed=epochs,
        iters_per_epoch=10,
        history=tuple(history),
        device="cpu",
        provenance=prov,
        versions=Versions(lpdt="0.1.0", torch="2.x", python="3.11"),
        system=SystemMetrics(
            cpu_model="Test CPU 9000",
            cpu_count=4,
            cpu_s=epoch_s * epochs * 1.6,
            cpu_share=40.0,
            peak_rss_mb=502.0,
            threads_max=8,
        ),
    )
