"""The run record (lpdt.record): round trip, atomic writes, schema versions, one-line errors."""

import csv
import datetime as dt
import json
import math

import pytest

from lpdt import record
from lpdt.record import SCHEMA_VERSION, RecordError
from tests.fake_records import STARTED, fake_record


def test_round_trip_through_the_files(tmp_path):
    rec = fake_record("abc", 71.5, config={"seed": 7, "partition": {"skew": 0.8}})
    path = rec.write(tmp_path / "run")
    assert path == tmp_path / "run" / "metrics.json"
    back = record.read(tmp_path / "run")
    assert back == rec and record.read(path) == rec
    # metrics.json as users read it: the version first, the documented sections
    data = json.loads(path.read_text())
    assert list(data)[0] == "schema_version" and data["schema_version"] == SCHEMA_VERSION
    assert data["final"]["acc_node_mean"] == 71.5 and data["config"]["seed"] == 7
    # history.csv: the record's rows under the documented columns
    rows = list(csv.DictReader((tmp_path / "run" / "history.csv").open()))
    assert tuple(rows[0]) == record.HISTORY_FIELDS
    assert [r["epoch"] for r in rows] == [str(r.epoch) for r in rec.history]
    assert [float(r["acc_node_mean"]) for r in rows] == [r.acc_node_mean for r in rec.history]


def test_diverged_record_round_trips_with_empty_final_and_nan_loss(tmp_path):
    rec = fake_record("div", status="diverged")
    rec.write(tmp_path)
    data = json.loads((tmp_path / "metrics.json").read_text())
    assert data["final"] == {} and data["status"] == "diverged"
    last = data["history"][-1]
    assert set(last) == {"epoch", "lr", "train_loss"}  # metrics an epoch lacks are left out
    assert math.isnan(last["train_loss"])
    back = record.read(tmp_path)
    assert back.final is None and math.isnan(back.history[-1].train_loss)
    assert json.dumps(back.to_dict()) == json.dumps(rec.to_dict())  # NaN != NaN: compare text
    # and history.csv leaves the missing cells empty
    rows = list(csv.DictReader((tmp_path / "history.csv").open()))
    assert rows[-1]["acc_node_mean"] == "" and rows[-1]["train_loss"] == "nan"


def test_write_is_atomic_and_metrics_json_comes_last(tmp_path, monkeypatch):
    import lpdt.io

    old = fake_record("old", 10.0)
    old.write(tmp_path)
    before = (tmp_path / "metrics.json").read_bytes()
    new = fake_record("new", 20.0, epochs=5)

    # metrics.json is written after history.csv is complete
    seen = []
    real = record.write_json_atomic

    def spy(path, obj):
        seen.append((path.name, (tmp_path / "history.csv").read_bytes().decode()))
        real(path, obj)

    monkeypatch.setattr(record, "write_json_atomic", spy)
    new.write(tmp_path)
    assert seen == [("metrics.json", record.history_csv(new.history))]
    monkeypatch.undo()

    # a write that fails halfway leaves the previous file whole, and no temporary file
    old.write(tmp_path)

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(lpdt.io.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        new.write(tmp_path)
    assert (tmp_path / "metrics.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.csv", "metrics.json"]


def _write_data(tmp_path, data) -> str:
    path = tmp_path / "metrics.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def _one_line_error(path: str) -> str:
    with pytest.raises(RecordError) as e:
        record.read(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(path), msg
    return msg


@pytest.mark.parametrize(
    ("version", "says"),
    [
        (None, "older format (no schema_version)"),
        (0, "older schema version 0"),  # older than every version this lpdt upgrades
        (SCHEMA_VERSION + 1, f"schema version {SCHEMA_VERSION + 1}, newer than this lpdt knows"),
        ("1.0", "unknown schema version '1.0'"),
    ],
)
def test_record_of_another_schema_version_is_refused(tmp_path, version, says):
    data = fake_record().to_dict()
    if version is None:
        del data["schema_version"]
    else:
        data["schema_version"] = version
    msg = _one_line_error(_write_data(tmp_path, data))
    assert says in msg and f"reads schema version {SCHEMA_VERSION}" in msg
    assert "--force" in msg  # what to do about it


def test_record_of_schema_version_1_is_read_without_system_metrics(tmp_path):
    """Version 1 (before the system metrics) is upgraded on reading: the same record with
    ``system`` None and no system columns in its history; written again, it is version 2."""
    assert record.UPGRADABLE == (1,) and SCHEMA_VERSION == 2
    rec = fake_record("v1", 60.0)
    data = rec.to_dict()
    data["schema_version"] = 1
    del data["system"]
    for row in data["history"]:
        for k in ("cpu_share", "peak_rss_mb", "threads", "images_per_s"):
            row.pop(k, None)
    back = record.read(_write_data(tmp_path, data))
    assert back.schema_version == SCHEMA_VERSION and back.system is None
    assert back.final == rec.final and all(r.threads is None for r in back.history)
    assert back.to_dict()["schema_version"] == SCHEMA_VERSION


def _broken(change):
    data = fake_record().to_dict()
    change(data)
    return data


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "not a run record"),
        (
            _broken(lambda d: d["final"].update(acc_node_mean="high")),
            "field 'final.acc_node_mean' must be float, not \"high\"",
        ),
        (_broken(lambda d: d["dataset"].pop("stand_in")), "field 'dataset.stand_in' is missing"),
        (_broken(lambda d: d["time"].update(gpu_s=1.0)), "unknown field 'time.gpu_s'"),
        (
            _broken(lambda d: d.update(status="finished")),
            "field 'status' must be 'ok' or 'diverged'",
        ),
        (_broken(lambda d: d.update(final={})), "status 'ok' needs final metrics"),
        (_broken(lambda d: d["history"][0].update(epoch="last")), "field 'history[0].epoch'"),
        (_broken(lambda d: d["provenance"].update(git_dirty="yes")), "'provenance.git_dirty'"),
        (_broken(lambda d: d["model"].update(params=True)), "'model.params' must be int, not true"),
        # lpdt compare paired on it and said "invalid literal for int()", naming no file
        (_broken(lambda d: d["config"].update(seed="abc")), "config seed 'abc' is not an integer"),
        # a finished run's accuracy that no run writes: lpdt compare said "has no record" (NaN),
        # the tables averaged the cell over the other seeds with the count of all (NaN), a pair
        # gave a mean of 0.00 (inf), 5000 was averaged in
        (
            _broken(lambda d: d["final"].update(acc_node_mean=float("nan"))),
            "final.acc_node_mean nan is no accuracy",
        ),
        (
            _broken(lambda d: d["final"].update(acc_avg_model=float("inf"))),
            "final.acc_avg_model inf",
        ),
        (
            _broken(lambda d: d["final"].update(acc_node_max=5000.0)),
            "final.acc_node_max 5000.0 is no accuracy",
        ),
        (_broken(lambda d: d["final"].update(acc_node_min=-1.0)), "final.acc_node_min -1.0"),
    ],
)
def test_invalid_record_is_one_line_naming_file_and_field(tmp_path, data, says):
    msg = _one_line_error(_write_data(tmp_path, data))
    assert says in msg, msg


def test_a_record_that_is_not_text_is_one_line(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_bytes(b"\x00\xff\xfe binary")
    msg = _one_line_error(str(path))
    assert "metrics.json: not text (UTF-8)" in msg, msg


def test_missing_record_is_one_line(tmp_path):
    msg = _one_line_error(str(tmp_path / "run"))
    assert "metrics.json does not exist; the run is not complete" in msg


def test_row_times_follow_wall_time_across_resumed_sessions():
    """Rows are stamped with their session's start plus the wall time that session added: the
    run stopped after epoch 1 (wall 20 s) and was resumed an hour after it started."""
    resumed_at = STARTED + dt.timedelta(hours=1)
    session = {
        "epoch": 2,
        "started": resumed_at.isoformat(),
        "git_commit": None,
        "git_dirty": None,
        "host": "other",
        "command": "lpdt train --resume",
    }
    rec = fake_record(
        epochs=4,
        epoch_s=10.0,
        provenance={
            "resumed": [session],
            "finished": (resumed_at + dt.timedelta(minutes=5)).isoformat(),
        },
    )
    walls = [r.wall_s for r in rec.history]  # 10, 20 | 30, 40, final 41
    times = rec.row_times()
    assert times[:2] == [STARTED + dt.timedelta(seconds=w) for w in walls[:2]]
    assert times[2:] == [resumed_at + dt.timedelta(seconds=w - walls[1]) for w in walls[2:]]
    # never after the finish, and a row without wall time (a diverged epoch) gets the finish
    div = fake_record(status="diverged")
    assert div.row_times()[-1] == record.parse_time(div.provenance.finished)


def test_old_record_in_the_output_dir_is_refused_by_lpdt_train(tmp_path, capsys):
    from lpdt.cli import main

    data = fake_record().to_dict()
    del data["schema_version"]
    (tmp_path / "metrics.json").write_text(json.dumps(data))
    assert main(["train", "--set", "device=cpu", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "older format" in err[0] and "--force" in err[0]


def test_history_row_omits_missing_metrics_and_fields_are_complete():
    row = record.HistoryRow(epoch=3, lr=0.1, train_loss=1.5)
    assert row.to_dict() == {"epoch": 3, "lr": 0.1, "train_loss": 1.5}
    assert record.HistoryRow.from_dict(row.to_dict()) == row
    # the final row carries every final metric (names shared with FinalMetrics)
    assert set(record.FINAL_FIELDS) <= set(record.HISTORY_FIELDS)
