"""The compiler caches' key from the quantisers' sources (``lpdt.layers.quant.cache_key``)."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import torch._inductor.config

from lpdt.engine.steps import prepare_compile
from lpdt.layers.quant.cache_key import PACKAGE, SourceKey


def test_the_key_changes_with_any_source_of_the_package(tmp_path: Path):
    folder = tmp_path / "quant"
    shutil.copytree(PACKAGE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    key = SourceKey(folder).uuid()
    assert SourceKey(folder).uuid() == key
    vmap_ops = folder / "vmap_ops.py"
    vmap_ops.write_text(vmap_ops.read_text() + "\n# a changed vmap rule\n")
    changed = SourceKey(folder).uuid()
    assert changed != key
    (folder / "notes.txt").write_text("not a source")
    assert SourceKey(folder).uuid() == changed


def test_a_compiled_step_puts_the_key_in_the_caches_key_unless_a_pass_is_set():
    config = torch._inductor.config  # patched, not monkeypatched: its undo deletes the option
    with config.patch(post_grad_custom_post_pass=None):
        prepare_compile("default", quantized=True)
        installed = config.post_grad_custom_post_pass
        assert isinstance(installed, SourceKey) and installed.uuid() == SourceKey().uuid()
    own = SourceKey(PACKAGE.parent)
    with config.patch(post_grad_custom_post_pass=own):
        prepare_compile("default", quantized=False)
        assert config.post_grad_custom_post_pass is own


def test_inductors_cache_misses_when_a_source_changes_and_hits_when_none_does(tmp_path: Path):
    """The key at work: the same function compiled three times in one process, dynamo's memory
    of it cleared in between, so that inductor's on-disk cache answers each time."""
    from torch._dynamo.utils import counters

    folder = tmp_path / "quant"
    folder.mkdir()
    rule = f"# a vmap rule, {uuid.uuid4()}\n"  # a key no earlier run has left in the cache
    x = torch.randn(64)
    seen = []
    with torch._inductor.config.patch(
        post_grad_custom_post_pass=SourceKey(folder), fx_graph_cache=True
    ):
        for edit in ("", "", "# changed\n"):
            (folder / "rule.py").write_text(rule + edit)
            torch._dynamo.reset()
            counters.clear()
            torch.compile(lambda t: (t * 3.25).sin() + 1.5, dynamic=False)(x)
            seen.append(
                (
                    counters["inductor"]["fxgraph_cache_hit"],
                    counters["inductor"]["fxgraph_cache_miss"],
                )
            )
    assert seen == [(0, 1), (1, 0), (0, 1)]
