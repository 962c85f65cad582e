"""The grid on a real SLURM cluster: the smoke DAG through snakemake-executor-plugin-slurm with
profiles/slurm, against a single-node cluster started on this machine (tools/slurm_local.sh),
every run logged to an MLflow tracking server; a training job cancelled mid-run (scancel) is
resubmitted and resumes from its checkpoint to an uninterrupted run's numbers; a job over its
time limit is reported as TIMEOUT with its logs. docs/compute.md, "Running on SLURM".

The slow tests need root (the daemons run as root) and the Debian packages that
tools/slurm_local.sh installs; without them they are skipped with the reason."""

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from lpdt import grid
from lpdt.config import deep_merge
from lpdt.engine.launch import free_port
from lpdt.report import artifacts
from tests.servers import wait_until_healthy

from .test_snakemake import REPO, SNAKEMAKE, workdir
from .test_workflow_catalog import run_workflow

SCRIPT = REPO / "tools" / "slurm_local.sh"
BASE_PROFILE = REPO / "profiles" / "slurm" / "config.yaml"
OVERRIDES = Path(__file__).with_name("slurm_test_profile.yaml")
# a plugin setting that profiles/slurm leaves at its default
PLUGIN_KEYS = {"slurm-init-seconds-before-status-checks"}


def slurm_profile(dest: Path, extra: dict | None = None) -> Path:
    """profiles/slurm/config.yaml with the single-node overrides (and ``extra``) merged in."""
    merged = deep_merge(
        yaml.safe_load(BASE_PROFILE.read_text()), yaml.safe_load(OVERRIDES.read_text())
    )
    if extra:
        merged = deep_merge(merged, extra)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.yaml").write_text(yaml.safe_dump(merged, sort_keys=False))
    return dest


def leaves(tree: dict, prefix: tuple = ()) -> dict[tuple, object]:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(leaves(v, (*prefix, k)))
        else:
            out[(*prefix, k)] = v
    return out


# -- fast checks (default suite) -------------------------------------------------------------------


def test_single_node_overrides_change_only_keys_of_the_slurm_profile(tmp_path):
    """The test profile is profiles/slurm with a few values changed, none added (apart from the
    plugin's status-check interval), so the test runs the profile users run."""
    base = leaves(yaml.safe_load(BASE_PROFILE.read_text()))
    over = leaves(yaml.safe_load(OVERRIDES.read_text()))
    changed = {k for k in over if k[0] not in PLUGIN_KEYS}
    assert changed == {
        ("default-resources", "slurm_partition"),
        ("set-threads", "train"),
        ("set-resources", "train", "gpu"),
        ("set-resources", "train", "mem_mb"),
    }
    assert all(k in base and base[k] != over[k] for k in changed)
    merged = leaves(yaml.safe_load((slurm_profile(tmp_path) / "config.yaml").read_text()))
    assert merged == {**base, **over}


def test_local_cluster_script_parses_and_prints_usage():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "start DIR" in r.stdout and "stop DIR" in r.stdout


def _train_rules(out: str) -> set[str]:
    """The training rules of a dry run's jobs (rule train, or the batches' train_batch*)."""
    return set(re.findall(r"^(?:local)?rule (train\w*):", out, re.M))


def test_under_the_slurm_profile_every_process_plans_a_job_per_run(tmp_path):
    """Snakemake reads the workflow before it sets its executor, so the main process cannot ask
    ``workflow.local_exec`` whether the jobs run on a cluster; it asked, batched the runs, and
    every SLURM job, a Snakemake process that does not batch, failed to find its batch rule.
    Dry runs: with profiles/slurm (``--jobs``) a job per run, and with a GPU visible on the
    submitting machine no local GPU slots; locally (``--cores``) the batches. No Snakemake
    warning of a coroutine never awaited (the profile's ``disk_mb``, snakemake#4280)."""
    profile = slurm_profile(tmp_path / "profile")
    wd = workdir(tmp_path)
    args = ("--config", "scale=smoke", "mlflow=False")
    cluster = ("-n", "--workflow-profile", str(profile), *args)
    for visible in ("", "0"):
        r = run_workflow(wd, *cluster, env={"CUDA_VISIBLE_DEVICES": visible})
        assert r.returncode == 0, r.stderr[-2000:]
        assert _train_rules(r.stdout) == {"train"}, (visible, r.stdout[-2000:])
        assert "gpu_slot=" not in r.stderr, (visible, r.stderr[-2000:])
        # the profile's disk_mb: Snakemake's default from the inputs' sizes warned once a job
        assert "was never awaited" not in r.stderr, r.stderr[-2000:]
    local = run_workflow(wd, "-n", "--cores", "2", *args, env={"CUDA_VISIBLE_DEVICES": ""})
    assert local.returncode == 0, local.stderr[-2000:]
    rules = _train_rules(local.stdout)
    assert rules and all(r.startswith("train_batch") for r in rules), local.stdout[-2000:]


# -- the cluster and the tracking server (module fixtures, stopped by pid) -----------------------


@dataclass
class Cluster:
    dir: Path
    env: dict[str, str]

    def run(self, *cmd: str, timeout: int = 60) -> str:
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, (cmd, r.stderr)
        return r.stdout

    def sacct(self) -> list[dict[str, str]]:
        """Every job of the cluster (main job only): id, name (the plugin's run id), state,
        comment (rule and wildcards), elapsed time, time limit, exit code."""
        fields = ["JobIDRaw", "JobName", "State", "Comment", "Elapsed", "Timelimit", "ExitCode"]
        out = self.run("sacct", "-X", "-P", "-n", "-a", "-S", "2000-01-01", "-o", ",".join(fields))
        return [dict(zip(fields, line.split("|"))) for line in out.splitlines() if line]


def our_processes(marker: str) -> list[str]:
    """Processes (other than this one) whose command line or environment names ``marker``."""
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            text = (p / "cmdline").read_bytes() + b"\0" + (p / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in text:
            found.append(f"{p.name}: {(p / 'cmdline').read_bytes()[:120]!r}")
    return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("a local SLURM cluster needs root (tools/slurm_local.sh runs daemons as root)")
    d = tmp_path_factory.mktemp("slurm")
    r = subprocess.run(
        ["bash", str(SCRIPT), "start", str(d)], capture_output=True, text=True, timeout=1200
    )
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
        if "apt-get failed" in r.stderr or "needs root" in r.stderr:
            pytest.skip(f"SLURM cannot be started here: {last}")
        pytest.fail(f"tools/slurm_local.sh start failed:\n{r.stdout}\n{r.stderr}")
    env = {**os.environ, "SLURM_CONF": str(d / "etc" / "slurm.conf")}
    try:
        yield Cluster(d, env)
    finally:
        r = subprocess.run(
            ["bash", str(SCRIPT), "stop", str(d)], capture_output=True, text=True, timeout=300
        )
        left = our_processes(str(d))
        assert r.returncode == 0 and not left, (r.stdout, r.stderr, left)


def group_members(pgid: int) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if os.getpgid(int(p.name)) == pgid:
                    pids.append(int(p.name))
            except OSError:
                pass
    return pids


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """`mlflow server` on 127.0.0.1 (what a cluster's login node runs; docs/compute.md), its own
    process group, stopped by that group's id."""
    d = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    cmd = [
        str(Path(sys.executable).parent / "mlflow"),
        "server",
        "--backend-store-uri",
        f"sqlite:///{d}/mlflow.db",
        "--artifacts-destination",
        str(d / "artifacts"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    log = open(d / "server.log", "w")  # noqa: SIM115 (closed in finally)
    proc = subprocess.Popen(
        cmd,
        cwd=d,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"},
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(uri, proc, (d / "server.log").read_text)
        yield uri
    finally:
        for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while group_members(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if not group_members(proc.pid):
                break
        proc.wait(timeout=10)
        log.close()
        assert not group_members(proc.pid), "mlflow server processes left running"


# -- helpers --------------------------------------------------------------------------------------


def long_table4_scale(wd: Path, name: str, epochs: int) -> dict[str, str]:
    """The smoke scale with Table 4's two runs (fp32, int8) made longer: 16 iterations an epoch on
    1,024 generated images, ``epochs`` epochs, so that a job runs long enough to be cancelled
    after its first checkpoint (or to exceed a time limit). Returns {precision: run_id}."""
    scale = yaml.safe_load((wd / "config/scales/smoke.yaml").read_text())
    scale["description"] = f"smoke, with Table 4's runs lasting {epochs} epochs (test_slurm.py)"
    scale["studies"]["table4"]["config"] = {
        "data": {"train_subset": 1024},
        "train": {"epochs": epochs, "max_iters_per_epoch": 16},
    }
    path = wd / f"config/scales/{name}.yaml"
    path.write_text(yaml.safe_dump(scale, sort_keys=False))
    spec = grid.load(wd / "config/studies.yaml", path)
    m = grid.manifest(grid.expand(spec), spec, name, "results/runs")
    return {e.coords["precision"]: e.run_id for e in m.studies["table4"].runs}


def run_snakemake(
    cluster: Cluster, wd: Path, profile: Path, args: list[str], timeout: int, tick=None
) -> tuple[int, str]:
    """snakemake with the SLURM profile (its own process group, killed on timeout); ``tick()`` is
    called every 0.1 s while it runs. Returns (exit code, its output)."""
    env = {
        **cluster.env,
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PATH": f"{SNAKEMAKE.parent}:{os.environ['PATH']}",
    }
    log_path = wd.parent / f"snakemake-{wd.name}.log"
    cmd = [
        str(SNAKEMAKE),
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(wd),
        "--workflow-profile",
        str(profile),
        *args,
    ]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"snakemake still running after {timeout} s:\n"
                        + log_path.read_text()[-3000:]
                    )
                if tick:
                    tick()
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
    return proc.returncode, log_path.read_text()


def train_jobs(jobs: list[dict[str, str]], run_id: str) -> list[dict[str, str]]:
    return [j for j in jobs if j["Comment"] == f"rule_train_wildcards_{run_id}"]


# -- the slow tests -------------------------------------------------------------------------------


@pytest.mark.slow
def test_smoke_dag_through_slurm_and_a_cancelled_job_resumes(cluster, mlflow_server, tmp_path):
    wd = workdir(tmp_path)
    target = long_table4_scale(wd, "slurm_smoke", epochs=12)["fp32"]
    out = wd / "results" / "runs" / target
    profile = slurm_profile(tmp_path / "profile")
    cancelled: dict[str, object] = {}

    def cancel_target_after_its_first_checkpoint():
        if cancelled or not (out / "checkpoint.pt").exists() or (out / "metrics.json").exists():
            return
        q = subprocess.run(
            ["squeue", "-h", "-t", "R", "-o", "%i|%k"],
            env=cluster.env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        for line in q.stdout.splitlines() if q.returncode == 0 else []:
            job, comment = line.split("|", 1)
            if comment == f"rule_train_wildcards_{target}":
                cluster.run("scancel", job)
                cancelled.update(job=job, at=time.monotonic())
                return

    t0 = time.perf_counter()
    rc, log = run_snakemake(
        cluster,
        wd,
        profile,
        ["--config", "scale=slurm_smoke", f"tracking_uri={mlflow_server}"],
        timeout=2400,
        tick=cancel_target_after_its_first_checkpoint,
    )
    elapsed = time.perf_counter() - t0
    assert rc == 0, log[-5000:]
    assert cancelled, "the target run finished before it could be cancelled"
    slurm_run = re.search(r"SLURM run ID: (\S+)", log)[1]  # the name of all its jobs
    jobs = [j for j in cluster.sacct() if j["JobName"] == slurm_run]
    print(f"\nsmoke DAG through SLURM: {elapsed:.0f} s, {len(jobs)} SLURM jobs")
    print("\n".join("|".join(j.values()) for j in jobs))

    # every training job went through sbatch and ended COMPLETED in SLURM's accounting
    res = wd / "results"
    m = json.loads((res / "manifest.json").read_text())
    run_ids = {e["run_id"] for s in m["studies"].values() for e in s["runs"]}
    for rid in run_ids:
        states = [j["State"] for j in train_jobs(jobs, rid)]
        assert states and states[-1] == "COMPLETED", (rid, states)
        assert (res / f"runs/{rid}/metrics.json").is_file()
    assert log.count("has been submitted with SLURM jobid") == len(jobs)
    # the cancelled job: reported, resubmitted (retries: 1), resumed from its checkpoint
    target_jobs = train_jobs(jobs, target)
    assert [j["JobIDRaw"] for j in target_jobs][0] == cancelled["job"]
    assert target_jobs[0]["State"].startswith("CANCELLED")
    assert [j["State"] for j in target_jobs][1:] == ["COMPLETED"]
    assert f"SLURM-job '{cancelled['job']}' failed, SLURM status is: 'CANCELLED'" in log
    resumed = json.loads((out / "metrics.json").read_text())
    sessions = resumed["provenance"]["resumed"]
    assert len(sessions) == 1 and 1 <= sessions[0]["epoch"] < 12, sessions
    assert "resumed from" in (res / f"logs/train/{target}.log").read_text()
    rows = list(csv.DictReader((out / "history.csv").open()))
    assert [r["epoch"] for r in rows] == [str(e) for e in range(12)] + ["final"]
    # ... to the numbers of an uninterrupted run of the same config (one thread, like the job)
    ref = tmp_path / "uninterrupted"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "lpdt.cli",
            "train",
            "--config",
            str(res / f"configs/{target}.yaml"),
            "--out",
            str(ref),
        ],
        env={
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "MLFLOW_DISABLE_TELEMETRY": "true",
        },
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    full = json.loads((ref / "metrics.json").read_text())
    assert resumed["final"] == full["final"]
    assert resumed["communication"] == full["communication"]

    # the report is built
    for t in artifacts.TABLE_NUMBERS:
        assert (res / f"tables/table{t}.csv").is_file()
    assert (wd / "reports/report.pdf").stat().st_size > 0

    # every run is in MLflow, through the tracking server (what compute nodes reach), once
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_server)
    exp = client.get_experiment_by_name("lpdt")
    logged = [
        r.data.tags.get("lpdt_run_id")
        for r in client.search_runs([exp.experiment_id], max_results=1000)
    ]
    assert run_ids <= set(logged)
    assert logged.count(target) == 1
    synced = json.loads((res / "mlflow/synced.json").read_text())
    assert set(synced["runs"]) == run_ids
    report_run = json.loads((res / "mlflow/report-slurm_smoke.json").read_text())["mlflow_run_id"]
    assert "report.pdf" in {a.path for a in client.list_artifacts(report_run)}


@pytest.mark.slow
def test_a_job_over_its_time_limit_is_reported_resubmitted_and_resumed(
    cluster, mlflow_server, tmp_path
):
    """runtime: 1 (minute) for a run that needs far longer, the profile's retries: 1. Each attempt
    ends as TIMEOUT and Snakemake says so, naming the SLURM log (which says why) and the training
    log (which says what now); the second attempt resumes from the first one's checkpoint; the
    checkpoint stays for a rerun."""
    wd = workdir(tmp_path)
    target = long_table4_scale(wd, "slurm_timeout", epochs=5000)["fp32"]
    profile = slurm_profile(tmp_path / "profile", {"set-resources": {"train": {"runtime": 1}}})
    t0 = time.perf_counter()
    rc, log = run_snakemake(
        cluster,
        wd,
        profile,
        [
            "--config",
            "scale=slurm_timeout",
            f"tracking_uri={mlflow_server}",
            "--",
            f"results/runs/{target}/metrics.json",
        ],
        timeout=900,
    )
    print(f"\ntime-limit test: {time.perf_counter() - t0:.0f} s")
    assert rc != 0
    reported = re.findall(r"SLURM-job '(\d+)' failed, SLURM status is: 'TIMEOUT'", log)
    jobs = train_jobs(cluster.sacct(), target)
    print("\n".join("|".join(j.values()) for j in jobs))
    assert [j["JobIDRaw"] for j in jobs] == reported and len(reported) == 2, log[-4000:]
    assert all(j["State"] == "TIMEOUT" and j["Timelimit"] == "00:01:00" for j in jobs)
    # the error names the SLURM log, which says why, and the training log
    for job in reported:
        slurm_log = wd / ".snakemake/slurm_logs/rule_train" / target / f"{job}.log"
        assert str(slurm_log) in log
        assert "DUE TO TIME LIMIT" in slurm_log.read_text()
    assert f"results/logs/train/{target}.log" in log
    # the second attempt resumed from the first one's checkpoint, and says how it ended
    train_log = (wd / "results/logs/train" / f"{target}.log").read_text()
    resumed = re.search(r"resumed from \S+ after epoch (\d+)", train_log)
    assert resumed and int(resumed[1]) >= 1, train_log[-2000:]
    assert "lpdt train stopped by SIGTERM" in train_log
    out = wd / "results/runs" / target
    assert (out / "checkpoint.pt").is_file() and not (out / "metrics.json").exists()
