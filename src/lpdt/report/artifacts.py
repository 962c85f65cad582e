"""The report's artifacts, listed once: the paper's figures and tables that ``lpdt report``
writes, in the formats it writes them. The PDF (``lpdt.report.pdf``), the report command's
check that the figures exist (``lpdt.report.cli``), the workflow's declared outputs and its
Snakemake-report entries (``workflow/rules/report.smk``) and the tests read them from here.

This module imports nothing: the workflow reads it while it builds its DAG.
"""

from __future__ import annotations

FIGURE_NUMBERS = (1, 2, 3, 4, 5, 6, 7)  # Figures 1-7 of the paper
TABLE_NUMBERS = (2, 3, 4, 5, 6, 7, 9, 10)  # its tables (1 is the notation, 8 the setup)
FIGURE_FORMATS = ("pdf", "png")
TABLE_FORMATS = ("csv", "md", "tex")
FIGURES = tuple(f"fig{i}" for i in FIGURE_NUMBERS)  # file stems under results/figures/
TABLES = tuple(f"table{t}" for t in TABLE_NUMBERS)  # file stems under results/tables/
