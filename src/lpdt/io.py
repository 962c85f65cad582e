"""Atomic file writes: an interrupted job never leaves a file that looks complete."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def _atomic(path: Path, write: Callable[[IO], None], mode: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    _atomic(path, lambda f: f.write(text), "w")


def write_json_atomic(path: Path, obj: Any) -> None:
    _atomic(path, lambda f: json.dump(obj, f, indent=2, allow_nan=True, default=str), "w")


def torch_save_atomic(path: Path, obj: Any) -> None:
    import torch

    _atomic(path, lambda f: torch.save(obj, f), "wb")
