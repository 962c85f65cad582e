"""A fresh SQLite MLflow store per test, copied from one initialised per session (creating the
schema takes seconds), and finished run directories from fake records."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from lpdt import tracking
from tests.fake_records import fake_record


@pytest.fixture(scope="session")
def template_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tracking-template") / "mlflow.db"
    tracking.init_store(f"sqlite:///{path}", "lpdt")
    return path


@pytest.fixture()
def store(tmp_path, monkeypatch, template_db) -> str:
    """An absolute sqlite URI (MLflow caches one store per URI string)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    shutil.copy(template_db, tmp_path / "results" / "mlflow.db")
    return f"sqlite:///{tmp_path}/results/mlflow.db"


def write_run(directory: Path, run_id: str, config: dict[str, Any], **kw) -> Path:
    """A finished run directory (``metrics.json``, ``history.csv``, ``config.yaml``) holding
    ``fake_record(run_id, config=config, **kw)``."""
    rec = fake_record(run_id, config=config, **kw)
    rec.write(directory)
    (directory / "config.yaml").write_text(yaml.safe_dump(rec.config))
    return directory
