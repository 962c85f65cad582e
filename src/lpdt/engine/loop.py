"""The lifecycle of one training run, in the torchtune manner: open the run directory (or return
a complete run), set up or resume (``_resume``), loop over the epochs (train, evaluate, history,
checkpoint; divergence ends it), finish (final gossip rounds and evaluation, the record; the
caller, ``lpdt train``, logs it to MLflow). The numerics are ``lpdt.engine.run.Run``; the lines
it prints ``lpdt.engine.console``.

Outputs (``docs/architecture.md``): ``config.yaml``, ``history.csv`` (rewritten atomically after
every epoch), ``metrics.json`` (written last, atomically) and, while running, ``checkpoint.pt``
(removed once the run is complete).
"""

from __future__ import annotations

import dataclasses
import math
import platform
import time
from collections.abc import Iterable
from pathlib import Path

import torch

import lpdt
from lpdt import provenance, record
from lpdt.config import RunConfig, dump_config
from lpdt.decentral.group import LocalGroup, NodeGroup
from lpdt.engine.console import (
    PROGRESS_EVERY_S,
    Progress,
    epoch_line,
    run_notes,
    start_line,
)
from lpdt.engine.device import Log, print_line, resolve_device
from lpdt.engine.faults import fault_point
from lpdt.engine.run import Run
from lpdt.engine.rundir import (
    engine_checkpoints,
    forced,
    keep_record_copy,
    open_run_dir,
    previous,
    restorable,
)
from lpdt.engine.schedule import lr_at
from lpdt.engine.sysmetrics import SystemSampler
from lpdt.io import torch_save_atomic, write_text_atomic
from lpdt.record import (
    Communication,
    DatasetRecord,
    FinalMetrics,
    HistoryRow,
    ModelRecord,
    Provenance,
    RunRecord,
    Status,
    Timing,
    Versions,
)


def train(
    cfg: RunConfig,
    out_dir: str | Path,
    resume: bool = False,
    force: bool = False,
    log: Log = print_line,
    group: NodeGroup | None = None,
) -> RunRecord:
    """Run (or resume, or skip if complete) one experiment in this process; returns the run's
    record (a complete run: the one read from its ``metrics.json``). ``lpdt.engine.train``
    picks the engine and is the entry point for both.

    Files already in ``out_dir`` (a complete run, a started run's ``config.yaml``, a checkpoint
    to resume) must belong to ``cfg`` (``lpdt.engine.rundir``: same config up to
    ``lpdt.config.EXECUTION_KEYS``, else ``RunDirError``). ``force`` discards them instead.

    ``engine: distributed``: every worker process (``lpdt.engine.worker``) runs this function with its
    ``group`` (the node it holds); the writer (process 0) alone writes ``config.yaml``,
    ``history.csv`` and ``metrics.json``, and each process its own checkpoint. Without a
    ``group`` such a config is refused (one process cannot hold one node of n).
    """
    if cfg.engine == "distributed" and group is None:
        raise ValueError(
            "engine: distributed runs one process per node: start it with lpdt.engine.train "
            "(or lpdt train), not lpdt.engine.loop.train"
        )
    group = group or LocalGroup(cfg.topology.nodes)
    out = Path(out_dir)
    metrics_path, ck_path = out / record.METRICS_FILE, out / group.checkpoint_name
    done = open_run_dir(cfg, out, force, [ck_path, previous(ck_path)], log, resume)
    if done is not None:
        return done
    prov = provenance.capture(resolve_device(cfg.device))

    run = Run(cfg, log, group)
    if force:  # the run has started (its data read, its model built): the old one goes now
        if group.writer:
            forced(out)
        group.barrier()  # before any process saves a checkpoint of its own
    # Every process takes part (a distributed run's processes must all start at one epoch).
    holds, wall0, prov = _resume(cfg, run, ck_path, resume, prov, log)
    out.mkdir(parents=True, exist_ok=True)
    if group.writer:
        write_text_atomic(out / record.CONFIG_FILE, dump_config(cfg))
    log(start_line(cfg, run))
    for note in run_notes(cfg, run):
        log(note)

    status: Status = "ok"
    t_start = time.perf_counter()

    def wall() -> float:
        return wall0 + time.perf_counter() - t_start

    progress = Progress(run, cfg.train.epochs, log, PROGRESS_EVERY_S)
    system = SystemSampler(group.total(run.samples), run.train_s)  # CPU, memory, threads, images/s
    while run.epoch < cfg.train.epochs:
        epoch = run.epoch
        lr = lr_at(cfg, epoch)
        loss = run.train_epoch(lr, progress.after_gradients)
        fields: dict[str, float | None] = {"epoch": epoch, "lr": lr, "train_loss": loss}
        if math.isnan(loss):
            status = "diverged"
            run.history.append(HistoryRow.from_dict(fields))
            if group.writer:
                record.write_history(out, run.history)
            log(  # numbered as the epoch lines are, from 1
                f"epoch {epoch + 1}/{cfg.train.epochs}: training diverged (non-finite loss or "
                "weights); stopping"
            )
            break
        last = epoch == cfg.train.epochs - 1
        if cfg.train.curve_images:  # the accuracy curve, every epoch (changes nothing)
            fields.update(run.evaluate_curve(epoch))
        if (epoch + 1) % cfg.train.eval_every == 0 and not last:
            fields.update(run.evaluate_all())
        wall_s = wall()
        fields.update(bytes_per_node=run.bytes_train, wall_s=wall_s)
        fields.update(system.epoch(group.total(run.samples), run.train_s))
        row = HistoryRow.from_dict(fields)
        run.history.append(row)
        run.epoch += 1
        if group.writer:  # grows by a row per epoch, for watching a run
            record.write_history(out, run.history)
        log(epoch_line(row, cfg.train.epochs, None if last else progress.eta_s()))
        if not last and run.epoch % cfg.train.checkpoint_every == 0:
            holds = _save_checkpoint(cfg, run, ck_path, holds, wall_s, prov)

    final: FinalMetrics | None = None
    wire_train = group.wire_bytes()  # measured (distributed engine), before the final rounds
    if status == "ok":
        run.final_gossip()
        last_loss = run.history[-1].train_loss
        assert last_loss is not None  # the last row is an epoch's: it has its training loss
        final = FinalMetrics(**run.evaluate_all(), train_loss=last_loss)
        run.history.append(
            HistoryRow(
                epoch="final",
                **vars(final),
                bytes_per_node=run.bytes_train + run.bytes_final,
                wall_s=wall(),
            )
        )
        log(
            f"final (after {cfg.train.final_gossip_rounds} gossip rounds): node accuracy "
            f"{final.acc_node_mean:.2f} % (min {final.acc_node_min:.2f}, max "
            f"{final.acc_node_max:.2f}), average model {final.acc_avg_model:.2f} %"
        )

    rec = _run_record(cfg, run, status, final, prov, system, wire_train, total_s=wall())
    if group.writer:
        rec.write(out)  # history.csv, then metrics.json last: its presence means "complete"
        keep_record_copy(out)
    group.barrier()  # the record is written: now every process may drop its checkpoint
    ck_path.unlink(missing_ok=True)
    previous(ck_path).unlink(missing_ok=True)
    log(f"wrote {metrics_path}")
    return rec


def _resume(
    cfg: RunConfig, run: Run, ck_path: Path, resume: bool, prov: Provenance, log: Log
) -> tuple[Path | None, float, Provenance]:
    """Restore ``run`` from the newest epoch that every process can restore (with ``resume``;
    every process must call this, it is a collective). Returns which of this process's files
    holds the restored epoch (``None``: a fresh start), the wall time of the earlier sessions,
    and the provenance of the record (that of the session that started the run)."""
    found = restorable(cfg, ck_path) if resume else {}
    target = _common_epoch(run.group, found)
    if target:
        holds, ck = found[target]
        run.restore(ck)
        last_wall = run.history[-1].wall_s if run.history else None
        wall0 = float(ck.wall_s if ck.wall_s is not None else last_wall or 0.0)
        if ck.provenance:  # the record describes the session that started the run
            first = Provenance.from_dict(ck.provenance, str(holds))
            prov = provenance.resumed(first, prov, run.epoch)
        log(f"resumed from {holds} after epoch {run.epoch}")
        return holds, wall0, prov
    if found:
        log(
            f"note: not every process has a checkpoint of one epoch (this one has epochs "
            f"{sorted(found)}); starting from scratch"
        )
    elif resume and run.group.writer and not engine_checkpoints(ck_path.parent):
        # a mistyped --out trained a new run without a word (another rank's checkpoint: the
        # note above, from that rank)
        log(f"note: --resume: no checkpoint to resume in {ck_path.parent}; starting at epoch 1")
    return None, 0.0, prov


def _save_checkpoint(
    cfg: RunConfig, run: Run, ck_path: Path, holds: Path | None, wall_s: float, prov: Provenance
) -> Path:
    """Save ``run`` after its epoch ``run.epoch`` to ``ck_path``; ``holds``: which of this
    process's files holds its previous epoch (``None``: none of this session's). Returns the
    file that holds the new epoch. In the distributed engine the epoch before stays (as
    ``.prev``) until the new one is saved, so that the processes can agree on an epoch
    whenever they are killed (``_common_epoch``)."""
    group = run.group
    ck = dataclasses.replace(
        run.checkpoint(), run_config=cfg.to_dict(), wall_s=wall_s, provenance=prov.to_dict()
    )
    fault_point("before-save", group, run.epoch)
    if group.engine == "distributed":  # keep the epoch before until all have saved
        if holds == ck_path:  # this run's previous epoch
            ck_path.replace(previous(ck_path))
        elif holds is None:  # a fresh start: any older file is another session's
            previous(ck_path).unlink(missing_ok=True)
        # (holds == the .prev file: it is the epoch before; the current one is replaced)
        fault_point("after-rename", group, run.epoch)
    torch_save_atomic(ck_path, ck.to_dict())
    return ck_path


def _run_record(
    cfg: RunConfig,
    run: Run,
    status: Status,
    final: FinalMetrics | None,
    prov: Provenance,
    system: SystemSampler,
    wire_train: float | None,
    total_s: float,
) -> RunRecord:
    """The run's record (``lpdt.record``) from the finished ``run``: ``wire_train`` is the
    measured wire bytes before the final gossip rounds, ``total_s`` the wall time across
    resumes."""
    st, info, group = run.state, run.data.info, run.group
    total_bytes = run.bytes_train + run.bytes_final
    final_rounds = cfg.train.final_gossip_rounds if status == "ok" else 0  # a diverged run: none
    wire_total = group.wire_bytes()
    samples = group.total(run.samples)  # over all processes
    return RunRecord(
        run_id=cfg.run_id(),
        name=cfg.name,
        status=status,
        config=cfg.to_dict(),
        dataset=DatasetRecord(
            name=info.name,
            source=info.source,
            stand_in=info.stand_in,
            stand_in_for=info.stand_in_for,
            num_classes=info.num_classes,
            train_samples=int(run.train_samples),
            test_samples=int(len(run.data.labels("test"))),
        ),
        model=ModelRecord(name=cfg.model.name, params=st.p_train, gossiped=st.p_total),
        final=final,
        communication=Communication(
            bytes_per_message=run.msg_bytes,
            messages_per_node=run.msgs_per_round * (run.iterations + final_rounds),
            bytes_per_node=total_bytes,
            bytes_per_node_train=run.bytes_train,
            gb_per_node=total_bytes / 1e9,
            gb_per_node_train=run.bytes_train / 1e9,
            gb_per_node_8bit_analytic=total_bytes / 4e9,
            wire_bytes_per_node=wire_total,
            wire_bytes_per_node_train=wire_train,
        ),
        time=Timing(
            train_s=run.train_s,
            total_s=total_s,
            images_per_s=samples / run.train_s if run.train_s else None,
            s_per_iter=run.train_s / run.iterations if run.iterations else None,
            iterations=run.iterations,
        ),
        epochs_completed=run.epoch,
        iters_per_epoch=run.iters,
        history=tuple(run.history),
        device=str(run.device),
        provenance=dataclasses.replace(prov, finished=provenance.utc_now()),
        versions=Versions(
            lpdt=lpdt.__version__, torch=torch.__version__, python=platform.python_version()
        ),
        engine=group.engine,
        system=system.summary(),
    )


def _common_epoch(group: NodeGroup, epochs: Iterable[int]) -> int:
    """The newest epoch that every process of the run can restore; 0 (start from scratch) when
    there is none, e.g. a process killed before its first save.

    A distributed process saves epoch e only after every process has finished saving epoch e - 1
    (epoch e's gossip and reductions need all of them), and keeps e - 1 as ``.prev`` until its
    save of e is complete: so wherever processes are killed, they hold epochs e and e - 1 between
    them and agree on one, or some process has none (it died before its first save)."""
    mine = sorted(epochs, reverse=True)[:2]
    row = torch.tensor([mine + [-1] * (2 - len(mine))], dtype=torch.float64)  # [1, 2]
    rows = group.gather(row).reshape(-1, 2).tolist()  # one row per process
    common = set.intersection(*({int(e) for e in r if e >= 0} for r in rows))
    return max(common, default=0)
