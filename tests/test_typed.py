"""``lpdt.typed``, the one helper behind the config, the record, the checkpoint and the claims:
a dataclass tree round-trips through JSON, and a missing field, an unknown field or a value of
the wrong type is one line of the reader's own error class."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

import pytest

from lpdt.typed import Reader, to_json, type_name


class TreeError(ValueError):
    pass


@dataclass(frozen=True)
class Leaf:
    name: str
    weight: float
    kind: Literal["a", "b"] = "a"


@dataclass(frozen=True)
class Tree:
    id: int
    leaves: tuple[Leaf, ...]
    best: Leaf | None
    pair: tuple[int, str] = (0, "")
    tags: dict[str, str] = field(default_factory=dict)
    note: str | None = None


TREE = Tree(
    id=7,
    leaves=(Leaf("x", 1.5), Leaf("y", 2.0, "b")),
    best=Leaf("x", 1.5),
    pair=(3, "three"),
    tags={"k": "v"},
)
READER = Reader(error=TreeError, source="tree.json", root="the tree")


def _error(data: object) -> str:
    with pytest.raises(TreeError) as e:
        READER.build(Tree, data)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("tree.json: "), msg
    return msg


def test_a_nested_tree_round_trips_through_json() -> None:
    data = to_json(TREE)
    assert list(data) == ["id", "leaves", "best", "pair", "tags", "note"]  # field order
    assert data["leaves"][1] == {"name": "y", "weight": 2.0, "kind": "b"}
    assert data["pair"] == [3, "three"]  # tuples as lists
    assert READER.build(Tree, json.loads(json.dumps(data))) == TREE
    # an int is a float; fields with defaults may be left out
    assert READER.build(Leaf, {"name": "z", "weight": 2}) == Leaf("z", 2.0)


@dataclass(frozen=True)
class Forest:
    trees: dict[str, Leaf]  # named objects: each value read as a Leaf


def test_an_object_of_named_dataclasses_is_read_value_by_value() -> None:
    forest = Forest({"oak": Leaf("x", 1.5), "elm": Leaf("y", 2.0, "b")})
    data = to_json(forest)
    assert data == {"trees": {"oak": to_json(Leaf("x", 1.5)), "elm": to_json(Leaf("y", 2.0, "b"))}}
    assert READER.build(Forest, json.loads(json.dumps(data))) == forest
    with pytest.raises(
        TreeError, match=r"^tree.json: field 'trees.elm.weight' must be float, not \"2\"$"
    ):
        READER.build(Forest, {"trees": {"elm": {"name": "y", "weight": "2"}}})
    with pytest.raises(TreeError, match=r"^tree.json: trees.oak must be an object, not list$"):
        READER.build(Forest, {"trees": {"oak": []}})


def _tree_with(**changes: object) -> dict:
    return {**to_json(TREE), **changes}


def test_missing_unknown_and_wrong_fields_are_one_line_errors() -> None:
    data = _tree_with()
    del data["best"]
    assert _error(data) == "tree.json: field 'best' is missing"
    leaves = [{"name": "x", "weight": 1.0, "colour": "red"}]
    assert _error(_tree_with(leaves=leaves)) == "tree.json: unknown field 'leaves[0].colour'"
    leaves = [{"name": "x", "weight": "heavy"}]
    assert _error(_tree_with(leaves=leaves)) == (
        "tree.json: field 'leaves[0].weight' must be float, not \"heavy\""
    )
    assert _error(_tree_with(id=True)) == "tree.json: field 'id' must be int, not true"
    assert _error(_tree_with(pair=[1])) == (
        "tree.json: field 'pair' must be a list of int, str, not [1]"
    )
    assert "must be 'a' or 'b'" in _error(_tree_with(best={"name": "x", "weight": 1, "kind": "c"}))
    assert _error(_tree_with(best=[])) == "tree.json: best must be an object, not list"
    assert _error([]) == "tree.json: the tree must be an object, not list"


def test_readers_choose_their_messages_and_value_rules() -> None:
    """The templates and the value hook (``coerce``) a reader such as the config's or the
    checkpoint's plugs in; dataclass fields are still built by the field loop."""
    seen = []

    def as_is(value, tp, where, f):
        seen.append(where)
        return value

    lenient = Reader(
        error=KeyError,
        strict=False,
        not_object="section {where!r} is not a mapping",
        missing="no {key!r}",
        coerce=as_is,
    )
    tree = lenient.build(Tree, {"id": "seven", "leaves": [], "best": None, "extra": 1})
    assert tree.id == "seven" and "id" in seen  # the hook decides; unknown keys are ignored
    with pytest.raises(KeyError, match="no 'best'"):
        lenient.build(Tree, {"id": 1, "leaves": []})
    strict = Reader(error=TreeError, unknown="unknown key {key!r}; allowed here: {allowed}")
    with pytest.raises(TreeError, match=r"^unknown key 'kin'; allowed here: name, weight, kind$"):
        strict.build(Leaf, {"name": "x", "weight": 1.0, "kin": "a"})
    hinted = Reader(error=TreeError, unknown="unknown key {key!r}{hint}; allowed: {allowed}")
    with pytest.raises(TreeError, match=r"^unknown key 'kin' \(did you mean kind\?\); allowed"):
        hinted.build(Leaf, {"name": "x", "weight": 1.0, "kin": "a"})


def test_type_names() -> None:
    assert type_name(int | None) == "int or null"
    assert type_name(Literal["a", "b"]) == "'a' or 'b'"
    assert type_name(tuple[Leaf, ...]) == "a list of an object"
    assert type_name(dict[str, str]) == "an object"
    # the config's names (Python's)
    assert type_name(tuple[float, float], python=True) == "tuple"
    assert type_name(Literal["a", "b"], python=True) == "'a' | 'b'"
