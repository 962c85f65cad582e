"""A printable table and its files: ``Rendered`` (a title, caption lines, a header and text
rows, as the report's table makers build it), its markdown (``to_md``) and LaTeX (``to_tex``), and
``write_tables``, which writes each table as ``tableN.csv`` (the long numeric frame), ``tableN.md``
and ``tableN.tex`` (the printable parts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd


@dataclass
class Rendered:
    """One printable table: a title, caption lines, a header and text rows."""

    title: str
    header: list[str]
    rows: list[list[str]]
    caption: list[str] = field(default_factory=list)


def to_md(parts: list[Rendered]) -> str:
    out = []
    for t in parts:
        out.append(f"### {t.title}\n")
        out.append("| " + " | ".join(t.header) + " |")
        out.append("|" + "---|" * len(t.header))
        out += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in t.rows]
        out.append("")
        out += [f"{c}  " for c in t.caption]
        out.append("")
    return "\n".join(out)


def tex_escape(s: str) -> str:
    for a, b in (
        ("\\", r"\textbackslash{}"),
        ("&", r"\&"),
        ("%", r"\%"),
        ("_", r"\_"),
        ("#", r"\#"),
        ("$", r"\$"),
        ("{", r"\{"),
        ("}", r"\}"),
        ("^", r"\^{}"),
        ("~", r"\~{}"),
        ("§", r"\S{}"),
    ):
        s = s.replace(a, b)
    return s


def to_tex(parts: list[Rendered]) -> str:
    out = []
    for t in parts:
        out += [
            r"\begin{table}[ht]",
            r"\centering\small",
            f"\\caption{{{tex_escape(t.title)}}}",
            r"\begin{tabular}{" + "l" * len(t.header) + "}",
            r"\hline",
            " & ".join(tex_escape(h) for h in t.header) + r" \\",
            r"\hline",
        ]
        out += [" & ".join(tex_escape(c) for c in r) + r" \\" for r in t.rows]
        out += [r"\hline", r"\end{tabular}"]
        out += [f"\\par\\footnotesize {tex_escape(c)}" for c in t.caption]
        out += [r"\end{table}", ""]
    return "\n".join(out)


def write_tables(
    tables: dict[int, tuple[pd.DataFrame, list[Rendered]]], out_dir: Path
) -> list[Path]:
    from lpdt.io import write_text_atomic

    written = []
    for n, (frame, parts) in sorted(tables.items()):
        base = out_dir / f"table{n}"
        write_text_atomic(base.with_suffix(".csv"), frame.to_csv(index=False))
        write_text_atomic(base.with_suffix(".md"), to_md(parts))
        write_text_atomic(base.with_suffix(".tex"), to_tex(parts))
        written += [base.with_suffix(e) for e in (".csv", ".md", ".tex")]
    return written
