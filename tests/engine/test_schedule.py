"""The learning-rate schedule (``lpdt.engine.schedule``): the note a run prints when milestones
lie at or past its epochs."""

from __future__ import annotations

import pytest

from lpdt.config import load_config
from lpdt.engine.loop import train
from lpdt.engine.schedule import lr_at, schedule_note
from tests.conftest import TINY


def _cfg(*sets: str):
    return load_config(None, [*TINY, *sets])


@pytest.mark.parametrize(
    ("milestones", "says"),
    [
        ("[100,150]", "100, 150 lie at or past train.epochs=5: the learning rate never decays"),
        ("[2,5,9]", "5, 9 lie at or past train.epochs=5: the learning rate skips those decays"),
    ],
)
def test_milestones_the_run_never_reaches_are_named(milestones: str, says: str) -> None:
    cfg = _cfg("train.epochs=5", f"schedule.milestones={milestones}")
    note = schedule_note(cfg)
    assert note is not None and says in note, note
    # what the note says is what lr_at does: the late milestones change no epoch's rate
    late = [m for m in cfg.schedule.milestones if m >= 5]
    early = len(cfg.schedule.milestones) - len(late)
    assert lr_at(cfg, 4) == pytest.approx(cfg.optim.lr * cfg.schedule.gamma**early)


@pytest.mark.parametrize(
    "sets",
    [
        ("train.epochs=5", "schedule.milestones=[2,4]"),  # every milestone reached
        ("train.epochs=5", "schedule.milestones=[]"),
        ("train.epochs=5", "schedule.milestones=[100]", "schedule.decay=linear"),  # unused
    ],
)
def test_no_note_where_every_milestone_is_reached_or_none_is_used(sets: tuple[str, ...]) -> None:
    assert schedule_note(_cfg(*sets)) is None


def test_a_run_prints_the_note_after_its_first_line(tmp_path) -> None:
    sets = ("data.train_subset=240", "data.test_subset=32", "topology.nodes=2", "train.epochs=1")
    sets += ("train.batch_size=64",)  # no batch note before the schedule's
    lines: list[str] = []
    train(_cfg(*sets, "schedule.milestones=[3]"), tmp_path / "run", log=lines.append)
    assert lines[0].startswith("run ") and lines[1].startswith("note: schedule.milestones 3 "), (
        lines
    )
