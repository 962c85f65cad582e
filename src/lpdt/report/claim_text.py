"""The checked claims as text: each result's cells (``effect_text``, ``precision_text``,
``paper_effect_text``, ``set_aside_text``), the claims table of ``claims.md`` (``claims_md``),
and ``write_claims``, which writes ``claims.json`` (docs/claims.md: its fields) and
``claims.md`` beside it (``claims_md_path``) from the results of ``lpdt.report.claims.check_claims``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lpdt.report.claims import ClaimResult
from lpdt.report.definitions import CLAIMS_VERSION, definitions_hash
from lpdt.report.formatting import fixed, span
from lpdt.report.messages import sent_text
from lpdt.report.stats import METHOD, VERDICTS


def effect_text(c: ClaimResult) -> str:
    """'0.50 [0.12, 0.88] (n=3)'; a cost or arithmetic claim: '3.99 (range 3.90-4.10, 6 rows)';
    '-' without data."""
    if c.mean is None:
        return "-"
    nums = c.numbers
    if "dense_ratio" in nums or "top-k_ratio" in nums:  # comm_4x: the measured ratios themselves
        return "; ".join(
            f"{fmt} {span(nums[f'{fmt}_ratio'])}x (implied "
            f"{'/'.join(f'{x:g}' for x in nums[f'{fmt}_implied'])})"
            for fmt in ("dense", "top-k")
            if f"{fmt}_ratio" in nums
        )
    if c.kind in ("cost", "arithmetic"):
        rows = f"{c.n} row{'s' if c.n != 1 else ''}"
        return f"{fixed(c.mean)} (range {fixed(nums.get('min'))}-{fixed(nums.get('max'))}, {rows})"
    seeds = nums.get("seeds_of", c.n)
    n = f"n={c.n}" + (f" of {seeds}" if seeds > c.n else "")
    if c.ci is not None:
        lo, hi = c.ci
        return f"{fixed(c.mean)} [{fixed(lo)}, {fixed(hi)}] ({n})"
    return f"{fixed(c.mean)} ({n}, no interval)"


def set_aside_text(c: ClaimResult) -> str:
    """What pairing counted as a loss and left out of an accuracy claim
    (``lpdt.report.summary.summarize``): '1 diverged run counted as a loss; 2 pairs set aside
    (missing, not shared); 1 cell left out (one seed)'; '' when nothing was."""
    nums = c.numbers
    parts = []
    lost = nums.get("counted_as_loss", [])
    if lost:
        parts.append(f"{len(lost)} diverged run{'s' if len(lost) != 1 else ''} counted as a loss")
    aside = nums.get("set_aside", [])
    if aside:
        whys = ", ".join(sorted({d["why"] for d in aside}))
        parts.append(f"{len(aside)} pair{'s' if len(aside) != 1 else ''} set aside ({whys})")
    left = nums.get("cells_left_out", [])
    if left:
        whys = ", ".join(sorted({d["why"].split(" (")[0].split(":")[0] for d in left}))
        parts.append(f"{len(left)} cell{'s' if len(left) != 1 else ''} left out ({whys})")
    return "; ".join(parts)


def precision_text(c: ClaimResult) -> str:
    """'±0.52 / 0.84': the interval's half-width and the minimum detectable effect (points from
    the threshold; the seeds, n, are in ``effect_text``); '-' where absent (n < 2, a cost or
    arithmetic claim)."""
    hw, det = c.half_width, c.detectable
    if c.kind != "accuracy" or hw is None or det is None:
        return "-"
    return f"±{hw:.2f} / {det:.2f}"


def paper_effect_text(c: ClaimResult) -> str:
    """The paper's effect ('0.13'), its note where it prints no number ('figure only ...'),
    else '-'."""
    if c.paper_effect is not None:
        return fixed(c.paper_effect)
    return c.paper_note or "-"


def paper_claims(claims: Sequence[ClaimResult]) -> list[ClaimResult]:
    """The results of the paper's claims."""
    return [c for c in claims if c.source == "paper"]


def declared_claims(claims: Sequence[ClaimResult]) -> list[ClaimResult]:
    """The results of the claims declared in the studies."""
    return [c for c in claims if c.source != "paper"]


def _md_table(claims: Sequence[ClaimResult]) -> list[str]:
    lines = [
        "| claim | rule | paper's effect | ours: mean [95 % CI] (n seeds) | ± half-width / "
        "detectable (80 % power) | verdict | definition |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in claims:
        stand = " (stand-in data)" if c.stand_in_data else ""
        lines.append(
            f"| {c.statement} | {c.rule} | {paper_effect_text(c)} | "
            f"{effect_text(c)}{_aside_note(c)} | {precision_text(c)} | **{c.verdict}**{stand} | "
            f"{c.definition} |"
        )
    return lines


def _aside_note(c: ClaimResult) -> str:
    t = set_aside_text(c)
    keys = ("counted_as_loss", "set_aside", "cells_left_out")
    named = ", ".join(f"`{k}`" for k in keys if c.numbers.get(k))
    return f"; {t} (claims.json: {named})" if t else ""


def claims_md(claims: Sequence[ClaimResult]) -> str:
    lines = _md_table(paper_claims(claims))
    sent = [sent_text(c.numbers["sent_8bit"]) for c in claims if c.numbers.get("sent_8bit")]
    lines += ["", *(f"Communication, {t}." for t in sent)] if sent else []
    declared = declared_claims(claims)
    if declared:
        lines += [
            "",
            "Claims declared in the studies (config/studies.yaml, `claims:`):",
            "",
            *_md_table(declared),
        ]
    return "\n".join(lines) + "\n"


def verdict_counts(claims: Sequence[ClaimResult], kind: str | None = None) -> dict[str, int]:
    sel = [c for c in claims if kind is None or c.kind == kind]
    return {v: sum(c.verdict == v for c in sel) for v in VERDICTS}


def claims_md_path(path: Path) -> Path:
    """Where ``claims.md`` goes beside the claims file ``path`` (JSON): its name with ``.md``.
    A ``path`` that ends in ``.md`` is refused (``ValueError``): the Markdown would be written
    over the JSON (``lpdt report --claims out/claims.md`` wrote ``out/claims.md`` twice)."""
    if path.suffix.lower() == ".md":
        raise ValueError(
            f"the claims file {path} ends in .md, but it is JSON, and its Markdown is written "
            f"beside it as <name>.md; give a .json name, e.g. {path.with_suffix('.json')}"
        )
    return path.with_suffix(".md")


def write_claims(
    claims: Sequence[ClaimResult],
    path: Path,
    plateau_rescoring: Mapping[str, Any] | None = None,
    definitions: str | None = None,
) -> list[Path]:
    """``claims.json``: every claim; ``counts`` are the verdicts of the paper's accuracy claims
    (an interval against a threshold), ``cost_counts`` those of its cost claims (measured,
    deterministic: ``comm_4x`` fails only if per-tensor range overhead exceeds 12.5 %), and
    ``declared_counts`` (present when a study declares claims) those of the declared ones;
    ``definitions_hash``: the fingerprint of the definitions checked (``definitions_hash`` of
    the manifest's study claims, ``definitions``; default: claims.yaml's alone);
    ``plateau_rescoring``: the claims re-scored at 2x epochs on the plateau check's pairs
    (``lpdt.report.plateau_text.rescoring_json``: which commit's pairs, whether the check's 1x
    accuracies are these runs'), null without one."""
    from lpdt.io import write_json_atomic, write_text_atomic

    doc = {
        "version": CLAIMS_VERSION,
        "definitions_hash": definitions or definitions_hash(),
        "claims": [c.to_dict() for c in claims],
        "counts": verdict_counts(paper_claims(claims), "accuracy"),
        "cost_counts": verdict_counts(paper_claims(claims), "cost"),
        "interval_method": METHOD,
    }
    if declared_claims(claims):
        doc["declared_counts"] = verdict_counts(declared_claims(claims))
    doc["plateau_rescoring"] = dict(plateau_rescoring) if plateau_rescoring is not None else None
    md = claims_md_path(path)  # refused before anything is written
    write_json_atomic(path, doc)
    write_text_atomic(md, claims_md(claims))
    return [path, md]
