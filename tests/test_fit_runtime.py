"""benchmarks/fit_runtime.py: the plan's wall-time model fitted back from jobs it priced itself.

The jobs' times are the plan's own estimates (``runtime.job_run_seconds``) under chosen constants
and speed factors, written where the workflow writes them (benchmark files, batch stamps, logs,
records): a fit whose design departs from the plan's model, or that misreads a batch, does not
recover the constants."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from lpdt.plan import probe, runtime, table
from tests.fake_records import fake_record

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("fit_runtime", ROOT / "benchmarks/fit_runtime.py")
assert SPEC is not None and SPEC.loader is not None
fit_runtime = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = fit_runtime  # its dataclasses look their module up
SPEC.loader.exec_module(fit_runtime)

SPEED = {"fp32": 1.5, "int8": 2.2, "int8_ops": 1.8}
TRUTH = {  # the constants the jobs "ran" with: the plan's, moved
    ("resnet8", "fp32", 12, "compiled"): 0.21,
    ("resnet8", "int8", 12, "compiled"): 0.44,
    ("resnet18", "fp32", 32): 3.1,
    ("vgg11", "int8", 32): 5.5,
    "GOSSIP_NS": 3.0,
    "TOPK_NS": 12.0,
}


def config(model: str, precision: str, px: int, nodes: int, compress: str, compile: bool) -> Any:
    return {
        "model": {"name": model},
        "precision": {"mode": precision},
        "data": {"image_size": px, "test_subset": 200},
        "topology": {"nodes": nodes},
        "train": {"batch_size": 8 * nodes, "compile": compile, "epochs": 3},
        "algorithm": {"compression": {"name": compress, "ratio": 0.9 if compress != "none" else 0}},
    }


# (job, its runs as (epochs, config)); a batch's runs share a compiled graph where they can
JOBS = {
    "seeds-aaaaaaaaaaaa-000001": [
        (3, config("resnet8", "fp32", 12, 4, "none", True)),
        (3, config("resnet8", "fp32", 12, 4, "none", True)),
        (5, config("resnet8", "fp32", 12, 4, "topk", True)),
    ],
    "seeds-bbbbbbbbbbbb-000002": [
        (4, config("resnet8", "int8", 12, 8, "none", True)),
        (2, config("resnet8", "int8", 12, 4, "topk", True)),
    ],
    "runs-cccccccccccc-000003": [
        (2, config("resnet18", "fp32", 32, 8, "none", False)),
        (6, config("vgg11", "int8", 32, 16, "topk", False)),
    ],
    "run000000001": [(3, config("resnet18", "fp32", 32, 4, "topk", False))],
    "run000000002": [(5, config("vgg11", "int8", 32, 4, "none", False))],
    "run000000003": [(7, config("resnet8", "fp32", 12, 16, "topk", True))],
    "run000000004": [(2, config("resnet8", "int8", 12, 2, "none", True))],
    "run000000005": [(9, config("resnet18", "fp32", 32, 16, "none", False))],
}


def write_results(results: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records, stamps, logs and benchmark files of JOBS, each job's time its estimate under
    TRUTH on a machine of SPEED (the warm compile in its log, as a job reports it)."""
    for sub in ("benchmarks/train", "batches", "logs/train"):
        (results / sub).mkdir(parents=True)
    with monkeypatch.context() as m:
        step = dict(runtime.STEP_MS)
        compiled = dict(runtime.COMPILED_MS)
        for key, value in TRUTH.items():
            if isinstance(key, str):
                m.setattr(runtime, key, value)
            elif len(key) == 4:
                compiled[key[:3]] = (value, *compiled[key[:3]][1:])
            else:
                step[key] = (value, step[key][1])
        m.setattr(runtime, "STEP_MS", step)
        m.setattr(runtime, "COMPILED_MS", compiled)
        for job, runs in JOBS.items():
            ids = [job] if job.startswith("run0") else [f"{job[-6:]}r{n}" for n in range(len(runs))]
            cfgs, samples = [], []
            for run_id, (epochs, cfg) in zip(ids, runs, strict=True):
                rec = fake_record(run_id, epochs=epochs, config=cfg)
                rec_dir = results / "runs" / run_id
                rec_dir.mkdir(parents=True)
                rec.write(rec_dir)
                cfgs.append(rec.config)
                samples.append(
                    rec.time.iterations
                    * runtime.per_node_batch(rec.config)
                    * cfg["topology"]["nodes"]
                )
            seconds = sum(runtime.job_run_seconds(list(zip(cfgs, samples, strict=True)), SPEED))
            compiles = {runtime.compiled_shape(c): c for c in cfgs if c["train"]["compile"]}
            # a job's log: what it spent compiling, as run_seconds counts it
            took = [runtime.warm_compile_seconds(c) * SPEED["fp32"] for c in compiles.values()]
            log = "".join(f"  compiled the training step in {t} s\n" for t in took)
            (results / "logs/train" / f"{job}.log").write_text(log)
            if len(ids) > 1:
                (results / "batches" / f"{job}.txt").write_text("\n".join(ids) + "\n")
            (results / "benchmarks/train" / f"{job}.tsv").write_text(
                f"s\th:m:s\n{seconds:.6f}\t0\n"
            )


def test_the_fit_recovers_the_constants_the_jobs_ran_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_results(tmp_path, monkeypatch)
    js = fit_runtime.jobs(tmp_path)
    assert sorted(j.name for j in js) == sorted(JOBS)
    assert sum(len(j.runs) for j in js) == sum(len(r) for r in JOBS.values())
    names, x, y = fit_runtime.design(js, SPEED, fit_start=False)
    coef, _, rank = fit_runtime.least_squares(names, x, y)
    assert rank == len(names)
    fitted = dict(zip(names, coef, strict=True))
    for name, value in TRUTH.items():
        assert fitted[name] == pytest.approx(value, rel=1e-4), name
    # the start-up constants too, once they are columns
    names, x, y = fit_runtime.design(js, SPEED, fit_start=True)
    coef, _, _ = fit_runtime.least_squares(names, x, y)
    fitted = dict(zip(names, coef, strict=True))
    assert fitted["START_S"] == pytest.approx(runtime.START_S, rel=1e-3)
    assert fitted["BATCHED_START_S"] == pytest.approx(runtime.BATCHED_START_S, rel=1e-3)


def test_a_damaged_record_skips_its_job_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_results(tmp_path, monkeypatch)
    (tmp_path / "runs" / "000002r1" / "metrics.json").write_text("{not json")
    skipped: list[str] = []
    js = fit_runtime.jobs(tmp_path, SPEED, skipped)
    assert "seeds-bbbbbbbbbbbb-000002" not in {j.name for j in js} and len(js) == len(JOBS) - 1
    assert len(skipped) == 1 and skipped[0].startswith("seeds-bbbbbbbbbbbb-000002: ")
    names, x, y = fit_runtime.design(js, SPEED, fit_start=False)
    with pytest.raises(SystemExit, match="--hold resnet99: no such column"):  # a typo
        fit_runtime.least_squares(names, x, y, ("GOSSIP_NS", "resnet99"))


def test_the_factors_come_from_the_plan_s_record_unless_given(tmp_path: Path) -> None:
    """``--speed`` omitted: the newest plan's recorded factors (none recorded: the reference's);
    ``reference``: none; a damaged record is an error naming it."""
    assert fit_runtime.parse_speed(None, tmp_path) is None
    probe.write_factors(table.probe_file(tmp_path / "plan-quick.tsv"), SPEED, "line")
    assert fit_runtime.parse_speed(None, tmp_path) == SPEED
    assert fit_runtime.parse_speed("reference", tmp_path) is None
    assert fit_runtime.parse_speed("fp32=2,int8=3", tmp_path) == {"fp32": 2.0, "int8": 3.0}
    (tmp_path / "plan-quick.probe.json").write_text("{")
    with pytest.raises(SystemExit, match="plan-quick.probe.json: not a plan's speed factors"):
        fit_runtime.parse_speed(None, tmp_path)


def test_no_jobs_is_an_error_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.argv", ["fit_runtime.py", "--results", str(tmp_path)])
    with pytest.raises(SystemExit, match="no finished training jobs"):
        fit_runtime.main()
    monkeypatch.setattr("sys.argv", ["fit_runtime.py", "--speed", "fp32:2"])
    with pytest.raises(SystemExit, match="expected KIND=FACTOR"):
        fit_runtime.main()


def test_a_job_without_a_log_holds_the_plan_s_warm_compiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No log to read its compile time from: the job is held at what the plan counts, the warm
    compiles scaled as the plan scales them, and the fit still gives the constants back."""
    write_results(tmp_path, monkeypatch)
    for log in (tmp_path / "logs/train").glob("*.log"):
        log.unlink()
    names, x, y = fit_runtime.design(fit_runtime.jobs(tmp_path, SPEED), SPEED, fit_start=False)
    coef, _, _ = fit_runtime.least_squares(names, x, y)
    fitted = dict(zip(names, coef, strict=True))
    for name, value in TRUTH.items():
        assert fitted[name] == pytest.approx(value, rel=1e-4), name


def test_held_columns_keep_the_plan_s_constants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--hold``: the held columns keep the plan's values and the others absorb the difference."""
    write_results(tmp_path, monkeypatch)
    names, x, y = fit_runtime.design(fit_runtime.jobs(tmp_path), SPEED, fit_start=False)
    coef, _, rank = fit_runtime.least_squares(names, x, y, ("GOSSIP_NS", "vgg11"))
    fitted = dict(zip(names, coef, strict=True))
    assert rank == len(names) - 2
    assert fitted["GOSSIP_NS"] == runtime.GOSSIP_NS
    assert fitted[("vgg11", "int8", 32)] == runtime.STEP_MS[("vgg11", "int8", 32)][0]
    assert fitted[("resnet18", "fp32", 32)] != pytest.approx(TRUTH[("resnet18", "fp32", 32)])
