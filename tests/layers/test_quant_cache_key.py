"""The compiler caches' key from the quantisers' sources (``lpdt.layers.quant.cache_key``)."""

from __future__ import annotations

import shutil
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
