# The plateau check (`snakemake plateau_check`; not part of the default target: it doubles the
# training of the claim cells). For every cell an accuracy claim can read (the cells of a study
# block with several seeds: lpdt.report.plateau.checked_cells), its first seed is trained once
# more for twice its epochs (milestones doubled; lpdt.report.plateau.doubled) by rule train's
# own job (`use rule train`): same threads, engine and config keys, only the epochs change.
# The 2x runs live under results/plateau/runs/<2x run id>/ (configs under results/plateau/
# configs/), are not logged to MLflow (they are in no study), and rule plateau_check writes
# results/plateau_check.csv: each pair's accuracies, both runs' git commits (`<commit>-dirty` for
# a run trained from a tree with uncommitted changes: never the same commit as another run, even
# at the same HEAD) and a status. The report re-scores the claims on these pairs alone (1x and 2x
# of one commit), and says whether their commit and 1x accuracies are its own runs'.
# docs/quick-scale.md, "Plateau check".

from lpdt.report import plateau as plateau_check_lib

PLATEAU_DIR = f"{RESULTS}/plateau"
PLATEAU_CSV = f"{RESULTS}/plateau_check.csv"
PLATEAU_CASES = plateau_check_lib.checked_cells(RUNS)  # 1x run id -> case
PLATEAU_RUNS = {}  # 2x run id -> grid.GridRun of the doubled config
PLATEAU_PAIRS = []  # (case, 1x run id, 2x run id)
for _rid, _case in PLATEAU_CASES.items():
    _rid2, _cfg2 = grid.resolve(plateau_check_lib.doubled(RUNS[_rid].config))
    PLATEAU_RUNS[_rid2] = grid.GridRun(_rid2, _cfg2)
    PLATEAU_PAIRS.append((_case, _rid, _rid2))
# (case, 1x run dir, 2x run dir): what rule plateau_check summarises
PLATEAU_DIRS = [(c, f"{RUNS_DIR}/{a}", f"{PLATEAU_DIR}/runs/{b}") for c, a, b in PLATEAU_PAIRS]


localrules:
    plateau_configs,
    plateau_check,


rule plateau_configs:
    """The 2x runs' configs (as rule run_configs writes the grid's)."""
    input:
        configs_settings("plateau_configs", PLATEAU_RUNS),
    output:
        [f"{PLATEAU_DIR}/configs/{r}.yaml" for r in PLATEAU_RUNS],
    run:
        for path, r in zip(output, PLATEAU_RUNS.values()):
            grid.write_if_changed(path, grid.config_text(r))


use rule train as plateau_train with:
    input:
        cfg=ancient(f"{PLATEAU_DIR}/configs/{{run_id}}.yaml"),
        # the 2x runs read the data of the grid's claim cells
        data=data_ready(*(f"{PLATEAU_DIR}/runs/{{run_id}}/{name}" for name in RUN_FILES)),
    output:
        metrics=f"{PLATEAU_DIR}/runs/{{run_id}}/metrics.json",
        history=f"{PLATEAU_DIR}/runs/{{run_id}}/history.csv",
        config=f"{PLATEAU_DIR}/runs/{{run_id}}/config.yaml",
    log:
        f"{RESULTS}/logs/plateau/{{run_id}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/plateau/{{run_id}}.tsv"
    params:
        out=f"{PLATEAU_DIR}/runs/{{run_id}}",
        engine=config.get("engine", "simulated"),
        mlflow="false",
        uri=TRACKING_URI,
        experiment=config["experiment"],
        scale=SCALE,


rule plateau_check:
    """results/plateau_check.csv: per checked cell, the 1x and 2x accuracies, the git commit of
    each run (a dirty tree: `<commit>-dirty`) and the pair's status
    (lpdt.report.plateau.write_summary)."""
    input:
        one=run_done([r for _, r, _ in PLATEAU_PAIRS]),
        two=[f"{PLATEAU_DIR}/runs/{r}/metrics.json" for _, _, r in PLATEAU_PAIRS],
    output:
        PLATEAU_CSV,
    log:
        f"{RESULTS}/logs/plateau_check.log",
    run:
        plateau_check_lib.write_summary(PLATEAU_DIRS, output[0], log=log[0])
