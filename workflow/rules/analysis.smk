# Analyses without training: cost model (Tables 7/9/10, Figure 7, Table 3 "Data"),
# partition histograms (Figure 2), graphs (Figure 3). Parameters come from config/studies.yaml
# (studies of kind cost / partition / topology, with the scale's overrides): each output's
# parameters are a settings file (common.smk), so that changing them reruns these cheap rules.

import re

PARTITIONS = {s["out"]: s for s in grid.analyses(SPEC, "partition").values()}
GRAPHS = {g["out"]: g for s in grid.analyses(SPEC, "topology").values() for g in s["graphs"]}
COST_DIR = f"{RESULTS}/cost"
ANALYSIS_FILES = [f"{RESULTS}/analysis/{f}" for f in [*PARTITIONS, *GRAPHS]]
ANALYSIS_SETTINGS = {  # output file -> its parameters' settings file (common.smk)
    f: settings_file(f"analysis_{f}", spec) for f, spec in {**PARTITIONS, **GRAPHS}.items()
}


def _alternatives(names):
    return "|".join(re.escape(n) for n in names) or "$^"


localrules:
    cost,
    partition,
    topology,  # seconds each: never worth a cluster job


rule cost:
    input:
        LPDT_CODE,
    output:
        directory(COST_DIR),
    log:
        f"{RESULTS}/logs/cost.log",
    benchmark:
        f"{RESULTS}/benchmarks/cost.tsv"
    shell:
        "{LPDT} cost all --out {output} > {log} 2>&1"


rule partition:
    input:
        LPDT_CODE,
        lambda w: ANALYSIS_SETTINGS[w.partition_file],
    output:
        f"{RESULTS}/analysis/{{partition_file}}",
    wildcard_constraints:
        partition_file=_alternatives(PARTITIONS),
    log:
        f"{RESULTS}/logs/analysis/{{partition_file}}.log",
    params:
        class_sizes=lambda w: PARTITIONS[w.partition_file]["class_sizes"],
        nodes=lambda w: PARTITIONS[w.partition_file]["nodes"],
        skews=lambda w: " ".join(str(s) for s in PARTITIONS[w.partition_file]["skews"]),
    shell:
        "{LPDT} partition --class-sizes {params.class_sizes} --nodes {params.nodes}"
        " --skew {params.skews} --json {output} > {log} 2>&1"


rule topology:
    input:
        LPDT_CODE,
        lambda w: ANALYSIS_SETTINGS[w.graph_file],
    output:
        f"{RESULTS}/analysis/{{graph_file}}",
    wildcard_constraints:
        graph_file=_alternatives(GRAPHS),
    log:
        f"{RESULTS}/logs/analysis/{{graph_file}}.log",
    params:
        name=lambda w: GRAPHS[w.graph_file]["name"],
        nodes=lambda w: GRAPHS[w.graph_file]["nodes"],
        rows=lambda w: f"--rows {GRAPHS[w.graph_file]['rows']}" if "rows" in GRAPHS[w.graph_file] else "",
    shell:
        "{LPDT} topology --name {params.name} --nodes {params.nodes} {params.rows}"
        " --json {output} > {log} 2>&1"
