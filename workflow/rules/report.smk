# Tables, figures, the claims check and the PDF, all from the run files + manifest + cost model
# (`lpdt report`, src/lpdt/report/). Every table and figure of the paper is a declared output,
# so a missing one fails the workflow.

from lpdt.report import artifacts  # the figures and tables, listed once

TABLE_NUMBERS = artifacts.TABLE_NUMBERS
TABLES = [f"{RESULTS}/tables/{t}.{ext}" for t in artifacts.TABLES for ext in artifacts.TABLE_FORMATS]
FIGURES = [f"{RESULTS}/figures/{f}.{ext}" for f in artifacts.FIGURES for ext in artifacts.FIGURE_FORMATS]
CLAIMS = f"{RESULTS}/claims.json"
# auto: reports/report.pdf for the default results folder, else report.pdf in the results folder
# (one shared file was overwritten by each folder's report, and another folder's was attached to
# this folder's MLflow store)
REPORT_PDF = (
    (f"{RESULTS}/report.pdf" if RESULTS != "results" else "reports/report.pdf")
    if config["report"] == "auto"
    else config["report"]
)
config["report"] = REPORT_PDF  # the path, in Snakemake's HTML report (workflow/report/workflow.rst)
check_path("report", REPORT_PDF, folder=False)
if Path(REPORT_PDF).suffix.lower() != ".pdf":  # report=x.txt wrote a PDF named .txt
    raise WorkflowError(f"report={config['report']}: the report is a PDF; give a path ending in .pdf")
PAPER_RESULTS = config["paper_results"]
check_path("paper_results", PAPER_RESULTS, folder=False)
# (a missing one was a MissingInputException of ~40 files; said by the process that plans)
if workflow.is_main_process and not Path(PAPER_RESULTS).is_file():
    raise WorkflowError(f"paper_results={PAPER_RESULTS}: no such file (the paper's numbers)")
PLATEAU_CHECK = config.get("plateau_check", "none")  # "none": the report says it is not measured
check_path("plateau_check", PLATEAU_CHECK, folder=False)
# The report reads this workflow's check (results/plateau_check.csv, `snakemake plateau_check`)
# when it exists, else the shipped one (config plateau_check). The former is a param, not an
# input: as an input it would link rule plateau_check, and a default run could then train the
# 2x runs (after a grid change, or another scale in the same results directory). So the report
# is not rerun when that file changes: `make plateau-check` reruns it (--forcerun report). The
# choice itself (config plateau_check) is a settings file of the report: changing it reruns it.
PLATEAU_ARG = "none" if PLATEAU_CHECK == "none" else f"{PLATEAU_CSV} {PLATEAU_CHECK}"


def in_report(path, caption, category, **labels):
    """``path`` marked for `snakemake --report` (captions: workflow/report/*.rst)."""
    return report(path, caption=f"../report/{caption}", category=category, labels=labels or None)


# What `snakemake --report report.zip` shows: each figure (PNG), each table (CSV), the claims
# check and the PDF. The other formats are outputs too, but not repeated in the report.
REPORTED = (
    [in_report(f"{RESULTS}/figures/fig{f}.png", f"fig{f}.rst", "Figures", figure=f"Figure {f}")
     for f in artifacts.FIGURE_NUMBERS]
    + [in_report(f"{RESULTS}/tables/table{t}.csv", "table.rst", "Tables", table=f"Table {t}")
       for t in TABLE_NUMBERS]
)


localrules:
    report,


rule report:
    input:
        manifest=MANIFEST,
        manifest_stamp=MANIFEST_STAMP,  # the manifest of this scale (rule manifest)
        runs=run_done(),
        cost=COST_DIR,
        analysis=ANALYSIS_FILES,
        paper=PAPER_RESULTS,
        plateau=[] if PLATEAU_CHECK == "none" else [PLATEAU_CHECK],
        settings=settings_file("report", {"plateau": PLATEAU_ARG}),
        code=LPDT_CODE,  # the paper's claims (report/claims.yaml) among it
    output:
        reported=REPORTED,
        tables=[t for t in TABLES if t not in REPORTED],
        figures=[f for f in FIGURES if f not in REPORTED],
        claims=CLAIMS,
        claims_md=in_report(f"{RESULTS}/claims.md", "claims.rst", "Claims"),
        pdf=in_report(REPORT_PDF, "report_pdf.rst", "Report"),
    params:
        # the Snakemake report's figure captions (workflow/report/figN.rst shows its own)
        captions={f: artifacts.snakemake_caption(f, SCALE) for f in artifacts.FIGURES},
        # the analyses' folder (a scale may draw no partition or graph: then none is read)
        analysis=lambda w, input: str(Path(input.analysis[0]).parent)
        if input.analysis
        else f"{RESULTS}/analysis",
        tables=lambda w, output: str(Path(output.tables[0]).parent),
        figures=lambda w, output: str(Path(output.figures[0]).parent),
        plateau=PLATEAU_ARG,
    log:
        f"{RESULTS}/logs/report.log",
    benchmark:
        f"{RESULTS}/benchmarks/report.tsv"
    shell:
        "{LPDT} report --manifest {input.manifest} --cost {input.cost}"
        " --analysis {params.analysis} --paper {input.paper}"
        " --tables {params.tables} --figures {params.figures} --claims {output.claims}"
        " --pdf {output.pdf} --plateau {params.plateau} > {log} 2>&1"
