"""``lpdt report``: tables, figures, claims check and the PDF from the run records.

lpdt report [--manifest results/manifest.json] [--cost results/cost]
            [--analysis results/analysis] [--paper config/paper_results.csv]
            [--tables results/tables] [--figures results/figures]
            [--claims results/claims.json] [--pdf reports/report.pdf]
            [--plateau results/plateau_check.csv config/plateau_check.csv]
            [--only tables|figures|claims|pdf]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lpdt.io import output_file
from lpdt.report import artifacts

ONLY = ("tables", "figures", "claims", "pdf")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--manifest", default="results/manifest.json", help="workflow manifest")
    p.add_argument("--cost", default="results/cost", help="`lpdt cost all` output directory")
    p.add_argument(
        "--analysis",
        default="results/analysis",
        help="partition*.json (Figure 2) and topology*.json (Figure 3)",
    )
    p.add_argument("--paper", default="config/paper_results.csv", help="the paper's numbers")
    p.add_argument("--tables", default="results/tables", help="output directory for tables")
    p.add_argument("--figures", default="results/figures", help="output directory for figures")
    p.add_argument(
        "--claims",
        type=output_file,
        default="results/claims.json",
        help="claims check output, JSON (its Markdown is written beside it, .md)",
    )
    p.add_argument("--pdf", type=output_file, default="reports/report.pdf", help="the PDF report")
    p.add_argument(
        "--plateau",
        nargs="+",
        metavar="CSV",
        default=["results/plateau_check.csv", "config/plateau_check.csv"],
        help="plateau check summary (snakemake plateau_check), matched to the runs by run id; "
        "a second file is the shipped fallback, read when the first does not exist; "
        "'none': the report says the plateau is not measured",
    )
    p.add_argument(
        "--only",
        choices=ONLY,
        default=None,
        help="produce only this part (pdf also needs the figures; it draws them if absent)",
    )


def plateau_paths(args: argparse.Namespace) -> list[str | Path]:
    """``--plateau``'s paths as a list (one path when a caller's namespace sets it alone)."""
    return [args.plateau] if isinstance(args.plateau, str | Path) else list(args.plateau)


def check_outputs_spare_inputs(args: argparse.Namespace) -> None:
    """Refuse (``ValueError``, one line) an output that is one of the inputs: ``--tables`` the
    cost folder replaced its ``table7.csv`` and others with the report's tables of those names,
    ``--claims`` the manifest and ``--pdf`` the paper's CSV were written over, each with exit 0."""

    def same(a: str | Path) -> Path:
        return Path(a).resolve()

    claims = Path(args.claims)
    plateau = plateau_paths(args)
    files = {"--manifest": args.manifest, "--paper": args.paper}
    files |= {f"--plateau {p}": p for p in plateau if str(p) != "none"}
    outputs = {"--claims": claims, "--claims (its Markdown)": claims.with_suffix(".md")}
    outputs["--pdf"] = args.pdf
    for out, path in outputs.items():
        for given, src in files.items():
            if same(path) == same(src):
                raise ValueError(f"{out} {path} is the input {given}; it would be written over")
    folders = {"--cost": args.cost, "--analysis": args.analysis}
    for out, path in {"--tables": args.tables, "--figures": args.figures}.items():
        for given, src in folders.items():
            if same(path) == same(src):
                raise ValueError(
                    f"{out} {path} is the input folder {given}; its files would be written over"
                )


def folder_warning(
    kind: str, folder: Path, patterns: tuple[str, ...], holds: str, without: str
) -> str | None:
    """The warning line for an input folder that does not exist, is a file, or holds no file
    of ``patterns``; None for one that holds one."""
    if not folder.exists():
        state = "does not exist"
    elif not folder.is_dir():
        state = "is not a folder"
    elif not any(next(folder.glob(p), None) for p in patterns):
        state = f"holds no {holds}"
    else:
        return None
    return f"lpdt report: warning: {kind} folder {folder} {state}; {without}"


def input_warnings(cost: Path, analysis: Path, want: set[str]) -> list[str]:
    """The warning lines for the cost and analysis folders (``folder_warning``): the cost
    folder's for every part (each reads it), the analysis folder's for the figures and the PDF
    (the only parts that read it). The report goes on without them (docs/report.md: every part
    degrades gracefully); the line makes a mistyped ``--cost`` or ``--analysis`` visible, which
    was a silent "not enough data"."""
    found = [
        folder_warning(
            "cost",
            cost,
            ("*.csv",),
            "CSV file (`lpdt cost all` writes them)",
            "the cost tables, Figure 7 and the cost claims have no data",
        )
    ]
    if want & {"figures", "pdf"}:
        found.append(
            folder_warning(
                "analysis",
                analysis,
                ("partition*.json", "topology*.json"),
                "partition*.json or topology*.json",
                "Figures 2 and 3 have no data",
            )
        )
    return [w for w in found if w is not None]


def run(args: argparse.Namespace) -> int:
    from lpdt.report.aggregate import aggregate, run_counts
    from lpdt.report.claim_text import claims_md_path, write_claims
    from lpdt.report.claims import check_claims, definitions_hash, study_claims, study_entries
    from lpdt.report.figures import write_figures
    from lpdt.report.paper import load_paper
    from lpdt.report.pdf import build_pdf
    from lpdt.report.plateau import load_check
    from lpdt.report.plateau_text import rescoring_json
    from lpdt.report.table_text import write_tables
    from lpdt.report.tables import build_tables

    want = set(ONLY) if args.only is None else {args.only}
    if "claims" in want:
        claims_md_path(Path(args.claims))  # a --claims ending in .md: refused before any work
    check_outputs_spare_inputs(args)
    df, manifest = aggregate(args.manifest)
    checks = plateau_paths(args)
    if len(checks) > 2:
        raise ValueError(f"--plateau takes a file and a fallback, got {len(checks)} paths")
    # read where it is used: --only tables or figures needed the file all the same
    plateau = load_check(*checks) if want & {"claims", "pdf"} else None  # ValueError: one line
    paper = load_paper(args.paper)
    cost, analysis = Path(args.cost), Path(args.analysis)
    tables_dir, figures_dir = Path(args.tables), Path(args.figures)
    scale = manifest.scale
    c = run_counts(df)
    print(
        f"{args.manifest}: scale {scale}, {c['total']} runs ({c['ok']} ok, {c['diverged']} diverged, "
        f"{c['missing']} missing)"
    )
    for line in input_warnings(cost, analysis, want):  # after the inputs that must exist
        print(line, file=sys.stderr, flush=True)
    tables = build_tables(df, paper, cost, scale)
    claims = check_claims(df, paper, cost, study_claims(manifest))  # paper's + the studies'
    if "tables" in want:
        for path in write_tables(tables, tables_dir):
            print(f"wrote {path}")
    if "figures" in want or (
        "pdf" in want and not all((figures_dir / f"{f}.png").exists() for f in artifacts.FIGURES)
    ):

        def warn(line: str) -> None:
            print(f"lpdt report: warning: {line}", file=sys.stderr, flush=True)

        for path in write_figures(df, paper, cost, analysis, figures_dir, warn):
            print(f"wrote {path}")
    if "claims" in want:
        rescoring = rescoring_json(plateau, df)
        definitions = definitions_hash(study_entries(manifest))
        for path in write_claims(claims, Path(args.claims), rescoring, definitions):
            print(f"wrote {path}")
    if "pdf" in want:
        out = build_pdf(
            Path(args.pdf),
            df=df,
            manifest=manifest,
            tables=tables,
            claims=claims,
            figures_dir=figures_dir,
            analysis_dir=analysis,
            cost_dir=cost,
            plateau=plateau,
        )
        print(f"wrote {out}")
    return 0
