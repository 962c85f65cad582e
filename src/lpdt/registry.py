"""A tiny name -> object registry so that configs can name models, datasets, algorithms... by string,
and the base of the specs registered in it (``lpdt.decentral.catalog``, ``lpdt.models``,
``lpdt.data``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Spec:
    """A registered component: what the rest of lpdt reads about it (a subclass's fields) and
    ``impl``, its implementation, or ``"module:attribute"`` where it is. A string is imported on
    first use (``load``), so that reading a spec imports no torch."""

    impl: str | Callable[..., Any]

    def load(self) -> Callable[..., Any]:
        """The implementation: ``impl`` itself, or the attribute its string names, imported now."""
        if not isinstance(self.impl, str):
            return self.impl
        module, sep, attr = self.impl.partition(":")
        if not (sep and module and attr):
            raise ValueError(f"implementation {self.impl!r}: expected 'module:attribute'")
        return getattr(import_module(module), attr)


class Registry(Generic[T]):
    """Maps names to objects (usually factories). Unknown names raise a KeyError listing the choices."""

    def __init__(self, kind: str, of: type | None = None) -> None:
        self.kind = kind
        self.of = of  # what every entry must be (a plugin's 42 failed later, in a config check)
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if not isinstance(name, str) or not name:
                raise ValueError(f"{self.kind} names are non-empty strings, not {name!r}")
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            if self.of is not None and not isinstance(obj, self.of):
                raise ValueError(
                    f"{self.kind} {name!r}: {type(obj).__name__} {obj!r:.40} is no "
                    f"{self.of.__name__} (docs/extending.md)"
                )
            self._items[name] = obj
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        """Register ``obj`` under ``name`` (a name registered twice is a ValueError)."""
        self.register(name)(obj)

    def remove(self, name: str) -> None:
        """Take ``name`` out again (a test's own entry, when the test ends)."""
        self.get(name)  # unknown: the KeyError that lists the choices
        del self._items[name]

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(
                f"unknown {self.kind} {name!r}; choose one of: {', '.join(sorted(self._items))}"
            ) from None

    def find(self, name: str) -> T | None:
        """The entry of ``name``, or None where it is not registered (in this process)."""
        return self._items.get(name)

    def names(self) -> list[str]:
        return sorted(self._items)

    def ordered(self) -> list[str]:
        """The names in the order they were registered (e.g. the order of table rows)."""
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
