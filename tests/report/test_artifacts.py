"""The report's one list of artifacts (``lpdt.report.artifacts``): every maker imports and takes
the inputs its entry names, every study it names is a study of config/studies.yaml, and the
numbers, file stems and the paper tables' studies follow from the list."""

from __future__ import annotations

import inspect
from importlib import import_module
from pathlib import Path

import pytest
import yaml

from lpdt.report import artifacts, tables

STUDIES = Path(__file__).resolve().parents[2] / "config" / "studies.yaml"


def _maker(spec: artifacts.Artifact):
    module, _, name = spec.maker.partition(":")
    return getattr(import_module(module), name)


def test_every_maker_takes_the_inputs_its_entry_reads() -> None:
    for spec in (*artifacts.FIGURE_LIST, *artifacts.TABLE_LIST):
        assert set(spec.reads) <= set(spec.INPUTS), spec
        params = inspect.signature(_maker(spec)).parameters
        assert len(params) == len(spec.reads), (spec.maker, list(params), spec.reads)
    for figure in artifacts.FIGURE_LIST:  # a figure of files: its setup reads the same inputs
        assert (figure.setup is None) == ("runs" in figure.reads), figure.stem
        if figure.setup is not None:
            module, _, name = figure.setup.partition(":")
            params = inspect.signature(getattr(import_module(module), name)).parameters
            assert len(params) == len(figure.reads), figure.setup


def test_the_studies_named_exist_and_the_figures_of_runs_name_theirs() -> None:
    studies = set(yaml.safe_load(STUDIES.read_text())["studies"])
    for spec in (*artifacts.FIGURE_LIST, *artifacts.TABLE_LIST):
        assert set(spec.studies) <= studies, spec
        assert bool(spec.studies) == ("runs" in spec.reads), spec
    assert artifacts.FIGURES_OF_RUNS == ("fig1", "fig4", "fig5", "fig6")


def test_numbers_stems_and_table_studies_follow_from_the_list() -> None:
    assert artifacts.FIGURE_NUMBERS == (1, 2, 3, 4, 5, 6, 7)
    assert artifacts.TABLE_NUMBERS == (2, 3, 4, 5, 6, 7, 9, 10)
    assert len(set(artifacts.FIGURES)) == len(artifacts.FIGURE_LIST)
    assert {n: f"table{n}" for n in (2, 3, 4, 5, 6)} == artifacts.TABLE_STUDY
    # The accuracy tables' specs are those of the tables with a study.
    assert set(tables.ACCURACY_TABLES) == set(artifacts.TABLE_STUDY)
    assert all(
        tables.ACCURACY_TABLES[n].study == artifacts.TABLE_STUDY[n] for n in tables.ACCURACY_TABLES
    )


def test_an_entry_that_reads_what_its_kind_does_not_pass_is_refused_when_listed() -> None:
    with pytest.raises(ValueError, match="Figure 8: maker 'm:f' .* reads \\['scale'\\]"):
        artifacts.Figure(8, "m:f", ("scale",))
    with pytest.raises(ValueError, match="module:function"):
        artifacts.Table(11, "no_colon", ("cost",))
    assert artifacts.Table(11, "m:f", ("scale", "number")).stem == "table11"
