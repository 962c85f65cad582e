"""The run coordinates are defined once (``lpdt.report.aggregate.COORDINATES``): the studies'
schema and the coordinates of ``config/studies.yaml`` agree with that list."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lpdt.report.aggregate import BY_NAME, CONFIG_PATHS, KEYS, compression_key, norm_key

REPO = Path(__file__).resolve().parents[2]
STUDIES = yaml.safe_load((REPO / "config" / "studies.yaml").read_text())
SCHEMA = yaml.safe_load((REPO / "workflow" / "schemas" / "studies.schema.yaml").read_text())


def dig(tree: dict, path: str) -> object:
    for part in path.split("."):
        tree = tree[part]
    return tree


def test_the_schemas_list_exactly_the_coordinates() -> None:
    """The claims' schema lists them; the studies' schema refers to it."""
    claims = yaml.safe_load((REPO / "src" / "lpdt" / "report" / "claims.schema.yaml").read_text())
    assert claims["$defs"]["coordinate"]["enum"] == KEYS
    assert SCHEMA["$defs"]["coordinate"]["$ref"].endswith("claims.schema.yaml#/$defs/coordinate")


@pytest.mark.parametrize("name", KEYS)
def test_each_coordinate_of_the_studies_sets_the_config_key_it_is_read_from(name: str) -> None:
    """A coordinate is a dotted config key (the same as ``CONFIG_PATHS``) or a table of values
    whose fragments set that key to the value, or, for compression (derived), fragments whose
    compression the report reads back as the value."""
    spec = STUDIES["coordinates"][name]
    if isinstance(spec, str):
        assert spec == CONFIG_PATHS[name]
        return
    for value, fragment in spec.items():
        if BY_NAME[name].path is None:  # compression: derived from algorithm.compression
            comp = fragment["algorithm"]["compression"]
            read = compression_key(comp["name"], comp["ratio"])
        else:
            read = dig(fragment, CONFIG_PATHS[name])
        assert norm_key(name, read) == norm_key(name, value), (name, value, fragment)


def test_the_studies_define_every_coordinate() -> None:
    assert set(KEYS) <= set(STUDIES["coordinates"])
