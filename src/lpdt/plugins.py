"""Plugin modules: code outside the package that registers algorithms, compressors, topologies,
optimizers, models or datasets (``ALGORITHMS.add(...)`` and the like) when it is imported.

A plugin is named in one of three ways, and every process that reads a run config, or is an
``lpdt`` command, imports it before it reads the names the config uses:

- the config key ``plugins`` (a list of importable module names): the processes that read that
  config, i.e. ``lpdt train``, the distributed engine's workers (``python -m lpdt.engine.worker``)
  and the workflow's jobs (each run's config file carries the key; the workflow's own process
  reads it when it expands the grid). An execution key: it does not change the run id;
- the environment variable ``LPDT_PLUGINS`` (module names, comma-separated): every ``lpdt``
  command and every process started from it (workers, Snakemake's jobs, ``lpdt report``);
- the entry-point group ``lpdt.plugins`` of installed packages (``[project.entry-points.
  "lpdt.plugins"]`` with ``mine = "mypackage.lpdt_plugin"``): every process, once installed.

A module is imported once per process. One that is named but cannot be imported (not found, or
its import raised) is a ``PluginError``: one line naming the module, where it was named and why
(the config's reader turns it into a ``ConfigError``, exit 2).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from importlib import metadata

from lpdt.errors import LpdtError

ENV = "LPDT_PLUGINS"
GROUP = "lpdt.plugins"

_loaded: dict[str, str] = {}  # module -> where it was named (imported in this process)
_installed_done = False  # the environment variable and the entry points were read


class PluginError(LpdtError, ValueError):
    """A plugin module that is named but cannot be imported (one line)."""


def env_plugins() -> list[str]:
    """The module names of ``$LPDT_PLUGINS`` (comma-separated; blanks ignored)."""
    return [m.strip() for m in os.environ.get(ENV, "").split(",") if m.strip()]


def _import(module: str, where: str) -> None:
    if module in _loaded:
        return
    try:
        importlib.import_module(module)
    except Exception as e:  # ModuleNotFoundError, or anything its import raised
        first = (str(e).strip().splitlines() or [""])[0]
        why = f"{type(e).__name__}: {first}" if first else type(e).__name__
        raise PluginError(f"plugin {module!r} ({where}) cannot be imported: {why}") from None
    _loaded[module] = where


def load(names: Iterable[str] = (), where: str = "config key plugins") -> list[str]:
    """Import the plugin modules ``names`` (named by ``where``), and, the first time, those of
    ``$LPDT_PLUGINS`` and of the ``lpdt.plugins`` entry points; return the modules imported in
    this process so far. Raises ``PluginError`` for one that cannot be imported."""
    global _installed_done
    if not _installed_done:
        _installed_done = True  # once, even if one fails: its error is said once
        for module in env_plugins():
            _import(module, f"${ENV}")
        for ep in metadata.entry_points(group=GROUP):
            module = ep.value.partition(":")[0].strip()
            dist = ep.dist.name if ep.dist is not None else "an installed package"
            _import(module, f"entry point {ep.name!r} of {dist}")
    for module in names:
        _import(module, where)
    return list(_loaded)
