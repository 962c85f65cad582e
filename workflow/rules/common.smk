# Grid expansion: config/studies.yaml x config/scales/<scale>.yaml -> one run per unique config.
# The logic is plain Python in lpdt.grid (src/lpdt/grid.py, unit-tested in tests/workflow/).

import hashlib
import json
import os
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

import lpdt
from lpdt import grid
from lpdt.models import MODELS
from lpdt.report.claims import study_claims
from lpdt.tracking import TrackingError, check_uri

PY = sys.executable  # the interpreter running snakemake has lpdt installed
LPDT = f"{PY} -m lpdt.cli"
SCALE = config["scale"]


def check_path(key, path, folder):
    """A path the config gives (``key``): one the rules' shell commands can take unquoted (no
    space or shell character: `results=my results` wrote to a file named `my`), and a folder
    (``folder``) or a file as it must be (`results=<a file>` was a 66-line traceback)."""
    bad = re.search(r"[\s'\"$`;&|<>()*?\[\]{}\\#!~]", path)
    if bad:  # (~: the shell expands it, Snakemake does not: they would name other files)
        what = "a space" if bad[0].isspace() else f"the character {bad[0]!r}"
        raise WorkflowError(
            f"{key}={path!r}: {what} in a path breaks the workflow's shell commands (they take "
            "paths unquoted); choose a path without it"
        )
    if folder and Path(path).exists() and not Path(path).is_dir():
        raise WorkflowError(f"{key}={path} is a file, not a folder")
    if not folder and Path(path).is_dir():
        raise WorkflowError(f"{key}={path} is a folder; give the path of a file")


check_path("results", config["results"], folder=True)
RESULTS = os.path.normpath(config["results"])  # results=out/ or results=. : paths Snakemake takes
# The workflow's own folders, or one above it: results=config made results/plateau_check.csv the
# shipped config/plateau_check.csv, and results=.. wrote runs/ beside the checkout.
# The checkout's folders beside the Snakefile (workflow.basedir), and the working directory's
# config/ (--directory: the workdir's own); the working directory itself (results=.) may hold
# the results.
_CHECKOUT = Path(workflow.basedir).resolve()
_OWN = {_CHECKOUT / n for n in ("workflow", "profiles", "src", "tests", "docs")}
_OWN.add(Path("config").resolve())
_HERE = Path(RESULTS).resolve()
_ABOVE = _HERE != Path.cwd().resolve() and Path.cwd().resolve().is_relative_to(_HERE)
if _HERE in _OWN or _ABOVE:
    raise WorkflowError(
        f"results={config['results']} is the workflow's own folder {RESULTS} or one above it; "
        "choose a folder of its own (default: results)"
    )
RUNS_DIR = f"{RESULTS}/runs"
# The MLflow store: auto is a SQLite file in the results folder, so that results=elsewhere keeps
# its runs apart from the default folder's
TRACKING_URI = (
    f"sqlite:///{RESULTS}/mlflow.db"
    if config["tracking_uri"] == "auto"
    else config["tracking_uri"]
)
# A URI MLflow cannot use (a typo of a scheme: htp://, a database path without sqlite:///, a
# file store) passed every dry run and stopped the first MLflow job: refused here, by the check
# every MLflow path of lpdt makes (lpdt.tracking.check_uri).
if config["mlflow"]:
    try:
        check_uri(TRACKING_URI, "tracking_uri=")
    except TrackingError as e:
        raise WorkflowError(str(e)) from None
MANIFEST = f"{RESULTS}/manifest.json"
STUDIES_FILE = config["studies"]
LPDT_SOURCES = Path(lpdt.__file__).parent
SCALE_FILE = f"{config['scales_dir']}/{SCALE}.yaml"

# A scale is a file's name in scales_dir: a path (scale=../scales/smoke) was read, and named
# results/plan-../scales/smoke.tsv, a folder results/plan-.. made for it.
_A_PATH = Path(SCALE).name != SCALE  # a separator in it
if _A_PATH or SCALE.startswith(".") or not Path(SCALE_FILE).is_file():
    names = sorted(p.stem for p in Path(config["scales_dir"]).glob("*.yaml"))
    choose = f"choose one of: {', '.join(names)}" if names else f"{config['scales_dir']} holds no scale"
    what = "a scale is a name in scales_dir, not a path" if _A_PATH else f"no {SCALE_FILE}"
    raise WorkflowError(f"unknown scale {SCALE!r}: {what}; {choose}")
try:  # the scale and the scales it names as its `base`
    SCALE_FILES = [str(path) for path, _ in grid.scale_chain(SCALE_FILE)]
except grid.GridError as e:
    raise WorkflowError(f"scale {SCALE!r}: {e}") from None


def validate_in_one_line(data, schema, what, **kwargs):
    """Snakemake's ``validate``, a violation said in one line naming ``what`` and where in it
    (Snakemake's own message prints the schema after it: 14 lines for a studies file cut short,
    108 for an empty one, naming neither the file nor the key)."""
    import jsonschema

    try:
        validate(data, schema, **kwargs)
    except WorkflowError as e:
        cause = e.__context__  # the ValidationError Snakemake caught
        if not isinstance(cause, jsonschema.exceptions.ValidationError):
            raise
        where = ".".join(str(p) for p in cause.absolute_path)
        raise WorkflowError(f"{what}{f' at {where}' if where else ''}: {cause.message}") from None


for _path in SCALE_FILES:
    validate_in_one_line(grid.read_yaml(_path), "../schemas/scale.schema.yaml", _path)
try:
    SPEC = grid.load(STUDIES_FILE, SCALE_FILE)
except grid.GridError as e:  # a studies file that is missing, not YAML or not a mapping
    raise WorkflowError(str(e)) from None
_what = f"{STUDIES_FILE} with scale {SCALE!r}"
validate_in_one_line(SPEC, "../schemas/studies.schema.yaml", _what, set_default=False)
try:
    RUNS = grid.expand(SPEC)
except grid.GridError as e:
    raise WorkflowError(f"{STUDIES_FILE} with scale {SCALE!r}: {e}") from None

# A dry run (-n, --dry-run, or -n among other short flags: -np). Snakemake sets its dry-run
# executor only after reading this file, so the command line says it.
DRY_RUN = any(
    a in ("--dry-run", "--dryrun") or re.fullmatch(r"-[A-Za-z]*n[A-Za-z]*", a) for a in sys.argv
)

# Nothing is written while the DAG is built (`snakemake -n` is read-only): the per-run configs
# and the manifest are outputs of the rules `run_configs` and `manifest` below.
MANIFEST_DATA = grid.manifest(RUNS, SPEC, SCALE, RUNS_DIR)
MANIFEST_TEXT = grid.manifest_text(MANIFEST_DATA)
try:  # the claims a study declares (`claims:`): checked here, so a mistake stops the DAG at once
    study_claims(MANIFEST_DATA)
except ValueError as e:
    raise WorkflowError(f"{STUDIES_FILE} with scale {SCALE!r}: {e}") from None
# Runs of a cell with several seeds: their MLflow names end in the seed (lpdt.tracking.run_name).
MANIFEST_STAMP = f"{RESULTS}/.manifest/{hashlib.sha1(MANIFEST_TEXT.encode()).hexdigest()[:16]}"


# Whether the jobs run under a cluster executor (SLURM), each job a Snakemake process of its own
# that reads this file again (exec mode remote). Snakemake sets its executor only after reading
# the file (``workflow.local_exec`` is True while it does), so the main process knows a cluster
# executor by its job count: ``--jobs`` (the SLURM profile's ``jobs:``) is a cluster executor's
# number of jobs at once, on the local executor an alias of ``--cores`` (Snakemake's CLI). Every
# process must agree: a batch rule planned by the main process and not defined in its jobs
# failed every SLURM job ("'NoneType' object has no attribute 'keys'" while the job built its
# DAG; tests/workflow/test_slurm.py). A local run given --jobs besides --cores counts as a
# cluster's here: its runs are not batched (the same results, a job per run). A job's own code
# (a rule's run: block) sees the executor itself (workflow.local_exec).
ON_CLUSTER = (
    workflow.remote_exec
    or not workflow.local_exec
    or workflow.resource_settings.nodes is not None
)

# Batches (config batch_runs; rule train_batch): batch name -> its runs, and run -> its batch.
# auto: on where the jobs run on this machine's CPU with the simulated engine (not on GPUs, whose
# jobs share a GPU k at a time, nor under a cluster executor, where a job per run spreads).
from lpdt import gpus

GPU_IDS = gpus.visible_gpu_ids()  # this machine's GPUs (rule train's resources: train.smk)
_batching = config.get("batch_runs", "auto")
if _batching == "auto":
    _batching = config.get("engine", "simulated") == "simulated" and not ON_CLUSTER and not GPU_IDS
BATCHES = grid.run_batches(RUNS) if _batching else {}
BATCH_OF = {r: b for b, ids in BATCHES.items() for r in ids}
# The first batch of each compiled graph (lpdt.plan.runtime.compiled_shape) starts before the
# others (rule train_batch_lead, a higher priority), so that the jobs that start together
# compile different graphs: on a fresh machine two jobs of one graph would both compile it
# cold, side by side (measured 2026-11-27: 172 s each, two busy loops beside them).
from lpdt.plan.runtime import compiled_shape as _compiled_shape

_leads = {}
for _b, _ids in BATCHES.items():  # batches of seeds (the long jobs) only
    if _b.startswith("seeds-"):
        _leads.setdefault(_compiled_shape(RUNS[_ids[0]].config) or _b, _b)
LEAD_BATCHES = sorted(_leads.values())
# The other batches start longest first (as the plan packs them): the longest third before the
# middle third before the rest (rules train_batch_long, train_batch_mid), so that the last jobs
# are short ones and no job slot idles long while the other finishes a long batch. Their length
# here: the reference CPU's estimate at their training images x epochs (unscaled; an order, not
# the plan).
from lpdt.plan.runtime import run_seconds as _run_seconds


def _batch_seconds(ids):
    return sum(_run_seconds(RUNS[r].config, grid.train_samples(RUNS[r].config)) or 0.0 for r in ids)


_by_length = sorted((b for b in BATCHES if b not in _leads.values()), key=lambda b: -_batch_seconds(BATCHES[b]))
_third = (len(_by_length) + 2) // 3
LONG_BATCHES, MID_BATCHES = sorted(_by_length[:_third]), sorted(_by_length[_third : 2 * _third])
BATCH_DIR = f"{RESULTS}/batches"


def run_done(run_ids=None):
    """What says that the given runs (default: every run of the scale) are trained: a run's
    metrics.json (rule train), or its batch's stamp (rule train_batch), once per batch."""
    done = {}
    for r in RUNS if run_ids is None else run_ids:
        done.setdefault(f"{BATCH_DIR}/{BATCH_OF[r]}.txt" if r in BATCH_OF else f"{RUNS_DIR}/{r}/metrics.json")
    return list(done)


wildcard_constraints:
    run_id="[0-9a-f]{12}",


localrules:
    plan,
    run_configs,
    manifest,


# Settings that decide a derived output without being a file or a part of its name (an analysis's
# parameters, the MLflow store and experiment, the report's plateau check): each becomes an input
# file named by a hash of its value, written when missing (rule settings), so that a changed
# value reruns the rules that read it and nothing else. The profiles' rerun triggers are mtimes
# only, so a changed `params:` alone reruns nothing (profiles/default/config.yaml says why).
SETTINGS_DIR = f"{RESULTS}/.settings"
SETTINGS = {}  # file name -> its text


def settings_file(kind, value):
    """The settings file of ``value`` (JSON-able) for ``kind`` (letters, digits, _ and .)."""
    text = json.dumps(value, sort_keys=True) + "\n"
    name = f"{kind}-{hashlib.sha1(text.encode()).hexdigest()[:12]}.json"
    SETTINGS[name] = text
    return f"{SETTINGS_DIR}/{name}"


def configs_settings(kind, runs):
    """The settings file of the texts of ``runs``' configs. A config's name hashes only what
    changes results: an execution key (data.root, device, train.compile in a scale) changes its
    text, not its name, so without this input the job that writes the configs did not run, and
    every training job read the old value."""
    return settings_file(kind, {r: grid.config_digest(run) for r, run in runs.items()})


rule run_configs:
    """`results/configs/<run_id>.yaml` of every run, the inputs of `lpdt train`. One job for all
    (each `run:` job re-reads the workflow in a subprocess: seconds). A config's name is the
    hash of its result-affecting content, and rule train takes it as ancient(), so rewriting
    the configs (one missing, or an execution key changed: configs_settings) reruns no
    training."""
    input:
        configs_settings("configs", RUNS),
    output:
        [f"{RESULTS}/configs/{r}.yaml" for r in RUNS],
    run:
        for path, r in zip(output, RUNS.values()):
            grid.write_if_changed(path, grid.config_text(r))


rule manifest:
    """`results/manifest.json` (studies -> runs), read by lpdt report and mlflow_sync, and its
    content stamp: a file named by the manifest's hash. A manifest whose content changed (another
    scale, edited studies) has no stamp yet; the consumers (rules all, report, mlflow_sync) ask
    for the stamp too, so the manifest is rewritten before any of them runs, whatever the rerun
    triggers (the profiles use mtime only)."""
    output:
        manifest=MANIFEST,
        stamp=MANIFEST_STAMP,
    run:
        for old in Path(output.stamp).parent.iterdir():
            if old.name != Path(output.stamp).name:
                old.unlink()
        grid.write_if_changed(output.manifest, MANIFEST_TEXT)
        Path(output.stamp).write_text(f"{SCALE}\n")


def code_settings():
    """The settings file of lpdt's code: a hash of its sources and data files (the paper's
    claims.yaml among them). An input of the cheap rules that run lpdt (the analyses, the cost
    model, the report, MLflow's init, sync and report run), so that an edited or upgraded lpdt
    makes their outputs again (seconds); training takes none: a change that moves a run's
    numbers gets new run ids (RECIPE_VERSIONS)."""
    digest = hashlib.sha1()
    for f in sorted(LPDT_SOURCES.rglob("*")):
        if f.is_file() and f.suffix in (".py", ".yaml", ".csv", ".json"):
            digest.update(f"{f.relative_to(LPDT_SOURCES)}\n".encode() + f.read_bytes())
    return settings_file("code", {"lpdt": digest.hexdigest()})


LPDT_CODE = code_settings()


localrules:
    settings,


rule settings:
    """One settings file (settings_file); the older ones of its kind are removed, so that going
    back to earlier settings writes their file again, newer than what the others made."""
    output:
        f"{SETTINGS_DIR}/{{name}}",
    wildcard_constraints:
        name=r"[A-Za-z0-9_.]+-[0-9a-f]{12}\.json",
    run:
        name = Path(output[0]).name
        kind = re.escape(name[: -len("-000000000000.json")])
        for old in Path(output[0]).parent.iterdir():
            if old.name != name and re.fullmatch(rf"{kind}-[0-9a-f]{{12}}\.json", old.name):
                old.unlink()
        Path(output[0]).write_text(SETTINGS[name])


rule plan:
    """`snakemake plan`: one row per run (studies, sizes, samples, job, estimate) and the totals,
    for budgeting (lpdt.plan.table), written to `results/plan-<scale>.tsv`. No declared output,
    so that it runs (and prints) every time it is asked for: the price depends on more than its
    inputs (`--config` keys such as plan_gpus, the code's measured costs, this machine's speed
    probe), and with the table as its output a second `snakemake plan` said "Nothing to be done"
    and printed nothing, a stale table left as it was."""
    input:
        STUDIES_FILE,
        SCALE_FILES,
    run:
        from lpdt.plan.table import write_plan

        # under a cluster executor (SLURM) a job gets a whole GPU unless shards are configured
        out = f"{RESULTS}/plan-{SCALE}.tsv"
        write_plan(RUNS, BATCHES, config, SCALE, out, on_cluster=not workflow.local_exec)
