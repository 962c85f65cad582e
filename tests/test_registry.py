"""The name registries (``lpdt.registry``): what a plugin may register."""

from __future__ import annotations

import pytest

from lpdt.decentral.catalog import ALGORITHMS, COMPRESSORS
from lpdt.registry import Registry


@pytest.mark.parametrize(
    ("name", "obj", "says"),
    [
        # a plugin's COMPRESSORS.add("weird", 42) broke every `lpdt train`, --print-config too,
        # with an AttributeError in the config check; a name 5, with a TypeError
        ("weird", 42, "compression 'weird': int 42 is no CompressorSpec (docs/extending.md)"),
        (5, None, "compression names are non-empty strings, not 5"),
        ("", None, "compression names are non-empty strings, not ''"),
        ("topk", None, "compression 'topk' is registered twice"),
    ],
)
def test_a_registry_refuses_what_it_cannot_hold(name, obj, says) -> None:
    before = COMPRESSORS.names()
    entry = COMPRESSORS.get("topk") if obj is None else obj
    with pytest.raises(ValueError) as e:
        COMPRESSORS.add(name, entry)
    assert str(e.value) == says
    assert COMPRESSORS.names() == before


def test_a_registry_of_specs_takes_a_spec_and_one_of_anything_takes_anything() -> None:
    spec = ALGORITHMS.get("choco")
    ALGORITHMS.add("choco-again", spec)
    try:
        assert ALGORITHMS.get("choco-again") is spec
    finally:
        ALGORITHMS.remove("choco-again")
    loose: Registry[object] = Registry("thing")
    loose.add("x", 42)
    assert loose.get("x") == 42
