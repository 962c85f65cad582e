"""The report's artifacts, listed once: the paper's figures and tables that ``lpdt report``
writes, each with its maker (the function that draws or builds it, and the inputs it reads), the
studies whose runs it shows, and, for a figure, what it shows (the first sentence of both
reports' captions). The makers (``lpdt.report.figures.write_figures``,
``lpdt.report.tables.build_tables``), the PDF (``lpdt.report.pdf``), the report command's check
that the figures exist (``lpdt.report.cli``), the claims' reading of the paper's cells, the
workflow's declared outputs and its Snakemake-report entries and captions
(``workflow/rules/report.smk``: ``snakemake_caption``; workflow/report/figN.rst only names the
figure) and the tests read them from here.

This module imports only the standard library and ``lpdt.registry`` (no torch, no pandas): the
workflow reads it while it builds its DAG. A maker is named as ``"module:function"`` and imported when the report draws.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from lpdt.registry import Spec

# What a maker may read, passed in the order its entry's ``reads`` names them: "runs" (the run
# table, lpdt.report.aggregate), "paper" (the paper's values, config/paper_results.csv),
# "analysis" (``lpdt partition`` / ``lpdt topology`` files), "cost" (``lpdt cost all`` files),
# "scale" (the grid's scale) and "number" (the artifact's own number). ``write_figures`` and
# ``build_tables`` pass these (an entry that reads another is an error when the list is built).
FIGURE_INPUTS = ("runs", "paper", "analysis", "cost", "number")
TABLE_INPUTS = ("runs", "paper", "cost", "scale", "number")


@dataclass(frozen=True)
class Artifact:
    """A figure or table of the paper that the report reproduces."""

    INPUTS: ClassVar[tuple[str, ...]] = ()  # what its kind's maker loop passes

    number: int
    maker: str  # "module:function", called with the inputs ``reads`` names
    reads: tuple[str, ...]
    # The studies whose runs it shows, in the order they are looked for (a figure's own study,
    # then the table study it shares its runs with); () for one drawn from analysis or cost files
    studies: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [r for r in self.reads if r not in self.INPUTS]
        if unknown or ":" not in self.maker:
            raise ValueError(
                f"{type(self).__name__} {self.number}: maker {self.maker!r} (module:function) "
                f"reads {list(self.reads)}; its kind passes {list(self.INPUTS)}"
            )

    def make(self, inputs: dict[str, Any]) -> Any:
        """Call the maker with the inputs its entry reads (``inputs`` and its own number)."""
        return self._call(self.maker, inputs)

    def _call(self, impl: str, inputs: dict[str, Any]) -> Any:
        """``impl`` ("module:function") called with the inputs ``reads`` names, in order."""
        fn: Callable[..., Any] = Spec(impl).load()
        given = {**inputs, "number": self.number}
        return fn(*(given[r] for r in self.reads))


@dataclass(frozen=True)
class Figure(Artifact):
    """A figure: its maker returns a matplotlib figure (saved as .pdf and .png)."""

    INPUTS: ClassVar[tuple[str, ...]] = FIGURE_INPUTS

    # What it plots: the first sentence of its caption in the PDF (which adds the setup read from
    # the runs it draws) and in the Snakemake report (which adds ``note``)
    what: str = ""
    # What the Snakemake report's caption adds: the study whose runs it draws, or the command
    # whose files it draws, and what its error bars are
    note: str = ""
    # (coordinate, value) pairs its runs must have besides their study (Figure 6: ResNet-18)
    where: tuple[tuple[str, str], ...] = ()
    # A figure drawn from files: "module:function" of the same inputs that returns its caption's
    # setup sentence (a figure of runs: None, its setup is read from the runs it plots)
    setup: str | None = None

    def setup_text(self, inputs: dict[str, Any]) -> str | None:
        """Its caption's setup sentence from the files it draws (None for a figure of runs)."""
        return None if self.setup is None else str(self._call(self.setup, inputs))

    @property
    def stem(self) -> str:  # its files under results/figures/: fig4.pdf, fig4.png
        return f"fig{self.number}"


@dataclass(frozen=True)
class Table(Artifact):
    """A table: its maker returns ``(frame for the CSV, printable parts)``."""

    INPUTS: ClassVar[tuple[str, ...]] = TABLE_INPUTS

    @property
    def stem(self) -> str:  # its files under results/tables/: table3.csv, .md, .tex
        return f"table{self.number}"


_FIG, _DESCRIBE = "lpdt.report.figures", "lpdt.report.describe"
_FILE_FIG = "lpdt.report.file_figures"  # Figures 2, 3 and 7: drawn from files, not runs
FIGURE_LIST: tuple[Figure, ...] = (  # Figures 1-7 of the paper
    Figure(
        1,
        f"{_FIG}:fig1",
        ("runs",),
        ("fig1",),
        what="Validation error per epoch, one curve per normalisation layer (8-bit dashed, "
        "triangles); each curve's last point is the evaluation after the final gossip rounds; "
        "with several seeds, the mean over the seeds per epoch.",
        note="Runs of study ``fig1``. With several seeds per normalisation, each curve is the "
        "mean over the seeds at each epoch and its band the 95 % Student t-interval of that mean "
        "(the legend gives n); one seed is drawn without a band.",
    ),
    Figure(
        2,
        f"{_FILE_FIG}:fig2",
        ("analysis",),
        setup=f"{_DESCRIBE}:partition_setup",
        what="Class histograms per node (stacked bars) of the skew partitioner, one panel per "
        "degree of skew.",
        note="From ``lpdt partition``; the dataset, node count and seed are in the title.",
    ),
    Figure(
        3,
        f"{_FILE_FIG}:fig3",
        ("analysis",),
        setup=f"{_DESCRIBE}:graphs_setup",
        what="The graphs as drawn from `lpdt topology`.",
        note="From ``lpdt topology``; each panel's title names the graph, its size and its "
        "spectral gap.",
    ),
    Figure(
        4,
        f"{_FIG}:fig4",
        ("runs", "paper"),
        ("fig4", "table3"),
        what="Accuracy against skew, one panel per model / graph / compression, one colour per "
        "algorithm; FP circles on solid lines, 8-bit triangles on dashed lines in a darker shade, "
        "each drawn a little to one side of its skew (left FP, right 8-bit); the paper's values "
        "faint, where our runs used its data.",
        note="Runs of study ``fig4`` (= ``table3``); error bars (when a point averages several "
        "seeds) are ±1 standard deviation.",
    ),
    Figure(
        5,
        f"{_FIG}:fig5",
        ("runs", "paper"),
        ("fig5", "table4"),
        what="Accuracy against skew with quasi-global momentum; FP circles on solid lines, 8-bit "
        "triangles on dashed lines in a darker shade, each a little to one side of its skew; the "
        "paper's values faint, where our runs used its data.",
        note="Runs of study ``fig5`` (= ``table4``).",
    ),
    Figure(
        6,
        f"{_FIG}:fig6",
        ("runs", "paper"),
        ("fig6", "table5"),
        where=(("model", "resnet18"),),  # the paper's Figure 6 shows its ResNet-18 runs of Table 5
        what="Accuracy per skew and compression: FP red, LP green (black ticks: the paper, where "
        "our runs used its data).",
        note="Runs of study ``fig6`` (= ``table5``).",
    ),
    Figure(
        7,
        f"{_FILE_FIG}:fig7",
        ("cost",),
        setup=f"{_DESCRIBE}:memory_setup",
        what="Memory and compute (energy by layer type) per node per iteration, FP vs LP, from "
        "the cost model.",
        note="From the analytic cost model (``lpdt cost all``); model and batch are in the title.",
    ),
)

_TAB = "lpdt.report.tables"
_COST = "lpdt.report.cost_tables"
_ACCURACY = ("number", "runs", "paper", "cost", "scale")
TABLE_LIST: tuple[Table, ...] = (  # its tables (1 is the notation, 8 the setup)
    Table(2, f"{_TAB}:accuracy_table", _ACCURACY, ("table2",)),
    Table(3, f"{_TAB}:accuracy_table", _ACCURACY, ("table3",)),
    Table(4, f"{_TAB}:accuracy_table", _ACCURACY, ("table4",)),
    Table(5, f"{_TAB}:accuracy_table", _ACCURACY, ("table5",)),
    Table(6, f"{_TAB}:accuracy_table", _ACCURACY, ("table6",)),
    Table(7, f"{_COST}:ops_table", ("cost", "number")),
    Table(9, f"{_COST}:ops_table", ("cost", "number")),
    Table(10, f"{_COST}:table10", ("cost", "paper")),
)

FIGURE_FORMATS = ("pdf", "png")
TABLE_FORMATS = ("csv", "md", "tex")
FIGURE_NUMBERS = tuple(f.number for f in FIGURE_LIST)
TABLE_NUMBERS = tuple(t.number for t in TABLE_LIST)
FIGURES = tuple(f.stem for f in FIGURE_LIST)  # file stems under results/figures/
TABLES = tuple(t.stem for t in TABLE_LIST)  # file stems under results/tables/
FIGURE_BY_STEM = {f.stem: f for f in FIGURE_LIST}
# Paper table -> the study whose runs fill it (the claims read the paper's cells by it).
TABLE_STUDY = {t.number: t.studies[0] for t in TABLE_LIST if t.studies}
FIGURES_OF_RUNS = tuple(f.stem for f in FIGURE_LIST if "runs" in f.reads)

# Below the paper scale: the one-seed cells (no claim reads them).
ILLUSTRATIVE_NOTE = (
    "Below the paper scale a curve or bar of one seed is illustrative, on a short budget, not at "
    "a plateau (no claim reads it); the PDF report's caption lists every run plotted, with n."
)


def snakemake_caption(figure: str, scale: str) -> str:
    """The caption of ``figure`` (``"fig4"``) in the Snakemake report at ``scale``."""
    number = figure.removeprefix("fig")
    entry = FIGURE_BY_STEM[figure]
    text = f"Figure {number} of the paper, scale {scale}: {entry.what} {entry.note}"
    if figure in FIGURES_OF_RUNS and scale != "paper":
        text += f" {ILLUSTRATIVE_NOTE}"
    return text


# The Snakemake report's caption file of a figure (workflow/report/figN.rst): the caption the
# report rule passes as a param (its text is snakemake_caption's).
CAPTION_TEMPLATE = '{{{{ snakemake.params.captions["{figure}"] }}}}\n'
