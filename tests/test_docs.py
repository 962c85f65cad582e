"""The repository explains itself: section citations resolve, the paper and the authors' code are
linked, and the README's first experiment shows up in the MLflow UI it opens next."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lpdt.config import load_config

ROOT = Path(__file__).resolve().parents[1]
# The reference: docs/reference.md (sections 1-7) and its continuation (8-15).
REFERENCES = [ROOT / "docs" / "reference.md", ROOT / "docs" / "reference-runs.md"]
# Where code, configs and docs cite sections of the reference.
CITING = [
    "src",
    "docs",
    "config",
    "workflow",
    "tests",
    "benchmarks",
    "examples",
    "README.md",
    "Snakefile",
    "profiles",
    "Makefile",
]
PAPER_URL = "https://arxiv.org/abs/2111.09389"
CODE_URL = "github.com/aparna-aketi/Low_Precision_DL"
# Backticked repository paths of docs/extending.md (`src/lpdt/...`, `tests/...::test_x`).
REPO_PATH = re.compile(r"`((?:src|tests|config|workflow|docs|benchmarks)/[^`\s]*)`")


def _files() -> list[Path]:
    out = []
    for name in CITING:
        p = ROOT / name
        paths = (
            [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()] if p.is_dir() else []
        )
        out += [
            f
            for f in paths
            if f.suffix in {".py", ".md", ".yaml", ".smk", ".csv", ".rst", ""}
            and "__pycache__" not in f.parts
            and f.name != "test_docs.py"
        ]
    return out


def _sections() -> set[str]:
    """Section numbers of the reference pages: '## 7. Models' -> '7', '### 7.1 ...' -> '7.1'."""
    text = "\n".join(p.read_text() for p in REFERENCES)
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)*)\.? ", text, re.M))


def _citations(text: str) -> list[str]:
    """Every '§N' that is not the paper's ('paper §3'); a list such as 'reference §5, §6.3'
    cites each."""
    return [m.group(1) for m in re.finditer(r"(?<!paper )§(\d+(?:\.\d+)*)", text)]


def test_reference_sections_are_numbered() -> None:
    sections = _sections()
    assert {str(n) for n in range(1, 16)} <= sections


def test_every_section_citation_resolves() -> None:
    sections = _sections()
    cited, missing = 0, []
    for f in _files():
        text = f.read_text(errors="replace")
        for n in _citations(text):
            cited += 1
            if n not in sections:
                missing.append(f"{f.relative_to(ROOT)}: §{n}")
    assert cited > 50  # the code cites the reference throughout: the scan must find them
    assert not missing, "citations of sections the reference pages do not have:\n" + "\n".join(
        missing
    )


def test_no_file_points_outside_the_repository() -> None:
    """Nothing may depend on documents that are not in the repository."""
    bad = []
    for f in _files():
        text = f.read_text(errors="replace")
        for needle in ("shared/paper", "reference-implementation.md", "design.md", "paper.md"):
            if needle in text:
                bad.append(f"{f.relative_to(ROOT)}: {needle}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("doc", ["README.md", "docs/reference.md"])
def test_paper_and_authors_code_are_linked(doc: str) -> None:
    text = (ROOT / doc).read_text()
    assert PAPER_URL in text and CODE_URL in text


def _readme_block(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split(f"## {title}", 1)[1]
    return section.split("```bash", 1)[1].split("```", 1)[0]


def test_readme_experiment_is_logged_where_lpdt_ui_looks() -> None:
    """Every `lpdt train --config FILE` run of the README's "One experiment" block logs to
    MLflow (its config, or its --set), at the store that `lpdt ui` opens by default."""
    block = _readme_block("One experiment")
    assert "lpdt ui" in block
    trains = [line for line in block.splitlines() if "lpdt train --config examples/" in line]
    assert trains
    from lpdt.tracking import DEFAULT_URI

    for line in trains:
        path = re.search(r"--config (\S+)", line).group(1)  # type: ignore[union-attr]
        sets = re.findall(r"--set (\S+)", line)
        cfg = load_config(ROOT / path, sets)
        assert cfg.tracking.mlflow, f"{path}: not logged to MLflow, so `lpdt ui` would not show it"
        assert cfg.tracking.uri == DEFAULT_URI, path


def test_architecture_names_every_field_of_the_run_record():
    """docs/architecture.md describes the record as it is in code: every field of every record
    class (``lpdt.record``) is named in its section "The run record"."""
    import dataclasses

    from lpdt import record

    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index("## The run record") :]
    section = section[: section.index("\n## ", 1)]
    classes = [
        record.RunRecord,
        record.DatasetRecord,
        record.ModelRecord,
        record.FinalMetrics,
        record.Communication,
        record.Timing,
        record.Provenance,
        record.Session,
        record.Versions,
        record.HistoryRow,
        record.SystemMetrics,
    ]
    missing = [
        f"{c.__name__}.{f.name}"
        for c in classes
        for f in dataclasses.fields(c)
        if not re.search(rf"\b{f.name}\b", section)
    ]
    assert not missing, f"docs/architecture.md does not name: {missing}"


@pytest.mark.parametrize("package", ["lpdt.engine", "lpdt.tracking"])
def test_architecture_maps_every_module_of_the_package(package):
    """docs/architecture.md's table of a package (the engine, the tracking layers): one row per
    module (the package itself where its ``__init__`` defines something), naming every public
    function and class the module defines."""
    import importlib
    import pkgutil

    text = (ROOT / "docs" / "architecture.md").read_text()
    pattern = rf"^\| `({re.escape(package)}(?:\.\w+)?)` \| (.*) \|$"
    rows = dict(re.findall(pattern, text, re.M))
    path = importlib.import_module(package).__path__
    modules = [f"{package}.{m.name}" for m in pkgutil.iter_modules(path) if m.name != "__main__"]
    if _unnamed_public(package, ""):  # the package's __init__ defines public names
        modules.append(package)
    assert sorted(rows) == sorted(modules)
    for name, what in rows.items():
        missing = _unnamed_public(name, what)
        assert not missing, f"docs/architecture.md: the row of {name} does not name {missing}"


def _unnamed_public(module_name: str, row: str) -> list[str]:
    """The public functions and classes ``module_name`` defines that ``row`` does not name."""
    import importlib
    import inspect

    module = importlib.import_module(module_name)
    defined = [
        n
        for n, obj in vars(module).items()
        if not n.startswith("_")
        and (inspect.isfunction(obj) or inspect.isclass(obj))
        and obj.__module__ == module.__name__
    ]
    return [n for n in defined if not re.search(rf"`{n}\b", row)]


def test_docs_name_only_lpdt_modules_that_exist():
    """Every dotted ``lpdt.x`` name in docs/architecture.md and docs/engine.md is a module, or
    an attribute of one (a stale name after a move fails here)."""

    stale = []
    for doc in ("architecture.md", "engine.md"):
        names = set(re.findall(r"`(lpdt(?:\.\w+)+)", (ROOT / "docs" / doc).read_text()))
        stale += [f"{doc}: {name}" for name in _stale_lpdt_names(names)]
    assert not stale, stale


def _stale_lpdt_names(names: set[str]) -> list[str]:
    """The dotted ``lpdt.x.y`` names that are neither a module nor an attribute of one: the
    longest importable prefix, then attribute lookups."""
    import importlib

    stale = []
    for name in sorted(names):
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for attr in parts[i:]:
                obj = getattr(obj, attr, None)
            if obj is None:
                stale.append(name)
            break
    return stale


def test_every_claims_version_has_a_dated_row_in_the_change_log() -> None:
    """docs/claims.md, "Claims: versions": one row per CLAIMS_VERSION 1..current, each dated and
    saying whether it was made before or after a result (a new version without its row fails)."""
    from lpdt.report.claims import CLAIMS_VERSION

    text = (ROOT / "docs" / "claims.md").read_text()
    section = text[text.index("## Claims: versions") :]
    for v in range(1, CLAIMS_VERSION + 1):
        row = re.search(rf"^\| {v} \| (2026-\d\d-\d\d) \|.*\| ([^|]*) \|$", section, re.M)
        assert row, f"no dated row for claims version {v}"
        assert re.search(r"before|after", row.group(2)), f"version {v}: before or after a result?"


def test_extending_names_only_paths_and_lpdt_names_that_exist():
    """docs/extending.md, the recipe for each kind of extension, names files and code as they
    are: every backticked repository path exists (a test named after ``::`` is defined in its
    file), and every dotted ``lpdt.x`` name is a module or an attribute of one."""

    text = (ROOT / "docs" / "extending.md").read_text()
    paths = sorted(set(REPO_PATH.findall(text)))
    assert len(paths) > 30  # the page lists the files of every extension: the scan must see them
    missing = []
    for token in paths:
        path, _, test = token.partition("::")
        f = ROOT / path
        if not f.exists() or (test and not re.search(rf"^def {test}\(", f.read_text(), re.M)):
            missing.append(token)
    assert not missing, f"docs/extending.md names paths that do not exist: {missing}"
    dotted = set(re.findall(r"`(lpdt(?:\.\w+)+)", text))
    assert len(dotted) > 10
    stale = _stale_lpdt_names(dotted)
    assert not stale, f"docs/extending.md names lpdt objects that do not exist: {stale}"
