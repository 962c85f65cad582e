"""The paper's claims as data, and the claims a study declares: ``Claim``, the claims file
(``src/lpdt/report/claims.yaml``, read and checked against ``claims.schema.yaml`` by
``load_claims``), its version and the fingerprint of the definitions a version covers
(``definitions_hash``; docs/claims.md, "Claims: versions"), and ``study_claims`` (the
``claims:`` entries of config/studies.yaml, carried by the manifest). ``lpdt.report.claims``
checks them.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, cast

from lpdt.grid import Manifest
from lpdt.report import pairs
from lpdt.report.stats import Threshold

# The paper's claims, as data: src/lpdt/report/claims.yaml (its version and its entries;
# docs/claims.md, "Claims: versions", keeps the dated change log).
CLAIMS_FILE = Path(__file__).with_name("claims.yaml")
# A claim's kind, and the evaluator that computes it (one each): "paired" (claim_pairs: pairs of
# runs identical but for ``vary``), "series" (the same, each series' lowest value of ``vary``
# against its highest), "cost" (cost_claims: the measured wire ratio) and "arithmetic"
# (cost_claims: a column of the cost model's Table 10, no verdict). FAMILY: what the result's
# ``kind`` says (claims.json): an accuracy, a cost or an arithmetic claim.
FAMILY = {"paired": "accuracy", "series": "accuracy", "cost": "cost", "arithmetic": "arithmetic"}
KINDS = tuple(FAMILY)


class Range(NamedTuple):
    """The threshold of a ``within`` claim: the effect must lie in [lo, hi]. A tuple, so it is
    a ``stats.Threshold`` and a JSON list (``claims.json``: ``[lo, hi]``) as the plain pair was."""

    lo: float
    hi: float


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str  # the paper's words
    definition: str  # what we compare
    effect: str  # what the number is (units)
    direction: str  # "<=", ">" or "within" (a range); "none" for arithmetic
    # A number; a Range for "within" (a pair given is made one); None for arithmetic.
    threshold: float | Range | None
    kind: str = "paired"  # KINDS: paired | series (accuracy) | cost | arithmetic (no verdict)
    # A paired claim's pairs (lpdt.report.pairs): runs of ``studies`` meeting ``where``,
    # ``vary`` = ``a`` against ``vary`` = ``b``, effect a - b. A series claim: per series of
    # ``studies`` (runs identical but for ``vary``) whose highest ``vary`` meets the condition
    # ``b`` (">=0.8"), the run at ``vary`` = ``a`` against the one at that highest value.
    vary: str | None = None
    a: object = None
    b: object = None
    where: Mapping[str, object] = field(default_factory=dict)
    studies: tuple[str, ...] = ()
    source: str = "paper"  # "paper", or "study <name>": declared in a study (study_claims)
    # Shown for the paper's effect where the paper prints no number for the claim (a figure).
    paper_note: str = ""
    # An arithmetic claim: the column of Table 10 (ours: the cost model's table10.csv; the
    # paper's: its metric), over the rows meeting ``rows`` (column -> value, "resnet*" a prefix).
    column: str | None = None
    rows: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.threshold, tuple | list) and not isinstance(self.threshold, Range):
            lo, hi = self.threshold
            object.__setattr__(self, "threshold", Range(lo, hi))

    @property
    def limit(self) -> Threshold:
        """The threshold a verdict compares with (a number, or a Range); a ValueError for an
        arithmetic claim, which has none."""
        if self.threshold is None:
            raise ValueError(f"claim {self.id}: a {self.kind} claim has no threshold")
        return self.threshold

    @property
    def bounds(self) -> Range:
        """The range of a ``within`` claim; a ValueError for a claim with one number."""
        if not isinstance(self.threshold, Range):
            raise ValueError(f"claim {self.id}: threshold {self.threshold!r} is not a range")
        return self.threshold

    @property
    def family(self) -> str:
        """What kind of result it is (``ClaimResult.kind``): accuracy, cost or arithmetic."""
        return FAMILY[self.kind]

    @property
    def rule(self) -> str:
        if self.kind == "arithmetic":
            return f"{self.effect}: arithmetic from the paper's constants, no verdict"
        if self.direction == "within":
            lo, hi = self.bounds  # 'within': [lo, hi] (the schema)
            if self.kind == "cost":
                return f"{self.effect} in [{lo:g}, {hi:g}] for every row"
            return f"{lo:g} <= {self.effect} <= {hi:g}"
        return f"{self.effect} {self.direction} {self.threshold:g}"


SCHEMA_FILE = Path(__file__).with_name("claims.schema.yaml")  # the claims' one schema


@functools.cache
def _schema() -> dict[str, Any]:
    """The schema, read once per process (check_schema runs for every study claim)."""
    import yaml

    return yaml.safe_load(SCHEMA_FILE.read_text())


def check_schema(at: str, instance: object, definition: str | None = None) -> None:
    """``instance`` against the claims' schema (``definition``: one of its ``$defs``, else the
    claims file); a mistake is one ValueError beginning with ``at``: the first unknown key, else
    every missing one, else the first wrong value."""
    from jsonschema import Draft202012Validator

    root = _schema()
    schema = root if definition is None else {**root["$defs"][definition], "$defs": root["$defs"]}
    errors = list(Draft202012Validator(schema).iter_errors(instance))
    if not errors:
        return
    errors.sort(key=lambda e: (len(e.absolute_path), str(list(e.absolute_path))))
    for e in errors:
        if e.validator == "additionalProperties":
            keys = ", ".join(e.schema.get("properties", {}))
            extra = sorted(set(e.instance) - set(e.schema.get("properties", {})))
            raise ValueError(f"{_at(at, e, instance)}: unknown key {extra[0]!r} (keys: {keys})")
    missing = [e for e in errors if e.validator == "required"]
    if missing:
        e = missing[0]
        names = [k for k in e.schema["required"] if k not in e.instance]
        raise ValueError(f"{_at(at, e, instance)}: missing {', '.join(names)}")
    e = errors[0]
    where = [str(k) for k in e.absolute_path]
    key = where[-1] if where else "the entry"
    if e.validator == "enum" and e.validator_value == root["$defs"]["coordinate"]["enum"]:
        raise ValueError(
            f"{_at(at, e, instance)}: unknown coordinate {e.instance!r} "
            f"(coordinates: {', '.join(e.validator_value)})"
        )
    if e.validator == "enum":
        allowed = ", ".join(str(v) for v in e.validator_value)
        raise ValueError(f"{_at(at, e, instance)}: {key} {e.instance!r} is not one of {allowed}")
    if key == "threshold":
        raise ValueError(
            f"{_at(at, e, instance)}: threshold must be a number, or [lo, hi] for direction 'within', "
            f"got {e.instance!r}"
        )
    raise ValueError(f"{_at(at, e, instance)}: {key}: {e.message}")


def _at(at: str, e: Any, instance: object) -> str:
    """``at``, and the claim of the file the error is in: its number, and its id where it has
    one ("claims.yaml, claim 2 (lp_close_on_torus)")."""
    path = list(e.absolute_path)
    if path[:1] == ["claims"] and len(path) > 1 and isinstance(path[1], int):
        entry = instance["claims"][path[1]] if isinstance(instance, dict) else None
        ident = entry.get("id") if isinstance(entry, dict) else None
        return f"{at}, claim {path[1] + 1}" + (f" ({ident})" if isinstance(ident, str) else "")
    return at


def load_claims(path: Path = CLAIMS_FILE) -> tuple[int, list[Claim]]:
    """(version, claims) of a claims file (``claims.yaml``: ``version`` and ``claims``, each
    entry the fields of ``Claim``), checked against the claims' schema (the one validation: keys,
    types, kinds and what each kind needs) and for unique ids; a mistake is one ValueError naming
    the entry and the key."""
    import yaml

    doc = yaml.safe_load(path.read_text())
    check_schema(str(path), doc)
    out: list[Claim] = []
    for d in doc["claims"]:
        thr = d["threshold"]
        if isinstance(thr, list):  # [lo, hi]: the schema allows exactly two numbers
            thr = Range(float(thr[0]), float(thr[1]))
        out.append(
            Claim(
                **{
                    k: v for k, v in d.items() if k not in ("threshold", "studies", "where", "rows")
                },
                threshold=thr,
                studies=tuple(d.get("studies") or ()),
                where=dict(d.get("where") or {}),
                rows=dict(d.get("rows") or {}),
            )
        )
    ids = [c.id for c in out]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: an id appears twice")
    return doc["version"], out


def definitions_hash(
    studies: Mapping[str, Sequence[Any]] | None = None, path: Path = CLAIMS_FILE
) -> str:
    """The fingerprint of the definitions a claims version covers: the first 12 hex digits of
    the SHA-256 of the canonical JSON (keys sorted, no spaces) of ``path``'s claims (the file's
    ``claims``: its version number, comments and layout left out) and of ``studies``' claims
    (study -> its ``claims:`` entries; the studies without claims left out). docs/claims.md's
    change log gives each version's fingerprint, and tests/report/test_claims_version.py fails
    when the definitions change without a new version row."""
    import hashlib

    import yaml

    doc = yaml.safe_load(path.read_text())
    declared = {k: list(v) for k, v in sorted((studies or {}).items()) if v}
    text = json.dumps(
        {"claims": doc["claims"], "study_claims": declared},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def study_entries(manifest: Manifest) -> dict[str, list[Any]]:
    """study -> its ``claims:`` entries as written (the studies that declare some)."""
    return {n: list(s.claims) for n, s in manifest.studies.items() if s.claims}


CLAIMS_VERSION, CLAIMS = load_claims()
BY_ID = {c.id: c for c in CLAIMS}
# Equivalence margin of rangeen_equiv_evonorm (points): the paper's own tolerance for "the same
# accuracy" ("8-bit loses less than 1 %", lp_close_to_fp_dense); fixed in version 5 before the
# quick-scale Figure 1 runs with seeds had been seen.
EQUIV_MARGIN = float(BY_ID["rangeen_equiv_evonorm"].bounds.hi)


# --- claims declared in a study (config/studies.yaml, `claims:`; carried by the manifest) -------


def _study_claim(study: str, i: int, d: object, known: set[str]) -> Claim:
    """One ``claims:`` entry of ``study`` as a Claim; a mistake is a one-line ValueError."""
    at = f"study {study!r}, claim {i + 1}"
    if isinstance(d, Mapping) and "id" in d:
        at += f" ({d['id']})"
    check_schema(at, d, "study_claim")  # keys, types, coordinates, direction
    d = cast(Mapping[str, Any], d)  # a mapping: the schema says so
    vary, where = str(d["vary"]), d.get("where") or {}
    try:
        conds = pairs.conditions(where)
    except ValueError as e:
        raise ValueError(f"{at}: {e}") from None
    direction, thr = d["direction"], d["threshold"]
    if (direction == "within") != (isinstance(thr, list) and thr[0] <= thr[1]):
        raise ValueError(
            f"{at}: direction {direction!r} needs threshold "
            + ("[lo, hi] with lo <= hi" if direction == "within" else "a number")
            + f", got {thr!r}"
        )
    studies = d.get("studies") or [study]
    bad = [x for x in studies if x not in known]
    if bad:
        raise ValueError(f"{at}: unknown study {bad[0]!r} (studies: {', '.join(sorted(known))})")
    a, b = pairs.parse_value(vary, d["a"]), pairs.parse_value(vary, d["b"])
    show = pairs.Condition(vary, "=", (a, b)).text().split("=", 1)[1].split(",")
    sel = "; ".join(c.text() for c in conds)
    definition = (
        f"pairs identical except {vary} ({show[0]} vs {show[1]}), same seed"
        + (f", {sel}" if sel else "")
        + f" (studies {', '.join(studies)})"
    )
    return Claim(
        str(d["id"]),
        str(d["statement"]),
        definition,
        f"{show[0]} - {show[1]} accuracy (points)",
        direction,
        Range(float(thr[0]), float(thr[1])) if direction == "within" else float(thr),
        vary=vary,
        a=a,
        b=b,
        where=dict(where),
        studies=tuple(studies),
        source=f"study {study}",
    )


def study_claims(manifest: Manifest) -> list[Claim]:
    """The claims the manifest's studies declare (``claims:``), in study order; ids must be new."""
    studies = manifest.studies
    out: list[Claim] = []
    seen = set(BY_ID)
    for name, spec in studies.items():
        for i, d in enumerate(spec.claims or ()):
            c = _study_claim(name, i, d, set(studies))
            if c.id in seen:
                raise ValueError(
                    f"study {name!r}, claim {i + 1}: id {c.id!r} is already taken "
                    "(a paper claim or another study's)"
                )
            seen.add(c.id)
            out.append(c)
    return out
