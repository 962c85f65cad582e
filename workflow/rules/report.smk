# Tables, figures, the claims check and the PDF, all from the run files + manifest + cost model
# (`lpdt report`, src/lpdt/report/). Every table and figure of the paper is a declared output,
# so a missing one fails the workflow.

TABLES = [f"{RESULTS}/tables/table{t}.{ext}" for t in (2, 3, 4, 5, 6, 7, 9, 10)
          for ext in ("csv", "md", "tex")]  # fmt: skip
FIGURES = [f"{RESULTS}/figures/fig{f}.{ext}" for f in range(1, 8) for ext in ("pdf", "png")]
CLAIMS = f"{RESULTS}/claims.json"
REPORT_PDF = config["report"]
PAPER_RESULTS = config["paper_results"]


localrules:
    report,


rule report:
    input:
        manifest=MANIFEST,
        manifest_stamp=MANIFEST_STAMP,  # the manifest of this scale (rule manifest)
        runs=run_metrics(),
        cost=COST_DIR,
        analysis=ANALYSIS_FILES,
        paper=PAPER_RESULTS,
    output:
        tables=TABLES,
        figures=FIGURES,
        claims=CLAIMS,
        pdf=REPORT_PDF,
    log:
        f"{RESULTS}/logs/report.log",
    benchmark:
        f"{RESULTS}/benchmarks/report.tsv"
    shell:
        "{LPDT} report --manifest {input.manifest} --cost {input.cost}"
        " --analysis {RESULTS}/analysis --paper {input.paper}"
        " --tables {RESULTS}/tables --figures {RESULTS}/figures --claims {output.claims}"
        " --pdf {output.pdf} > {log} 2>&1"
