"""The report's artifacts, listed once: the paper's figures and tables that ``lpdt report``
writes, in the formats it writes them, and what each figure shows. The PDF (``lpdt.report.pdf``:
its captions begin with ``FIGURE_WHAT``), the report command's check that the figures exist
(``lpdt.report.cli``), the workflow's declared outputs and its Snakemake-report entries and
captions (``workflow/rules/report.smk``: ``snakemake_caption``; workflow/report/figN.rst only
names the figure) and the tests read them from here.

This module imports nothing: the workflow reads it while it builds its DAG.
"""

from __future__ import annotations

FIGURE_NUMBERS = (1, 2, 3, 4, 5, 6, 7)  # Figures 1-7 of the paper
TABLE_NUMBERS = (2, 3, 4, 5, 6, 7, 9, 10)  # its tables (1 is the notation, 8 the setup)
FIGURE_FORMATS = ("pdf", "png")
TABLE_FORMATS = ("csv", "md", "tex")
FIGURES = tuple(f"fig{i}" for i in FIGURE_NUMBERS)  # file stems under results/figures/
TABLES = tuple(f"table{t}" for t in TABLE_NUMBERS)  # file stems under results/tables/

# What each figure plots: the first sentence of its caption in the PDF (which adds the setup read
# from the runs it draws) and in the Snakemake report (which adds SNAKEMAKE_NOTE).
FIGURE_WHAT: dict[str, str] = {
    "fig1": "Validation error per epoch, one curve per normalisation layer (8-bit dashed, "
    "triangles); each curve's last point is the evaluation after the final gossip rounds; with several seeds, "
    "the mean over the seeds per epoch.",
    "fig2": "Class histograms per node (stacked bars) of the skew partitioner, one panel per "
    "degree of skew.",
    "fig3": "The graphs as drawn from `lpdt topology`.",
    "fig4": "Accuracy against skew, one panel per model / graph / compression, one colour per "
    "algorithm; FP circles on solid lines, 8-bit triangles on dashed lines in a darker shade, "
    "each drawn a little to one side of its skew (left FP, right 8-bit); the paper's values "
    "faint, where our runs used its data.",
    "fig5": "Accuracy against skew with quasi-global momentum; FP circles on solid lines, 8-bit "
    "triangles on dashed lines in a darker shade, each a little to one side of its skew; the "
    "paper's values faint, where our runs used its data.",
    "fig6": "Accuracy per skew and compression: FP red, LP green (black ticks: the paper, where "
    "our runs used its data).",
    "fig7": "Memory and compute (energy by layer type) per node per iteration, FP vs LP, from the "
    "cost model.",
}

# What the Snakemake report's caption adds: the study whose runs a figure draws, or the command
# whose files it draws, and what its error bars are.
SNAKEMAKE_NOTE = {
    "fig1": "Runs of study ``fig1``. With several seeds per normalisation, each curve is the mean "
    "over the seeds at each epoch and its band the 95 % Student t-interval of that mean (the "
    "legend gives n); one seed is drawn without a band.",
    "fig2": "From ``lpdt partition``; the dataset, node count and seed are in the title.",
    "fig3": "From ``lpdt topology``; each panel's title names the graph, its size and its "
    "spectral gap.",
    "fig4": "Runs of study ``fig4`` (= ``table3``); error bars (when a point averages several "
    "seeds) are ±1 standard deviation.",
    "fig5": "Runs of study ``fig5`` (= ``table4``).",
    "fig6": "Runs of study ``fig6`` (= ``table5``).",
    "fig7": "From the analytic cost model (``lpdt cost all``); model and batch are in the title.",
}
# Below the paper scale: the one-seed cells (no claim reads them).
ILLUSTRATIVE_NOTE = (
    "Below the paper scale a curve or bar of one seed is illustrative, on a short budget, not at "
    "a plateau (no claim reads it); the PDF report's caption lists every run plotted, with n."
)


FIGURES_OF_RUNS = ("fig1", "fig4", "fig5", "fig6")  # the others draw analysis or cost files


def snakemake_caption(figure: str, scale: str) -> str:
    """The caption of ``figure`` (``"fig4"``) in the Snakemake report at ``scale``."""
    number = figure.removeprefix("fig")
    text = f"Figure {number} of the paper, scale {scale}: {FIGURE_WHAT[figure]} "
    text += SNAKEMAKE_NOTE[figure]
    if figure in FIGURES_OF_RUNS and scale != "paper":
        text += f" {ILLUSTRATIVE_NOTE}"
    return text


# The Snakemake report's caption file of a figure (workflow/report/figN.rst): the caption the
# report rule passes as a param (its text is snakemake_caption's).
CAPTION_TEMPLATE = '{{{{ snakemake.params.captions["{figure}"] }}}}\n'
