"""Typed run configuration: defaults, YAML loading, ``key=value`` overrides, validation and run id.

The schema and the run id: ``lpdt.config.schema``; value checks: ``lpdt.config.checks``; this
module reads a config (defaults, YAML, overrides) and re-exports the schema's names.

A run config is a tree of dataclasses. ``load_config`` merges (in order) the defaults, a YAML
file and ``--set`` overrides, then validates every value. Any problem raises ``ConfigError``
with one line that names the key and the allowed values; the CLI turns it into exit code 2.

Override keys are dotted paths (``partition.skew=0.9``). A leaf name that is unique in the whole
tree may be used alone (``skew=0.9``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

from lpdt import plugins
from lpdt.config.checks import check_ranges, unused_settings
from lpdt.config.schema import (
    ADDED_KEYS_AT_OLD_DEFAULT,
    EXECUTION_KEYS,
    PAPER_NORMS,
    RECIPE_VERSIONS,
    AlgorithmConfig,
    CompressionConfig,
    ConfigError,
    DataConfig,
    ModelConfig,
    OptimConfig,
    PartitionConfig,
    PrecisionConfig,
    RunConfig,
    ScheduleConfig,
    TopologyConfig,
    TrackingConfig,
    TrainConfig,
    result_dict,
)
from lpdt.io import YamlKeyError, load_yaml, read_yaml_mapping
from lpdt.typed import Reader, dataclass_shape, type_name

__all__ = [  # the schema's names too: callers import everything from lpdt.config
    "ADDED_KEYS_AT_OLD_DEFAULT",
    "AlgorithmConfig",
    "CompressionConfig",
    "ConfigError",
    "DataConfig",
    "EXECUTION_KEYS",
    "ModelConfig",
    "OptimConfig",
    "PAPER_NORMS",
    "PartitionConfig",
    "PrecisionConfig",
    "RECIPE_VERSIONS",
    "RunConfig",
    "ScheduleConfig",
    "TopologyConfig",
    "TrackingConfig",
    "TrainConfig",
    "config_diff",
    "config_from_dict",
    "deep_merge",
    "dump_config",
    "load_config",
    "parse_value",
    "resolve_key",
    "result_dict",
    "result_diff",
    "set_path",
    "unused_settings",
]


def config_diff(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two config trees (a key on one side only
    counts), sorted."""
    out: list[str] = []
    for k in sorted(set(a) | set(b), key=str):
        va, vb = a.get(k, _MISSING), b.get(k, _MISSING)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += config_diff(va, vb, f"{prefix}{k}.")
        elif va != vb:
            out.append(f"{prefix}{k}")
    return out


def result_diff(cfg: RunConfig, stored: dict[str, Any]) -> list[str]:
    """The result-affecting keys in which a stored config tree (a run directory's
    ``config.yaml``, ``metrics.json`` or checkpoint) differs from ``cfg``. The stored tree is read
    with this version's defaults where it validates, so keys added since it was written do not
    count as differences."""
    with contextlib.suppress(ConfigError, TypeError):  # else written by another version
        stored = config_from_dict(stored).to_dict()
    return config_diff(result_dict(cfg.to_dict()), result_dict(stored))


# The largest float32 (numpy.finfo("float32").max): every float of a config meets float32
# tensors in training, where a larger one is torch's "cannot be converted ... without overflow"
FLOAT32_MAX = 3.4028234663852886e38

_MISSING = object()


# ----------------------------------------------------------------------------------------------
# Loading, overrides, validation
# ----------------------------------------------------------------------------------------------


def _leaf_paths(cls: type, prefix: str = "") -> dict[str, str]:
    """Map every dotted leaf path of a config dataclass to itself."""
    out: dict[str, str] = {}
    hints, fields = dataclass_shape(cls)
    for f in fields.values():
        path = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(hints[f.name]):
            out.update(_leaf_paths(hints[f.name], path + "."))
        else:
            out[path] = path
    return out


def resolve_key(key: str) -> str:
    """Turn an override key (dotted path or unique leaf name) into a dotted path."""
    paths = _leaf_paths(RunConfig)
    if key in paths:
        return key
    sections = {p.rsplit(".", 1)[0] for p in paths if "." in p}
    if key in sections:
        return key
    matches = [p for p in paths if p.rsplit(".", 1)[-1] == key]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise ConfigError(f"config key {key!r} is ambiguous; use one of: {', '.join(matches)}")
    # a key missing its section (compression.name), or misspelt (train.epoch): the key meant;
    # the whole list (1.3 kB) only when nothing is close
    last = key.rsplit(".", 1)[-1]
    names = {p.rsplit(".", 1)[-1] for p in paths}
    leaves = difflib.get_close_matches(last, names, 1, 0.8) or [
        n
        for n in sorted(names)
        if _one_swap(last, n)  # sekw: difflib's ratio is 0.75
    ]
    close = (
        [p for p in paths if p.endswith("." + key)]  # its section left out
        or [p for p in paths if p.rsplit(".", 1)[-1] == last]  # another section (train.lr)
        or difflib.get_close_matches(key, list(paths), 2, 0.8)  # misspelt (train.epoch)
        or [p for p in paths if p.rsplit(".", 1)[-1] in leaves]  # a misspelt leaf (epoch)
    )
    if close:
        raise ConfigError(
            f"unknown config key {key!r}; did you mean {' or '.join(close)}? (every key: "
            "lpdt train --print-config)"
        )
    raise ConfigError(f"unknown config key {key!r}; allowed keys: {', '.join(sorted(paths))}")


def _one_swap(a: str, b: str) -> bool:
    """Whether ``a`` is ``b`` with two neighbouring letters swapped (``sekw``, ``skew``)."""
    d = [i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y]
    swapped = len(d) == 2 and d[1] == d[0] + 1
    return len(a) == len(b) and swapped and (a[d[0]], a[d[1]]) == (b[d[1]], b[d[0]])


def parse_value(text: str) -> Any:
    """Parse an override value with a config file's YAML rules (``0.9`` -> float, ``true`` ->
    bool, ``[1,2]``; ``lpdt.io.load_yaml``); text that is no YAML is itself. A mapping with a key
    written twice is a ``ConfigError`` (a file with one is refused; here the last had won)."""
    try:
        return load_yaml(text)
    except YamlKeyError as e:
        raise ConfigError(f"--set value {text!r}: {e}") from None
    except yaml.YAMLError:  # e.g. `!wip`, a tag: the text as written
        return text


def _holds_text(path: str) -> bool:
    """Whether the config key at dotted ``path`` holds text (``str``, or ``str | None``)."""
    tp: Any = RunConfig
    for part in path.split("."):
        if not (isinstance(tp, type) and dataclasses.is_dataclass(tp)):
            return False
        tp = dataclass_shape(tp)[0].get(part)
    return tp is str or (
        typing.get_origin(tp) in (types.UnionType, typing.Union)
        and set(typing.get_args(tp)) == {str, type(None)}
    )


def _override_value(path: str, text: str) -> Any:
    """An override's value: YAML's reading of ``text``, but for a key that holds text its
    words as written where YAML would read something else (``name=2024-01-01`` a date,
    ``name=042`` the octal 34); ``null`` still clears a key that may be null."""
    value = parse_value(text)
    if value is None or isinstance(value, str) or not _holds_text(path):
        return value
    return text.strip()


def set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"config key {'.'.join(parts[:-1])!r} is not a section")
    node[parts[-1]] = value


def deep_merge(base: Any, over: Any, null_deletes: bool = False) -> Any:
    """Overlay ``over`` on ``base``: mappings merge recursively, anything else replaces. With
    ``null_deletes``, a None in ``over`` removes the key instead (the workflow's scale overlays
    delete blocks this way); without it, None is a value like any other (``key: null``)."""
    if not (isinstance(base, dict) and isinstance(over, dict)):
        return over
    out = dict(base)
    for k, v in over.items():
        if v is None and null_deletes:
            out.pop(k, None)
        elif k in out:
            out[k] = deep_merge(out[k], v, null_deletes)
        else:
            out[k] = v
    return out


def _coerce(value: Any, tp: Any, path: str, f: dataclasses.Field | None) -> Any:
    """Check (and gently coerce) ``value`` against type ``tp``; raise ConfigError otherwise. The
    config's reading of a value that is not a section (``lpdt.typed`` says how it differs from
    the JSON rules, and why)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    # None: `key:` or `--set key=` (an empty value reads as YAML's null) where null is no value
    given = "no value (empty, or null)" if value is None else f"invalid value {value!r}"
    bad = ConfigError(f"config key {path!r}: {given}; expected {type_name(tp, python=True)}")
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, path, f)
            except ConfigError:
                pass
        raise bad
    if origin is Literal:
        if value not in args:
            raise ConfigError(
                f"config key {path!r}: invalid value {value!r}; allowed: "
                + ", ".join(str(a) for a in args)
            )
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads "1e6" (no dot) as a string
            try:
                number = float(value)
            except ValueError:
                raise bad from None
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise bad
        else:
            number = float(value)
        if not math.isfinite(number):  # lr=inf passed every range check and diverged at once
            raise ConfigError(
                f"config key {path!r}: invalid value {value!r}; expected a finite number"
            )
        if abs(number) > FLOAT32_MAX:
            raise ConfigError(
                f"config key {path!r}: invalid value {value!r}; expected a number of at most "
                f"{FLOAT32_MAX:.4g} in size (training computes in float32)"
            )
        return number
    if tp is str:
        if not isinstance(value, str):
            raise bad
        if f is not None and "choices" in f.metadata:
            choices = f.metadata["choices"]()
            if value not in choices:
                raise ConfigError(
                    f"config key {path!r}: invalid value {value!r}; allowed: {', '.join(choices)}"
                )
        return value
    if origin is list:
        if not isinstance(value, list | tuple):
            raise bad
        return [_coerce(v, args[0], f"{path}[{i}]", None) for i, v in enumerate(value)]
    if origin is tuple:
        if not isinstance(value, list | tuple) or len(value) != len(args):
            raise bad
        return tuple(
            _coerce(v, a, f"{path}[{i}]", None) for i, (v, a) in enumerate(zip(value, args))
        )
    if origin is dict:
        if not isinstance(value, dict):
            raise bad
        return {str(k): str(v) for k, v in value.items()}
    raise bad


# Reads a config tree (``config_from_dict``): the field loop is ``lpdt.typed``'s, the values
# ``_coerce``'s.
_READER = Reader(
    error=ConfigError,
    root="<root>",
    not_object="config section {where!r} must be a mapping",
    unknown="unknown config key {key!r}{hint}; allowed here: {allowed}",
    missing="config key {key!r} is missing",
    coerce=_coerce,
)


def config_from_dict(tree: dict[str, Any]) -> RunConfig:
    """The checked config of a tree, after importing the plugins it names (``plugins``), those
    of ``$LPDT_PLUGINS`` and the installed ones (``lpdt.plugins``): they register names it uses."""
    names = tree.get("plugins") if isinstance(tree, dict) else None
    if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        names = []  # absent, or not a list of names: the reader says so below
    try:
        plugins.load(names)
    except plugins.PluginError as e:
        raise ConfigError(str(e)) from None
    cfg = _READER.build(RunConfig, tree)
    check_ranges(cfg)
    return cfg


def load_config(
    path: str | Path | None = None, overrides: list[str] | dict[str, Any] | None = None
) -> RunConfig:
    """Defaults <- YAML file <- overrides (``["a.b=1", ...]`` or ``{"a.b": 1}``)."""
    tree: dict[str, Any] = {}
    if path is not None:
        loaded = read_yaml_mapping(path, ConfigError, f"config file {str(path)!r}")
        tree = deep_merge(tree, loaded)
    items: list[tuple[str, Any]]
    if isinstance(overrides, dict):
        items = list(overrides.items())
    else:
        items = []
        for o in overrides or []:
            if "=" not in o or not o.split("=", 1)[0].strip():  # "=1": no key, not 70 keys
                raise ConfigError(f"override {o!r} must look like key=value, e.g. seed=1")
            k, v = o.split("=", 1)
            items.append((k.strip(), v))
    for k, v in items:
        key = resolve_key(k)
        set_path(tree, key, v if isinstance(overrides, dict) else _override_value(key, v))
    return config_from_dict(tree)


# Sections every config a run writes holds (``dump_config``): a YAML tree with all of them is a
# run's config.yaml, not another file of that name (a checkout's config/config.yaml)
RUN_SECTIONS = ("data", "model", "topology", "train", "optim")


def is_run_config_tree(tree: Any) -> bool:
    """Whether ``tree`` (a YAML file's content) is a config a run wrote: a mapping holding every
    ``RUN_SECTIONS``."""
    return isinstance(tree, dict) and set(RUN_SECTIONS) <= set(tree)


def dump_config(cfg: RunConfig) -> str:
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
