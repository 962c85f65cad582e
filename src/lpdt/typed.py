"""Typed trees: dataclasses to JSON-like values and back, once for the whole package.

The run config (``lpdt.config``), the run record (``lpdt.record``), the checkpoint
(``lpdt.engine.checkpoint``), the claims (``lpdt.report.claims``) and the workflow's manifest
(``lpdt.grid.Manifest``) are trees of dataclasses written as JSON (or YAML, or a ``torch.save`` dict) and read back. This module holds what they
share; it imports no other ``lpdt`` module, so any of them can import it.

- ``to_json(obj)``: a tree as plain values: dataclasses as dicts (in field order), tuples and
  lists as lists, mappings as dicts (recursively); any other value as it is.
- ``type_name(tp)``: an annotation as error messages name it (``int or null``, ``'ok' or
  'diverged'``, ``a list of an object``).
- ``dataclass_shape(cls)``: a dataclass's resolved annotations and its fields by name, read
  once per class.
- ``Reader``: validation of a JSON-like value into a dataclass. ``Reader.build`` is the field
  loop: the value must be a mapping, with no unknown key (unless ``strict`` is off) and every
  field without a default present; each field's value is checked against its annotation by
  ``Reader.check``, which recurses into dataclass fields itself and checks the rest with
  ``coerce`` when one is given, else with the JSON rules below. A ``Reader`` names the error
  class it raises, the ``source`` that starts each message (a file's path), and the messages'
  wording (templates), so that every reader keeps its own one-line errors.

The JSON rules (the record's; ``Reader.check`` without ``coerce``): ``X | None`` takes null or an
``X`` (an error names ``X``); a union of several types takes the first that fits; a ``Literal``
takes one of its values, of the same type; ``bool`` and ``str`` take their own type, ``int`` an
integer that is not a bool, ``float`` a number that is not a bool (as a float); ``tuple[X, ...]``
and ``list[X]`` take a list of ``X`` (a fixed ``tuple[X, Y]`` a list of that length); ``dict[K, V]``
takes any object (``dict[str, D]`` with ``D`` a dataclass: an object whose every value is a
``D``, read by ``build``); a dataclass an object, read by ``build``.

What the config adds (its ``coerce``, ``lpdt.config``'s ``_coerce``), and why it stays there: a config
is typed by people (YAML, ``--set key=value``), so its reading is more lenient and its messages
speak to them. A float may be given as a string (YAML 1.1 reads ``1e6`` as one); a tuple or list
as either; a ``dict[str, str]`` has its keys and values turned into strings; a string field may
name a registry's choices (``field(metadata={"choices": ...})``: datasets, models, topologies,
algorithms), checked against the registry at reading time; a bad value is "invalid value X;
expected T" with ``T`` a Python type name (``type_name(tp, python=True)``), naming the whole union
(``int or null``), and a bad ``Literal`` lists the allowed values. Its ranges (``_check_ranges``)
are checked after the tree is built. The field loop, the dataclass recursion and the type names
are this module's.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NoReturn, TypeVar

T = TypeVar("T")

# A reader's value hook: (value, annotation, dotted path, the dataclass field or None) -> value.
Coerce = Callable[[Any, Any, str, dataclasses.Field[Any] | None], Any]


def to_json(obj: Any) -> Any:
    """Dataclasses -> dicts (in field order), tuples and lists -> lists, mappings -> dicts,
    recursively; other values as they are."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list | tuple):
        return [to_json(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: to_json(v) for k, v in obj.items()}
    return obj


def type_name(tp: Any, *, python: bool = False) -> str:
    """The annotation ``tp`` in words: a union's arms joined by "or", ``None`` as "null", a
    ``Literal``'s values. JSON names by default (a tuple or list is "a list of X", a dict or
    dataclass "an object"); ``python``: Python's names (``tuple``, ``dict``) and a ``Literal``'s
    values joined by " | " (the config's messages)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return (" | " if python else " or ").join(repr(a) for a in args)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(type_name(a, python=python) for a in args)
    if tp is type(None):
        return "null"
    if not python:
        if origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
            return f"a list of {type_name(args[0])}"
        if origin is tuple:
            return f"a list of {', '.join(type_name(a) for a in args)}"
        if origin is dict or dataclasses.is_dataclass(tp):
            return "an object"
    return getattr(tp, "__name__", str(tp))


Shape = tuple[dict[str, Any], dict[str, dataclasses.Field[Any]]]
_SHAPES: dict[type, Shape] = {}


def dataclass_shape(cls: type) -> Shape:
    """A dataclass's resolved annotations and its fields by name. Cached per class: resolving
    the annotations (``typing.get_type_hints``) was 0.48 of the 0.83 s that expanding the paper
    grid's 289 run configs took (cProfile, 2026-11-28), and a class's fields never change."""
    shape = _SHAPES.get(cls)
    if shape is None:
        fields = dataclasses.fields(cls)
        shape = _SHAPES[cls] = typing.get_type_hints(cls), {f.name: f for f in fields}
    return shape


@dataclass(frozen=True)
class Reader:
    """How one kind of document is validated into dataclasses (see the module's docstring).

    Messages are one line: ``"{source}: {message}"`` (the message alone when ``source`` is
    empty). The templates may use ``{key}`` (the dotted path of a field), ``{where}`` (the path
    of a value that must be a mapping; ``root`` for the top), ``{kind}`` (the type of what was
    found instead), ``{allowed}`` (the fields there, comma-separated) and ``{hint}`` (for an
    unknown key, `` (did you mean <the closest field>?)`` or nothing)."""

    error: type[Exception] = ValueError  # what every message is raised as
    source: str = ""  # the document (a file's path), first in every message
    root: str = "the value"  # what the top of the document is called in messages
    strict: bool = True  # a key that is no field is an error (False: it is ignored)
    not_object: str = "{where} must be an object, not {kind}"
    unknown: str = "unknown field {key!r}"
    missing: str = "field {key!r} is missing"
    coerce: Coerce | None = None  # checks the values of fields that are not dataclasses

    def fail(self, message: str) -> NoReturn:
        raise self.error(f"{self.source}: {message}" if self.source else message)

    def build(self, cls: type[T], data: Any, prefix: str = "") -> T:
        """An instance of the dataclass ``cls`` from a mapping: no unknown key (``strict``),
        every field without a default present, every value checked (``check``). ``prefix``:
        the dotted path of ``data`` in the document, with a trailing dot ("" at the top)."""
        if not isinstance(data, dict):
            where = prefix.rstrip(".") or self.root
            self.fail(self.not_object.format(where=where, kind=type(data).__name__))
        hints, fields = dataclass_shape(cls)
        if self.strict:
            for key in data:
                if key not in fields:
                    close = difflib.get_close_matches(str(key), list(fields), n=1)
                    hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
                    self.fail(
                        self.unknown.format(
                            key=prefix + str(key), allowed=", ".join(fields), hint=hint
                        )
                    )
        kwargs = {}
        for name, f in fields.items():
            if name in data:
                kwargs[name] = self.check(data[name], hints[name], prefix + name, f)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                self.fail(self.missing.format(key=prefix + name))
        return cls(**kwargs)

    def check(
        self, value: Any, tp: Any, where: str, field: dataclasses.Field[Any] | None = None
    ) -> Any:
        """``value`` checked against the annotation ``tp`` (``where``: its dotted path): a
        dataclass is built (``build``), anything else goes to ``coerce`` if there is one, else
        to the JSON rules (ints accepted for floats, lists for tuples, objects for dataclasses)."""
        if dataclasses.is_dataclass(tp):
            # ``tp`` is an annotation: a dataclass is there as its class, never an instance.
            return self.build(typing.cast(type[Any], tp), value, f"{where}.")
        if self.coerce is not None:
            return self.coerce(value, tp, where, field)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin in (types.UnionType, typing.Union):
            if value is None and type(None) in args:
                return None
            arms = [a for a in args if a is not type(None)]
            if len(arms) == 1:  # X | None: X's own error is the more precise one
                return self.check(value, arms[0], where)
            for a in arms:
                try:
                    return self.check(value, a, where)
                except self.error:
                    pass
        elif origin is Literal:
            if value in args and type(value) in {type(a) for a in args}:
                return value
        elif tp is bool or tp is str:
            if isinstance(value, tp):
                return value
        elif tp is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        elif tp is float:
            if isinstance(value, int | float) and not isinstance(value, bool):
                return float(value)
        elif origin is tuple or origin is list:
            if isinstance(value, list):
                variadic = origin is list or (len(args) == 2 and args[1] is Ellipsis)
                if variadic or len(value) == len(args):
                    items = [
                        self.check(v, args[0] if variadic else args[i], f"{where}[{i}]")
                        for i, v in enumerate(value)
                    ]
                    return tuple(items) if origin is tuple else items
        elif origin is dict and isinstance(value, dict):
            if len(args) == 2 and dataclasses.is_dataclass(args[1]):  # named objects: each built
                cls = typing.cast(type[Any], args[1])  # an annotation's argument: a class
                return {k: self.build(cls, v, f"{where}.{k}.") for k, v in value.items()}
            return value
        shown = json.dumps(value, default=str)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        self.fail(f"field {where!r} must be {type_name(tp)}, not {shown}")
