# lpdt: the paper's experiment grid -> training runs -> tables, figures, report.
#
#   snakemake --cores all                        # quick scale (default, offline, ~1 h on 2 cores)
#   snakemake --cores all --config scale=paper   # the paper's protocol
#   snakemake --cores 2 --config scale=smoke     # the whole DAG in minutes (tests)
#   snakemake --cores all plateau_check          # the claim cells at 2x epochs (not in `all`)
#   snakemake --workflow-profile profiles/slurm --config scale=paper tracking_uri=http://host:5000
#
# See docs/workflow.md. Studies: config/studies.yaml; scales: config/scales/*.yaml.

import time

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

min_version("9.0")

# When this invocation started: the end-of-run line (onsuccess) compares only the training jobs
# whose benchmark files were written since (lpdt.plan.runtime.plan_check).
STARTED = time.time()


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


# `--config plan_probe=false` arrives as the string "false": read true / false as booleans
for _key, _value in list(config.items()):
    if isinstance(_value, str) and _value.lower() in ("true", "false"):
        config[_key] = _value.lower() == "true"


def _config_error(schema_path):
    """The config's first violation of the schema as jsonschema ranks them, in one line (Snakemake's
    own error prints the whole schema after it: about 190 lines for a misspelt key)."""
    import jsonschema
    import yaml

    with open(f"{workflow.basedir}/{schema_path}") as f:
        schema = yaml.safe_load(f)
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is None:
        return None
    where = ".".join(str(p) for p in error.absolute_path)
    choice = error.parent if error.parent is not None else error
    if choice.validator in ("oneOf", "anyOf"):  # "'maybe' is not one of ['auto']" said only one
        expected = ", or ".join(_expected(branch) for branch in choice.validator_value)
    else:
        expected = _expected(error.schema) if error.validator == "type" else ""
    more = f"; expected {expected}" if expected else ""
    if error.instance is None and where:  # `--config scale=` (Snakemake reads it as None)
        return f"config {where}: empty; give it a value{more} (or leave it out: its default)"
    return f"config{f' {where}' if where else ''}: {error.message}{more}"


def _expected(schema):
    """What a schema (a branch of a oneOf) takes, in words: "true or false", "'auto'", "an
    integer >= 1"; "" for a schema these words do not cover."""
    if "const" in schema:
        return repr(schema["const"])
    if "enum" in schema:
        return " or ".join(map(repr, schema["enum"]))
    kind = schema.get("type")
    if kind == "boolean":
        return "true or false"
    if kind == "integer":
        return "an integer" + (f" >= {schema['minimum']}" if "minimum" in schema else "")
    return ""


if (_error := _config_error("workflow/schemas/config.schema.yaml")) is not None:
    raise WorkflowError(_error)
validate(config, "workflow/schemas/config.schema.yaml")  # and its defaults


include: "workflow/rules/common.smk"
include: "workflow/rules/mlflow.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/plateau.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        REPORT_PDF,
        MANIFEST,
        MANIFEST_STAMP,
        mlflow_targets(),
        # every settings file of this invocation: Snakemake makes a missing input of a finished
        # job only for a job that runs, so the target asks for them (as for the manifest stamp)
        [f"{SETTINGS_DIR}/{name}" for name in SETTINGS],
    default_target: True


# After a pipeline that trained: how the training jobs it ran compare with the plan's estimates
# for them (the plan is printed by `make report` before it starts; docs/compute.md, "The time
# estimate"). Jobs of earlier invocations are not counted: nothing is printed after a no-op rerun.
onsuccess:
    from lpdt.plan.runtime import plan_check

    line = plan_check(f"{RESULTS}/plan-{SCALE}.tsv", f"{RESULTS}/benchmarks/train", STARTED)
    if line:
        print(line)
