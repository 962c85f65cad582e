"""k training jobs per GPU (docs/compute.md, "GPUs"): the slot arithmetic, the slot allocator
(`python -m lpdt.gpus slot`), the train rule's resources and the cap with the GPUs faked by
CUDA_VISIBLE_DEVICES, the SLURM shard request, and the plan's model of shared GPUs. Every wait
is bounded."""

from __future__ import annotations

import collections
import csv
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lpdt import gpus, grid
from lpdt.models import MODELS
from lpdt.plan import gpu, runtime
from tests.workflow.test_snakemake import REPO, workdir
from tests.workflow.test_workflow_catalog import (
    check_paper_training_jobs,
    run_workflow,
    train_four_smoke_runs_on_gpus,
)

WAIT_S = 60  # the longest any test here waits for a process


def test_slot_arithmetic():
    assert gpus.jobs_per_gpu("auto", "resnet20") == MODELS.get("resnet20").jobs_per_gpu == 8
    assert gpus.jobs_per_gpu("auto", "not-listed") == 1
    assert gpus.jobs_per_gpu(3, "resnet20") == 3
    assert gpus.slot_units([]) == 1
    assert gpus.slot_units([8, 4, 2, 2]) == 8
    assert gpus.slot_units([2, 3]) == 6
    # (GPUs the job uses, processes, k, slots per GPU, the machine's GPUs) -> gpu_slot
    assert gpus.job_slots(1, 1, 2, 8, 2) == 4  # 1/2 of a GPU
    assert gpus.job_slots(1, 1, 8, 8, 2) == 1
    assert gpus.job_slots(0, 1, 8, 8, 2) == 0  # no GPU used
    assert gpus.job_slots(1, 1, 8, 8, 0) == 0  # no GPU here: nothing to share (SLURM)
    assert gpus.job_slots(2, 2, 8, 8, 2) == 16  # the distributed engine: whole GPUs
    assert gpus.job_slots(4, 4, 8, 8, 2) == 16  # at most the machine's
    assert gpus.slot_command("py", "d", ["0", "1"], 0, 8) == ""
    assert "--per-gpu 8 --units 4 --count 1 --" in gpus.slot_command("py", "d", ["0", "1"], 4, 8)
    assert "--per-gpu 8 --units 8 --count 2 --" in gpus.slot_command("py", "d", ["0", "1"], 16, 8)
    assert gpus.slurm_gres(0, 8) is None
    assert gpus.slurm_gres(8, 2) == "shard:4"
    assert gpus.slurm_gres(4, 8) == "shard:1"
    assert gpus.slurm_gres(6.0, 4) == "shard:2"  # a float from a config: SLURM wants an integer


def test_visible_gpu_ids_keep_the_names_of_cuda_visible_devices(tmp_path):
    assert gpus.visible_gpu_ids({"CUDA_VISIBLE_DEVICES": "2,3"}, tmp_path) == ["2", "3"]
    assert gpus.visible_gpu_ids({"CUDA_VISIBLE_DEVICES": "GPU-a, GPU-b"}, tmp_path) == [
        "GPU-a",
        "GPU-b",
    ]
    for name in ("0000:01:00.0", "0000:02:00.0"):
        (tmp_path / "drv" / name).mkdir(parents=True)
    assert gpus.visible_gpu_ids({}, tmp_path / "drv") == ["0", "1"]


def _hold(out: Path, release: Path) -> str:
    """A job's body: write the CUDA_VISIBLE_DEVICES it got into ``out``, then hold on until
    ``release`` exists (at most WAIT_S)."""
    # written whole, then renamed: the test waits for the file and must never read it half
    # written (an empty read failed once on a loaded machine)
    return (
        "import os, pathlib, time\n"
        f"pathlib.Path({str(out) + '.tmp'!r}).write_text(os.environ['CUDA_VISIBLE_DEVICES'])\n"
        f"os.replace({str(out) + '.tmp'!r}, {str(out)!r})\n"
        f"end = time.monotonic() + {WAIT_S}\n"
        f"while not pathlib.Path({str(release)!r}).exists() and time.monotonic() < end:\n"
        "    time.sleep(0.05)\n"
    )


def _holder(lock_dir: Path, out: Path, release: Path, *, units: int = 1, timeout: float = 30):
    """A job on 2 fake GPUs with 2 slots each: takes its slots, writes the CUDA_VISIBLE_DEVICES
    it got into ``out``, and holds the slots until ``release`` exists (at most WAIT_S)."""
    body = _hold(out, release)
    cmd = [sys.executable, "-m", "lpdt.gpus", "slot", "--dir", str(lock_dir), "--gpus", "0,1"]
    cmd += ["--per-gpu", "2", "--units", str(units), "--timeout", str(timeout), "--"]
    return subprocess.Popen(
        [*cmd, sys.executable, "-c", body],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "0,1"},
    )


def _wait_for(paths: list[Path]) -> None:
    end = time.monotonic() + WAIT_S
    while not all(p.exists() for p in paths):
        assert time.monotonic() < end, [p for p in paths if not p.exists()]
        time.sleep(0.05)


def test_two_gpus_with_two_slots_run_four_jobs_one_gpu_each(tmp_path):
    """k = 2 on 2 GPUs: four jobs hold slots at once, each told one GPU, two per GPU; a fifth
    finds no free slot, waits its (short) timeout, then shares a GPU and says so."""
    release = tmp_path / "release"
    outs = [tmp_path / f"job{i}" for i in range(5)]
    procs = [_holder(tmp_path / "slots", outs[i], release) for i in range(4)]
    try:
        _wait_for(outs[:4])
        got = [p.read_text() for p in outs[:4]]
        assert collections.Counter(got) == {"0": 2, "1": 2}, got
        start = time.monotonic()
        fifth = _holder(tmp_path / "slots", outs[4], release, timeout=1.0)
        _wait_for(outs[4:])
        assert time.monotonic() - start >= 1.0  # it waited for a slot first
        assert outs[4].read_text() in ("0", "1")
        release.touch()
        _, err = fifth.communicate(timeout=WAIT_S)
        assert "no GPU had 1 free slots within 1 s" in err, err
    finally:
        release.touch()
        for p in procs:
            _, err = p.communicate(timeout=WAIT_S)
            assert "lpdt.gpus: CUDA_VISIBLE_DEVICES=" in err, err
    assert all(p.returncode == 0 for p in procs)


def test_slots_are_freed_when_the_job_ends(tmp_path):
    """A whole-GPU job (2 of 2 slots) after two half-GPU jobs on GPU 0 and 1 ended: it gets a
    GPU at once (an ended process's share is dropped), with the first GPU listed."""
    release = tmp_path / "release"
    release.touch()  # the holders end at once
    for i in range(2):
        p = _holder(tmp_path / "slots", tmp_path / f"h{i}", release)
        assert p.wait(timeout=WAIT_S) == 0
    chosen, held, ok = gpus.acquire(tmp_path / "slots", ["0", "1"], 2, 2, timeout=0)
    assert (chosen, len(held), ok) == (["0"], 1, True)
    other, held2, ok2 = gpus.acquire(tmp_path / "slots", ["0", "1"], 2, 2, timeout=0)
    assert (other, ok2) == (["1"], True)  # GPU 0 is taken: the next job gets GPU 1
    _, held3, ok3 = gpus.acquire(tmp_path / "slots", ["0", "1"], 2, 1, timeout=0.2, poll=0.05)
    assert not ok3  # no free slot anywhere: after its timeout it says so
    gpus.release(tmp_path / "slots", held + held2 + held3)
    assert gpus.holders(tmp_path / "slots") == {}


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--gpus", "", "--per-gpu", "2", "--units", "1"], "name at least one GPU"),
        (["--gpus", "0", "--per-gpu", "2", "--units", "3"], "--units 3: must be 1 to --per-gpu"),
        (["--gpus", "0", "--per-gpu", "0", "--units", "0"], "--per-gpu 0: must be at least 1"),
        (["--gpus", "0,0", "--per-gpu", "1", "--units", "1"], "a GPU is named twice"),
        (["--gpus", "0", "--per-gpu", "1", "--units", "1", "--count", "2"], "--count 2"),
        (["--gpus", "0", "--per-gpu", "1", "--units", "1", "--timeout", "nan"], "--timeout"),
        (["--gpus", "0", "--per-gpu", "1", "--units", "1", "--planned-s", "-3"], "--planned-s"),
    ],
)
def test_slot_arguments_it_cannot_honour_are_refused_at_once(tmp_path, capsys, argv, says):
    """No GPUs waited for ever (past --timeout); more units than a GPU has waited the whole
    --timeout (an hour by default) and then overfilled it; no slots divided by zero."""
    start = time.monotonic()
    with pytest.raises(SystemExit) as stop:
        gpus.main(["slot", "--dir", str(tmp_path / "slots"), *argv, "--", "true"])
    assert stop.value.code == 2 and time.monotonic() - start < WAIT_S
    assert says in capsys.readouterr().err


def test_a_command_that_cannot_run_is_one_line(tmp_path):
    """It was exec's FileNotFoundError traceback; now the shell's status and one line."""
    proc = subprocess.run(
        [sys.executable, "-m", "lpdt.gpus", "slot", "--dir", str(tmp_path / "slots")]
        + ["--gpus", "0", "--per-gpu", "1", "--units", "1", "--", str(tmp_path / "no-such")],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert proc.returncode == 127, proc.stderr
    assert (
        proc.stderr.splitlines()[-1] == f"lpdt.gpus: cannot run {tmp_path / 'no-such'}: No "
        "such file or directory"
    )
    assert "Traceback" not in proc.stderr


def test_two_invocations_arbitrate_one_gpu(tmp_path):
    """Two Snakemake invocations (other results folders, other k) share the machine's slot
    folder, keyed by the GPU: two half-GPU jobs of one (k = 2) fill GPU 0, and a job of the
    other (k = 8, 1 of 8 slots) waits for room, then says it shares beyond the slots. (Before,
    each results folder had its own slot files, and the second started at once.)"""
    release = tmp_path / "release"
    outs = [tmp_path / f"job{i}" for i in range(2)]
    slots = tmp_path / "machine-slots"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "lpdt.gpus", "slot", "--dir", str(slots), "--gpus", "0"]
            + ["--per-gpu", "2", "--units", "1", "--", sys.executable, "-c", _hold(o, release)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for o in outs
    ]
    try:
        _wait_for(outs)
        start = time.monotonic()
        other = subprocess.run(
            [sys.executable, "-m", "lpdt.gpus", "slot", "--dir", str(slots), "--gpus", "0"]
            + ["--per-gpu", "8", "--units", "1", "--timeout", "1", "--", "true"],
            capture_output=True,
            text=True,
            timeout=WAIT_S,
        )
        assert time.monotonic() - start >= 1.0, other.stderr
        assert "no GPU had 1 free slots within 1 s" in other.stderr, other.stderr
    finally:
        release.touch()
        for p in procs:
            p.communicate(timeout=WAIT_S)


def test_gpu_key_names_the_gpu_not_its_index_in_cuda_visible_devices(tmp_path):
    for name in ("0000:01:00.0", "0000:02:00.0", "0000:03:00.0"):
        (tmp_path / "drv" / name).mkdir(parents=True)
    assert gpus.gpu_key("2", tmp_path / "drv") == "0000:03:00.0"
    assert gpus.gpu_key("GPU-ab12", tmp_path / "drv") == "GPU-ab12"  # a UUID as given
    assert gpus.gpu_key("7", tmp_path / "nodriver") == "7"  # faked GPUs keep their names
    assert gpus.slot_dir({}) == gpus.DEFAULT_SLOT_DIR
    assert gpus.slot_dir({"LPDT_GPU_SLOTS": str(tmp_path)}) == tmp_path


def test_a_job_past_its_planned_time_is_reported_by_name(tmp_path):
    """A job that holds its share past 1.5x its planned time + 10 minutes is named by a job that
    waits for its GPU, and by ``python -m lpdt.gpus status``."""
    slots = tmp_path / "slots"
    _, held, _ = gpus.acquire(slots, ["0"], 1, 1, timeout=0, name="runs-abc", planned_s=60.0)
    state = json.loads((slots / "slots.json").read_text())
    state["0"][0]["since"] -= 3 * 3600  # it started three hours ago
    (slots / "slots.json").write_text(json.dumps(state))
    lines: list[str] = []
    gpus.acquire(slots, ["0"], 1, 1, timeout=0.3, poll=0.05, name="waiter", log=lines.append)
    assert len(lines) == 1 and "runs-abc" in lines[0] and "hung?" in lines[0], lines
    assert "planned 0.02 h" in lines[0] and "for 3.00 h" in lines[0]
    status = subprocess.run(
        [sys.executable, "-m", "lpdt.gpus", "status", "--dir", str(slots)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert "runs-abc" in status.stdout and "hung?" in status.stdout, status.stdout
    gpus.release(slots, held)


def _train_blocks(out: str) -> list[str]:
    blocks = [b for b in re.split(r"\n(?=(?:local)?rule )", out) if b.startswith("rule train:")]
    assert blocks, out[-2000:]
    return blocks


def test_two_fake_gpus_with_k2_give_four_slots_and_one_gpu_per_job(tmp_path):
    """Dry run with CUDA_VISIBLE_DEVICES=0,1 and gpu_jobs_per_gpu=2: the workflow caps gpu_slot at
    4 (2 GPUs x 2 slots), every training job asks for 1 (so 4 run at once) and starts `lpdt
    train` through the slot allocator on one of the two GPUs."""
    slots = tmp_path / "machine-slots"
    r = run_workflow(
        workdir(tmp_path),
        "-n",
        "--config",
        "scale=smoke",
        "train_gpus=1",
        "gpu_jobs_per_gpu=2",
        env={"CUDA_VISIBLE_DEVICES": "0,1", "LPDT_GPU_SLOTS": str(slots)},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "GPUs: 2 (0,1), 2 slots each: gpu_slot=4" in r.stderr, r.stderr[-2000:]
    for b in _train_blocks(r.stdout):
        assert re.search(r"\bgpu=1, gpu_slot=1\b", b), b
        assert f"-m lpdt.gpus slot --dir {slots} --gpus 0,1 --per-gpu 2 --units 1" in b


def test_auto_k_per_model_on_the_paper_grid(tmp_path):
    """gpu_jobs_per_gpu: auto: each model's k from its ModelSpec.jobs_per_gpu, in slots of the
    least common multiple (8): ResNet-20 1 slot of 8, VGG-11 2, ResNet-18 4, DistilBERT (not
    listed) a whole GPU."""
    r = run_workflow(
        workdir(tmp_path), "-n", "--config", "scale=paper", env={"CUDA_VISIBLE_DEVICES": "0"}
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "GPUs: 1 (0), 8 slots each: gpu_slot=8" in r.stderr
    check_paper_training_jobs(r.stdout, {1})  # one visible GPU: every job asks for it
    spec = grid.load(REPO / "config/studies.yaml", REPO / "config/scales/paper.yaml")
    model = {rid: run.config["model"]["name"] for rid, run in grid.expand(spec).items()}
    seen = {}
    for b in _train_blocks(r.stdout):
        rid = re.search(r"run_id=([0-9a-f]{12})", b).group(1)
        seen[model[rid]] = int(re.search(r"\bgpu_slot=(\d+)", b).group(1))
    assert seen == {"resnet20": 1, "resnet54": 1, "vgg11": 2, "resnet18": 4, "distilbert": 8}
    # A job that holds its share past k x its price alone (k = 8 / slots) is called hung: priced
    # alone, healthy jobs among 8 on a GPU were (s(8) 1.69 > gpus.HANG_FACTOR 1.5).
    from lpdt.plan.gpu import run_price
    from lpdt.plan.samples import samples_per_run

    runs = grid.expand(spec)
    for b in _train_blocks(r.stdout):
        cfg = runs[re.search(r"run_id=([0-9a-f]{12})", b).group(1)].config
        k = 8 // int(re.search(r"\bgpu_slot=(\d+)", b).group(1))
        planned = float(re.search(r"--planned-s (\d+)", b).group(1))
        assert planned == pytest.approx(k * run_price(cfg, samples_per_run(cfg)).seconds, abs=1)


def test_slurm_shards_become_sbatch_gres(tmp_path):
    """slurm_gpu_shards=8: each GPU run asks resource gres=shard:8/k, which the SLURM executor
    plugin turns into `sbatch --gres=shard:N` (its own function, on the resources of a dry run
    with the SLURM profile; a cluster with shards was not started here)."""
    from types import SimpleNamespace

    from snakemake_executor_plugin_slurm.utils import set_gres_string

    resources = {"gres": "shard:4", "gpu": 0}
    job = SimpleNamespace(resources=SimpleNamespace(get=resources.get, gres="shard:4"))
    assert set_gres_string(job).strip() == "--gres=shard:4"
    # The SLURM profile's train gpu: 1 with shards would ask for shards and a whole GPU: refused
    # in one error, until its gpu is 0.
    profile = ("--workflow-profile", str(REPO / "profiles/slurm"), "--cores", "64")
    args = ("-n", *profile, "--config", "scale=paper", "slurm_gpu_shards=8", "plan_probe=False")
    r = run_workflow(workdir(tmp_path / "p"), *args)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "set `gpu: 0` under set-resources: train:" in out, out[-2000:]
    r = run_workflow(workdir(tmp_path / "q"), *args, "--set-resources", "train:gpu=0")
    assert r.returncode == 0, r.stderr[-2000:]
    gres = {m for b in _train_blocks(r.stdout) for m in re.findall(r"\bgres=(\S+)", b)}
    assert gres == {"shard:1", "shard:2", "shard:4", "shard:8"}, gres


def test_shared_gpu_makespan_and_gpu_hours():
    """A constructed case: k = 2 jobs of 10, 10, 10, 10, 6, 6 s (times at k = 2) and one k = 1
    job of 5 s. One GPU: the k = 2 jobs on 2 slots, longest first: 10+10+6 = 26 s, then the
    k = 1 job: 31 s. Two GPUs: 4 slots, 10+6 = 16 s, then 5 s: 21 s = 42 GPU-seconds. The jobs'
    own GPU time is each time / k: 4 x 5 + 2 x 3 + 5 = 31 s either way."""
    jobs = [(10.0, 2)] * 4 + [(6.0, 2)] * 2 + [(5.0, 1)]
    assert runtime.shared_gpu_wall_seconds(jobs, 1) == 31.0
    assert runtime.shared_gpu_wall_seconds(jobs, 2) == 21.0
    assert runtime.gpu_hours(jobs, 1) == pytest.approx((31 / 3600, 31 / 3600))
    assert runtime.gpu_hours(jobs, 2) == pytest.approx((42 / 3600, 31 / 3600))
    # one k: exactly LPT on GPUs x k slots
    assert runtime.shared_gpu_wall_seconds([(t, 4) for t in (7, 5, 3)], 1) == 7.0


def test_share_slowdown(monkeypatch):
    assert gpu.share_slowdown("resnet20", 1) == 1.0
    assert gpu.share_slowdown("resnet20", 8) == pytest.approx(1.69)  # measured on an H100
    assert gpu.share_slowdown("resnet20", 8, batched=True) is None  # batched jobs: not measured
    assert gpu.share_slowdown("resnet54", 8) is None  # provisional: not measured
    monkeypatch.setitem(gpu.H100_SHARE, "resnet20", {2: 1.25})
    assert gpu.share_slowdown("resnet20", 2) == 1.25
    # 8 s alone, s(2) = 1.25: 10 s per job at k = 2; four such jobs on one GPU: 20 s
    jobs = [(8.0 * gpu.share_slowdown("resnet20", 2), 2)] * 4
    assert runtime.shared_gpu_wall_seconds(jobs, 1) == 20.0


def test_paper_plan_prints_gpu_hours(tmp_path):
    """The paper plan (H100 prices) on 2 GPUs: every run priced, the grid total with its range,
    evaluation's share, the wall time on 2 GPUs (batched jobs one per GPU: their sharing was
    not measured), the three most expensive groups and the levers, none above the total; the
    per-run table has the basis column."""
    wd = workdir(tmp_path)
    r = run_workflow(wd, "--cores", "1", "plan", "--config", "scale=paper", "plan_gpus=2")
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout + r.stderr
    m = re.search(r"price of each run on .*: (\d+) measured, (\d+) derived", out)
    assert m and int(m[1]) + int(m[2]) == 289, out[-3000:]
    m = re.search(r"grid total: ~(\d+) GPU-hours \(range (\d+)-(\d+)\); evaluation ", out)
    assert m and int(m[2]) <= int(m[1]) <= int(m[3]), out[-3000:]
    assert re.search(r"wall time on 2 GPU\(s\): ~\d+ h, 1 job\(s\) per GPU", out), out[-3000:]
    assert len(re.search(r"most expensive: (.*)", out)[1].split(";")) == 3
    levers = re.findall(r"^  (.*): ~(\d+) GPU-hours \(range (\d+)-(\d+)\)$", out, re.M)
    assert [t.split(" ")[:3] for t, *_ in levers] == [
        ["the", "8-bit", "step"],
        ["the", "host's", "data"],
        ["both", "of", "these"],
        ["k", "jobs", "shared"],
    ], out[-3000:]
    total = int(re.search(r"grid total: ~(\d+)", out)[1])
    assert all(int(lo) <= int(mid) <= int(hi) for _, mid, lo, hi in levers)
    assert all(int(mid) <= total for _, mid, _, _ in levers)
    rows = list(csv.DictReader((wd / "results/plan-paper.tsv").open(), delimiter="\t"))
    assert len(rows) == 289 and all(r["basis"].startswith(("measured", "derived")) for r in rows)
    assert {r["k"] for r in rows} == {"1"}


@pytest.mark.slow  # its second pricing of the paper grid was 9 s of the default suite (2026-12-01)
def test_a_plan_asked_again_with_another_setting_prints_again(tmp_path):
    """Its table was a declared output once, and a second `snakemake plan` said "Nothing to be
    done", its price left as it was."""
    wd = workdir(tmp_path)
    for n in (2, 4):
        r = run_workflow(wd, "--cores", "1", "plan", "--config", "scale=paper", f"plan_gpus={n}")
        assert r.returncode == 0, r.stderr[-2000:]
        assert f"wall time on {n} GPU(s)" in r.stdout + r.stderr, r.stdout[-2000:]


@pytest.mark.slow
def test_two_fake_gpus_train_four_jobs_at_once(tmp_path):
    """Four smoke runs on 2 fake GPUs (CUDA_VISIBLE_DEVICES=0,1; the runs train on the CPU) with
    k = 2 and 4 cores: all four train at the same time, and their logs say two got GPU 0 and
    two GPU 1."""
    wd = workdir(tmp_path)
    run_ids = train_four_smoke_runs_on_gpus(wd, cores=4, jobs_per_gpu=2, gpus="0,1")
    # each job holds its slots from the allocator's line ("since <epoch s>") until its process
    # ends (its log's last write): all four intervals overlap
    logs = [wd / f"results/logs/train/{r}.log" for r in run_ids]
    got = [re.search(r"CUDA_VISIBLE_DEVICES=(\S+) .*since ([\d.]+)\)", p.read_text()) for p in logs]
    assert all(got), [p.read_text()[:500] for p in logs]
    starts, ends = [float(m[2]) for m in got], [p.stat().st_mtime for p in logs]
    assert max(starts) < min(ends), (starts, ends)
    assert collections.Counter(m[1] for m in got) == {"0": 2, "1": 2}, got
