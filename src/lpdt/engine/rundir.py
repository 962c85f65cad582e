"""The rules of a run directory, shared by both engines (``lpdt.engine.loop`` and
``lpdt.engine.launch``).

Files already in a run's ``--out`` (a complete run's ``metrics.json``, a started run's
``config.yaml``, a checkpoint to resume) must belong to the run's config: the same config up to
``lpdt.config.EXECUTION_KEYS``, else ``RunDirError`` (one line; the CLI exits 2). ``--force``
discards them instead. A complete run of the same config is returned as it is.

A complete run's record is kept a second time, in ``.record-copy.json`` (``RECORD_COPY``), and
put back when its files are gone: Snakemake removes a job's outputs (``metrics.json``,
``history.csv``, ``config.yaml``) before it reruns the job and after the job fails, and a
complete run has no checkpoint left, so a job forced to run again (Snakemake stopped while its
jobs finished, then ``--rerun-incomplete``; SIGTERM during the MLflow log after training)
trained the run from scratch.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import torch
import yaml

from lpdt import record
from lpdt.config import RunConfig, result_diff
from lpdt.engine.checkpoint import Checkpoint, CheckpointError
from lpdt.errors import LpdtError
from lpdt.io import TORCH_LOAD_ERRORS, make_dirs, write_json_atomic, write_text_atomic
from lpdt.record import RunRecord


class RunDirError(LpdtError, ValueError):
    """The output directory holds files of a run of another config (the CLI exits 2)."""


def refuse_other_config(cfg: RunConfig, stored: Any, where: Path) -> None:
    """Raise ``RunDirError`` unless ``stored`` (a config tree found in a run directory) has
    ``cfg``'s result-affecting values (``lpdt.config.EXECUTION_KEYS`` may differ)."""
    keys = result_diff(cfg, stored) if isinstance(stored, dict) and stored else ["no config"]
    if keys:
        shown = ", ".join(keys[:8]) + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")
        raise RunDirError(
            f"{where} is from a run of another config (differs in: {shown}); "
            "pass --force to overwrite that run, or choose another --out"
        )


def check_run_dir(cfg: RunConfig, out: Path, log: Callable[[str], None]) -> None:
    """A complete run (``metrics.json``) or a started one (``config.yaml``) in ``out`` must be
    ``cfg``'s; a checkpoint is checked when it is loaded. A started run's ``config.yaml`` that is
    damaged (empty, not YAML, not a mapping) says nothing of its config: it is written again
    when the run starts, with a note. (It was called "another config", and the advice, --force,
    would have discarded a checkpoint of this very config, which is checked on its own.)"""
    metrics = out / record.METRICS_FILE
    if metrics.exists():  # a record of another schema version is a RecordError (exit 2)
        refuse_other_config(cfg, record.read(metrics).config, metrics)
        return
    path = out / record.CONFIG_FILE
    if path.exists():
        try:
            stored = yaml.safe_load(path.read_bytes())
        except yaml.YAMLError:
            stored = None
        if not isinstance(stored, dict) or not stored:
            log(  # "is written again", followed by the checkpoint's refusal, contradicted it
                f"note: {path} is damaged (empty or not a YAML mapping); the run writes it "
                "again when it starts"
            )
            return
        refuse_other_config(cfg, stored, path)


RECORD_COPY = ".record-copy.json"
# The record's files, in the order they are put back: metrics.json, whose presence means
# "complete", last
RECORD_FILES = (record.CONFIG_FILE, record.HISTORY_FILE, record.METRICS_FILE)


def keep_record_copy(out: Path) -> None:
    """Copy a complete run's record (its files' texts, a few kB) into ``out/RECORD_COPY``."""
    # bytes decoded, not read_text(): history.csv's lines end in \r\n (the csv module's)
    files = {n: (out / n).read_bytes().decode() for n in RECORD_FILES if (out / n).exists()}
    write_json_atomic(out / RECORD_COPY, files)


def restore_record_copy(out: Path, log: Callable[[str], None]) -> bool:
    """Put a complete run's record back from its copy when ``metrics.json`` is gone or cannot be
    read (cut short, not JSON: it was a dead end, the good copy beside it); whether it did. A
    copy that is damaged itself, or whose record is not a valid one, is left alone, with a line
    saying so (the run is then trained, or the damaged record refused)."""
    copy, metrics = out / RECORD_COPY, out / record.METRICS_FILE
    if not copy.is_file():
        return False
    damage = None
    if metrics.exists():
        try:
            json.loads(metrics.read_bytes().decode())
            return False  # JSON: a record, which record.read judges (another version, say)
        except (OSError, UnicodeDecodeError, ValueError):
            try:  # record.read's words for it ("not valid JSON (...)", "not text (UTF-8)")
                record.read(metrics)
            except record.RecordError as e:
                damage = str(e)
    try:
        files = json.loads(copy.read_text())
        texts = [files[name] for name in RECORD_FILES]
        if not all(isinstance(t, str) for t in texts):
            raise ValueError("not a text")
        record.RunRecord.from_dict(json.loads(files[record.METRICS_FILE]), str(copy))
    except record.RecordError as e:  # whole, but not a record this lpdt writes back
        log(f"{copy}: not used ({e})")
        return False
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        log(f"{copy}: damaged ({type(e).__name__}), not used")
        return False
    for name, text in zip(RECORD_FILES, texts, strict=True):
        write_text_atomic(out / name, text)
    why = (
        f"{damage}"
        if damage
        else "its files had been removed, as Snakemake does before it reruns a job"
    )
    log(f"{out}: its complete record put back from {RECORD_COPY} ({why})")
    return True


# Each engine's checkpoint files in a run directory (``engine`` is an execution key: either may
# train a run): the simulated engine's one process, and the distributed engine's ranks.
ENGINE_CHECKPOINTS = {
    "simulated": ("checkpoint.pt", "checkpoint.prev.pt"),
    "distributed": ("checkpoint.rank*.pt",),
}


def engine_checkpoints(out: Path, engines: Iterable[str] = tuple(ENGINE_CHECKPOINTS)) -> list[Path]:
    """The checkpoints in ``out`` that ``engines`` (default: every engine) wrote."""
    return sorted(
        path for e in engines for pattern in ENGINE_CHECKPOINTS[e] for path in out.glob(pattern)
    )


def other_engine_checkpoints(out: Path, engine: str) -> list[Path]:
    """The checkpoints in ``out`` that another engine than ``engine`` wrote. Neither engine
    reads the other's: a run started by one and continued with the other would train from its
    start beside them, and leave them behind."""
    return engine_checkpoints(out, [e for e in ENGINE_CHECKPOINTS if e != engine])


LOCK_FILE = ".lpdt.lock"


@contextmanager
def locked(out: Path) -> Iterator[None]:
    """Hold ``out``'s lock while a run trains in it (``lpdt.engine.train``, both engines; not a
    rank that torchrun started, whose other ranks share the folder): a second ``lpdt train``
    into the same folder is refused at once, naming the process that holds it. Two runs of other
    configs started together into one folder both ended "ok", one record lost: the folder's
    checks come before a run starts and its ``config.yaml`` is written after. An ``flock``,
    which the kernel lets go however the process ends. None is held where the filesystem has no
    locks (``ENOLCK``: some network filesystems) or the folder cannot be written (a complete run
    on a read-only mount is still read). Once it is held, the temporary files of writes a killed
    process left are removed (``stale_temporaries``). A folder made for the lock that holds
    nothing else at the end (a run that did not start) is removed again."""
    made = not out.exists()
    make_dirs(out)
    path = out / LOCK_FILE
    try:
        f = open(path, "a+")  # noqa: SIM115  (held open for the lock's life, closed below)
    except OSError as e:
        if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        f = None
    if f is None:  # no lock where nothing can be written: what trains there fails on its own
        yield
        return
    try:
        held = True
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            raise RunDirError(
                f"{out} is in use by another lpdt train (pid {holder}): wait for it to end, or "
                "choose another --out"
            ) from None
        except OSError:
            held = False  # no locks on this filesystem: as before there were any
        if held:
            f.seek(0)
            f.truncate()
            f.write(f"{os.getpid()}\n")
            f.flush()
            for tmp in stale_temporaries(out):  # no other writer can be at work: locked
                tmp.unlink(missing_ok=True)
        yield
    finally:
        f.close()
        if made and [p.name for p in out.iterdir()] == [LOCK_FILE]:
            path.unlink(missing_ok=True)
            with suppress(OSError):  # another process may have put a file there meanwhile
                out.rmdir()


def stale_temporaries(out: Path) -> list[Path]:
    """The temporary files of the run's own atomic writes (``lpdt.io``: ``.<name>.<random>.tmp``
    beside ``<name>``) left in ``out`` by a process killed while writing: a checkpoint-sized
    file each, which nothing else removes."""
    names = [*RECORD_FILES, RECORD_COPY, *(p for ps in ENGINE_CHECKPOINTS.values() for p in ps)]
    return sorted({t for n in names for t in out.glob(f".{n}.*.tmp") if t.is_file()})


def discard(out: Path, checkpoints: Iterable[Path]) -> None:
    """``--force``: remove a complete run's record, its copy and the given checkpoints (both
    engines')."""
    for f in [out / record.METRICS_FILE, out / RECORD_COPY, *checkpoints]:
        f.unlink(missing_ok=True)


def open_run_dir(
    cfg: RunConfig,
    out: Path,
    force: bool,
    checkpoints: Iterable[Path],
    log: Callable[[str], None],
    resume: bool = False,
) -> RunRecord | None:
    """Make ``out`` ready for ``cfg``: with ``force`` nothing is checked, and ``None`` returned
    (the caller discards the old run with ``forced`` once the new one has started: a ``--force``
    whose run could not start, its dataset missing, had deleted the complete run it was to
    replace); else refuse another config's files, return the record when the run is complete
    already (``None``: the run is to be trained, or resumed), and without ``resume`` refuse a
    checkpoint (training from the start would overwrite it: a forgotten --resume lost a long
    run's epochs, with one note)."""
    checkpoints = list(checkpoints)
    if force:
        return None
    others = other_engine_checkpoints(out, cfg.engine)
    restore_record_copy(out, log)
    check_run_dir(cfg, out, log)
    metrics = out / record.METRICS_FILE
    if metrics.exists():
        log(f"{out}: already complete (use --force to run it again)")
        return record.read(metrics)
    if others:
        other = next(e for e in ENGINE_CHECKPOINTS if e != cfg.engine)
        raise RunDirError(
            f"{out} holds a checkpoint of the {other} engine ({', '.join(c.name for c in others)}),"
            f" which the {cfg.engine} engine cannot continue: resume it with engine: {other}"
            " and --resume, or pass --force to train the run from its start"
        )
    held = sorted(c for c in checkpoints if c.exists())
    if held and not resume:
        load_checkpoint(cfg, held[0])  # another config's, or damaged: that is the error to say
        raise RunDirError(
            f"{out} holds a checkpoint of this run ({', '.join(c.name for c in held)}): pass "
            "--resume to continue it, or --force to train the run again from its start"
        )
    return None


def forced(out: Path) -> None:
    """``--force``, once the new run has started: discard the old run's record and every
    engine's checkpoints (a distributed run's: every rank's)."""
    discard(out, engine_checkpoints(out))


def previous(ck_path: Path) -> Path:
    """Where a distributed process keeps its checkpoint of the epoch before."""
    return ck_path.with_suffix(".prev.pt")


def load_checkpoint(cfg: RunConfig, path: Path) -> Checkpoint:
    """The checkpoint at ``path``, refused (``RunDirError``) when it is another config's.
    Loaded on the CPU whatever the run's device: it holds generator states, which torch takes
    only as CPU tensors, and every other tensor is copied into the run's own (a run on a GPU
    that mapped it to the GPU could not resume: ``RNG state must be a torch.ByteTensor``)."""
    try:
        raw = torch.load(path, map_location="cpu", weights_only=False)
    except PermissionError:  # not damaged: deleting it would throw its epochs away
        raise CheckpointError(
            f"{path}: cannot be read (permission denied); make it readable (chmod u+r) and run "
            "again with --resume"
        ) from None
    except TORCH_LOAD_ERRORS as e:
        raise CheckpointError(
            f"{path}: a damaged checkpoint, which cannot be read ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else 'no detail'}); delete it to train the run "
            "from its start, or pass --force"
        ) from e
    if isinstance(raw, dict) and "run_config" in raw:  # another config's: say so, whatever else
        refuse_other_config(cfg, raw["run_config"], path)
    return Checkpoint.from_dict(raw, str(path))


def restorable(cfg: RunConfig, ck_path: Path) -> dict[int, tuple[Path, Checkpoint]]:
    """The checkpoints this process could resume from, by epoch: its checkpoint and, in the
    distributed engine, the one of the epoch before (``.prev``), whichever exist."""
    found: dict[int, tuple[Path, Checkpoint]] = {}
    for path in (ck_path, previous(ck_path)):
        if path.exists():
            ck = load_checkpoint(cfg, path)
            found.setdefault(int(ck.epoch), (path, ck))
    return found
