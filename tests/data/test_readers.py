"""Readers on tiny files written in each real on-disk format, plus transforms and subsets."""

import gzip
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from lpdt.config import DataConfig
from lpdt.data import DATASETS, images, load_dataset
from lpdt.data.base import DatasetError, balanced_subset, data_root
from lpdt.data.imagenette import ImagenetteDataset, decoded_key
from lpdt.data.transforms import random_crop_flip


def write_cifar10(root: Path, per_batch=20) -> Path:
    """CIFAR-10's six pickles: ``per_batch`` images in each training batch, their labels
    counting on from batch to batch, so that every class is in the training split (the reader
    refuses a split without one); the test batch has at least ten."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for b, name in enumerate(names):
        n, start = (per_batch, b * per_batch) if b < 5 else (max(per_batch, 10), 0)
        d = {
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            b"labels": [(start + i) % 10 for i in range(n)],
        }
        with open(folder / name, "wb") as f:
            pickle.dump(d, f)
    return folder


def write_cifar100(root: Path, n=200) -> Path:
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in ("train", "test"):
        d = {
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            b"fine_labels": [i % 100 for i in range(n)],
            b"coarse_labels": [i % 20 for i in range(n)],
        }
        with open(folder / name, "wb") as f:
            pickle.dump(d, f)
    return folder


def write_idx(path: Path, arr: np.ndarray, magic: int) -> None:
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + arr.astype(np.uint8).tobytes())


def write_fmnist(root: Path, n=50) -> Path:
    folder = root / "FashionMNIST" / "raw"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split in ("train", "t10k"):
        write_idx(folder / f"{split}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)), 2051)
        write_idx(folder / f"{split}-labels-idx1-ubyte.gz", np.arange(n) % 10, 2049)
    return folder


@pytest.fixture(autouse=True)
def no_debian(monkeypatch, tmp_path):
    monkeypatch.setattr(images, "DEBIAN_FASHION_MNIST", tmp_path / "no-debian")
    monkeypatch.delenv("LPDT_DATA_ROOT", raising=False)


def test_cifar10_reads_pickles(tmp_path):
    folder = write_cifar10(tmp_path)
    ds = load_dataset(DataConfig(dataset="cifar10", root=str(tmp_path)))
    assert len(ds) == 100 and len(ds.labels("test")) == 20
    assert ds.info.source == str(folder) and not ds.info.stand_in
    with open(folder / "data_batch_1", "rb") as f:
        raw = pickle.load(f, encoding="bytes")[b"data"][3].reshape(3, 32, 32)
    x, y = ds.batch("train", torch.tensor([3]))
    expect = (
        torch.from_numpy(raw).float() / 255 - torch.tensor(images.CIFAR10_MEAN).view(3, 1, 1)
    ) / (torch.tensor(images.CIFAR10_STD).view(3, 1, 1))
    torch.testing.assert_close(x[0], expect)
    assert y.tolist() == [3]
    # The folder itself is accepted as root.
    assert len(load_dataset(DataConfig(dataset="cifar10", root=str(folder)))) == 100


def test_cifar100_fine_labels(tmp_path):
    write_cifar100(tmp_path)
    ds = load_dataset(DataConfig(dataset="cifar100", root=str(tmp_path)))
    assert ds.info.num_classes == 100 and ds.labels("train").max() == 99


def test_missing_dataset_names_layout(tmp_path):
    with pytest.raises(DatasetError, match="cifar-10-batches-py.*data.download"):
        load_dataset(DataConfig(dataset="cifar10", root=str(tmp_path)))
    with pytest.raises(DatasetError, match="FashionMNIST"):
        load_dataset(DataConfig(dataset="fashion_mnist", root=str(tmp_path)))
    with pytest.raises(DatasetError, match="imagenette2"):
        load_dataset(DataConfig(dataset="imagenette", root=str(tmp_path)))


def test_corrupt_cifar_names_file(tmp_path):
    folder = write_cifar10(tmp_path)
    data = (folder / "data_batch_2").read_bytes()
    (folder / "data_batch_2").write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match="data_batch_2"):
        load_dataset(DataConfig(dataset="cifar10", root=str(tmp_path)))


@pytest.mark.parametrize(("batch", "label"), [("data_batch_2", 57), ("test_batch", -1)])
def test_a_label_outside_the_classes_is_refused_before_training(tmp_path, batch, label):
    """A label no class has (a damaged or foreign file): refused when the data is read. It
    failed mid-training (57: "Target 57 is out of bounds"), or, in the test split, scored as a
    wrong prediction in a run that ended "ok" (-1)."""
    folder = write_cifar10(tmp_path)
    with open(folder / batch, "rb") as f:
        d = pickle.load(f)
    d[b"labels"][3] = label
    with open(folder / batch, "wb") as f:
        pickle.dump(d, f)
    split = "test" if batch == "test_batch" else "train"
    with pytest.raises(
        DatasetError, match=rf"cifar10 .*1 {split} label\(s\) outside 0..9, e.g. {label}"
    ):
        load_dataset(DataConfig(dataset="cifar10", root=str(tmp_path)))


def test_fashion_mnist_idx(tmp_path):
    write_fmnist(tmp_path)
    ds = load_dataset(
        DataConfig(dataset="fashion_mnist", root=str(tmp_path), stand_in_for="cifar10")
    )
    assert ds.info.stand_in and ds.info.stand_in_for == "cifar10"
    assert ds.info.input_shape == (3, 32, 32)
    x, _ = ds.batch("test", torch.arange(4))
    assert x.shape == (4, 3, 32, 32) and x.dtype == torch.float32
    border = (0 - images.FASHION_MNIST_MEAN[0]) / images.FASHION_MNIST_STD[0]
    assert torch.allclose(x[:, :, :2, :], torch.tensor(border))  # 2-px zero padding
    assert torch.equal(x[:, 0], x[:, 2])  # grey repeated to 3 channels


@pytest.mark.parametrize("corruption", ["magic", "truncate"])
def test_corrupt_idx(tmp_path, corruption):
    folder = write_fmnist(tmp_path)
    path = folder / "train-images-idx3-ubyte.gz"
    raw = gzip.decompress(path.read_bytes())
    raw = (b"\x00\x00\x08\x01" + raw[4:]) if corruption == "magic" else raw[:-100]
    path.write_bytes(gzip.compress(raw))
    with pytest.raises(DatasetError, match="train-images-idx3-ubyte.gz"):
        load_dataset(DataConfig(dataset="fashion_mnist", root=str(tmp_path)))


def test_subsets_class_balanced(tmp_path):
    write_cifar10(tmp_path)
    ds = load_dataset(
        DataConfig(dataset="cifar10", root=str(tmp_path), train_subset=30, test_subset=10)
    )
    assert np.bincount(ds.labels("train")).tolist() == [3] * 10
    assert np.bincount(ds.labels("test")).tolist() == [1] * 10
    assert balanced_subset(np.array([0, 0, 0, 1, 2, 2]), 5).tolist() == [0, 1, 3, 4, 5]


def test_root_resolution(monkeypatch, tmp_path):
    assert data_root(DataConfig(root=str(tmp_path))) == tmp_path
    monkeypatch.setenv("LPDT_DATA_ROOT", str(tmp_path / "env"))
    assert data_root(DataConfig()) == tmp_path / "env"
    monkeypatch.delenv("LPDT_DATA_ROOT")
    assert data_root(DataConfig()) == Path("./data")


def test_augmentation_changes_pixels_and_is_reproducible():
    x = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8)
    a = random_crop_flip(x, 4, torch.Generator().manual_seed(5))
    b = random_crop_flip(x, 4, torch.Generator().manual_seed(5))
    c = random_crop_flip(x, 4, torch.Generator().manual_seed(6))
    assert a.shape == x.shape and a.dtype == torch.uint8
    assert torch.equal(a, b) and not torch.equal(a, c) and not torch.equal(a, x)


def test_augmentation_is_crop_of_padded_or_flipped():
    x = torch.randint(1, 256, (64, 1, 8, 8), dtype=torch.uint8)
    out = random_crop_flip(x, 2, torch.Generator().manual_seed(0))
    pad = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for i in range(len(x)):
        crops = [pad[i, :, r : r + 8, c : c + 8] for r in range(5) for c in range(5)]
        assert any(torch.equal(out[i], cr) or torch.equal(out[i], cr.flip(-1)) for cr in crops)
    flipped = sum(not torch.equal(out[i], pad[i, :, 2:10, 2:10]) for i in range(len(x)))
    assert flipped > 40


def write_imagenette(root: Path, layout="imagenette2-160") -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in (("train", 4), ("val", 2)):
        for wnid in ("n02102040", "n01440764", "n03000684"):
            d = root / layout / split / wnid
            d.mkdir(parents=True)
            for i in range(n):
                arr = rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)
                Image.fromarray(arr).save(d / f"img_{i}.JPEG")
    return root / layout


@pytest.mark.parametrize("layout", ["imagenette2-160", "imagenette", "imagenette2"])
def test_imagenette_folder(tmp_path, layout):
    """Each layout reads; fastai's downsized copies (160, 320 px) are named and recorded as
    stand-ins for the paper's full-size Imagenette (the 160 px one was read as the real thing)."""
    folder = write_imagenette(tmp_path, layout)
    ds = load_dataset(DataConfig(dataset="imagenette", root=str(tmp_path)))
    assert ds.info.source == str(folder) and ds.info.input_shape == (3, 224, 224)
    downsized = layout == "imagenette2-160"
    assert ds.info.stand_in == downsized
    assert (ds.info.name, ds.info.stand_in_for) == (
        ("imagenette2-160", "imagenette") if downsized else ("imagenette", None)
    )
    assert ds.classes == ["n01440764", "n02102040", "n03000684"]  # sorted, ImageFolder order
    assert np.bincount(ds.labels("train")).tolist() == [4, 4, 4]
    x, y = ds.batch("test", torch.tensor([0, 5]))
    assert x.shape == (2, 3, 224, 224) and y.tolist() == [0, 2]
    a, _ = ds.batch("train", torch.arange(3), True, torch.Generator().manual_seed(1))
    b, _ = ds.batch("train", torch.arange(3), True, torch.Generator().manual_seed(1))
    c, _ = ds.batch("train", torch.arange(3), False)
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("where", ["train", "val", "no-val-folder"])
def test_imagenette_with_a_class_without_images_is_refused(tmp_path, where):
    """A class folder left empty (a copy cut short) would train and score fewer classes than the
    dataset names, in a run that ends "ok": refused, naming the class."""
    import shutil

    folder = write_imagenette(tmp_path)
    split = "train" if where == "train" else "val"
    target = folder / split / "n02102040"
    shutil.rmtree(target)
    if where != "no-val-folder":
        target.mkdir()
    with pytest.raises(DatasetError, match=rf"no images of class n02102040 in .*{split}"):
        load_dataset(DataConfig(dataset="imagenette", root=str(tmp_path)))


def test_imagenette_val_class_without_a_training_folder_is_refused(tmp_path):
    """A val class folder that train has not: its images left the test split without a word
    (before 2026-12-01)."""
    import shutil

    folder = write_imagenette(tmp_path)
    shutil.copytree(folder / "val" / "n02102040", folder / "val" / "n09999999")
    with pytest.raises(DatasetError) as e:
        load_dataset(DataConfig(dataset="imagenette", root=str(tmp_path)))
    assert str(e.value) == (
        f"imagenette: {folder / 'val'} holds class folder(s) n09999999 that {folder / 'train'} "
        "has not (a run scores the classes it trains)"
    )


def test_imagenette_files_that_are_no_image_are_refused_and_hidden_files_passed_over(tmp_path):
    """A .webp (or any file not .jpg/.jpeg/.png) in a class folder was left out of the run
    without a word; a file manager's hidden files are no images and no damage."""
    folder = write_imagenette(tmp_path)
    (folder / "val" / "n01440764" / ".DS_Store").write_bytes(b"\0")
    (folder / "val" / "n01440764" / "Thumbs.db").write_bytes(b"\0")
    (folder / "train" / "n02102040" / "img_9.JPG").write_bytes(
        (folder / "train" / "n02102040" / "img_0.JPEG").read_bytes()
    )
    ds = load_dataset(DataConfig(dataset="imagenette", root=str(tmp_path)))
    assert np.bincount(ds.labels("train")).tolist() == [4, 5, 4]  # .JPG is an image
    (folder / "train" / "n03000684" / "img_9.webp").write_bytes(b"RIFF")
    with pytest.raises(DatasetError) as e:
        load_dataset(DataConfig(dataset="imagenette", root=str(tmp_path)))
    assert str(e.value).startswith(
        f"imagenette: 1 entry in the class folders of {folder / 'train'} is not .jpg, .jpeg, "
        f".png images (a folder, another format), e.g. "
        f"{folder / 'train' / 'n03000684' / 'img_9.webp'}: "
    )


def test_imagenette_subset(tmp_path):
    write_imagenette(tmp_path)
    ds = load_dataset(DataConfig(dataset="imagenette", root=str(tmp_path), train_subset=6))
    assert np.bincount(ds.labels("train")).tolist() == [2, 2, 2]


def _imagenette(folder: Path, cache_dir: Path | None) -> ImagenetteDataset:
    return ImagenetteDataset(DataConfig(dataset="imagenette"), folder, cache_dir=cache_dir)


def _epoch(ds: ImagenetteDataset) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    train = [ds.batch("train", torch.tensor(b), True, gen)[0] for b in ([5, 0, 7], [11, 2])]
    return [*train, ds.batch("test", torch.arange(6))[0]]


def test_imagenette_decodes_once_into_a_file_with_the_same_pixels(tmp_path, capsys):
    """The decoded file gives the batches a decode would, bit for bit; later datasets read it
    without decoding; a damaged file is rewritten; an unwritable place decodes every batch."""
    folder = write_imagenette(tmp_path)
    decoded = _epoch(_imagenette(folder, None))  # no cache: decoded every batch
    assert "decoding" not in capsys.readouterr().out
    cache = tmp_path / "cache"
    first = _epoch(_imagenette(folder, cache))
    out = capsys.readouterr().out
    assert out.count("decoding the 12 train images once") == 1 and "decoding the 6 test" in out
    assert all(torch.equal(a, b) for a, b in zip(first, decoded, strict=True))
    files = sorted(f for f in cache.iterdir() if f.suffix != ".lock")
    assert sorted(f.suffix for f in files) == [".json", ".json", ".u8", ".u8"]
    stamps = [f.stat().st_mtime_ns for f in files]
    again = _epoch(_imagenette(folder, cache))
    assert "decoding" not in capsys.readouterr().out  # read from the file
    assert [f.stat().st_mtime_ns for f in files] == stamps
    assert all(torch.equal(a, b) for a, b in zip(again, decoded, strict=True))
    # a truncated file: rewritten, the same pixels
    pixels = next(f for f in files if f.name.startswith("train") and f.suffix == ".u8")
    pixels.write_bytes(pixels.read_bytes()[:-10])
    mended = _epoch(_imagenette(folder, cache))
    assert (
        "decoding the 12 train images again (the file there was damaged)" in capsys.readouterr().out
    )
    assert all(torch.equal(a, b) for a, b in zip(mended, decoded, strict=True))
    # a cache folder that cannot be made (a file in its place): one line, then decoded batches
    blocked = tmp_path / "blocked"
    blocked.write_text("")
    fallback = _epoch(_imagenette(folder, blocked / "imagenette"))
    assert capsys.readouterr().out.count("decoding every batch instead") == 2  # train, test
    assert all(torch.equal(a, b) for a, b in zip(fallback, decoded, strict=True))


def test_imagenette_cache_key_follows_the_files(tmp_path):
    """Another image in a file's place is another key: its pixels are decoded anew."""
    folder = write_imagenette(tmp_path)
    files = sorted(folder.glob("train/*/*.JPEG"))
    key = decoded_key(files)
    assert decoded_key(files) == key
    first = files[0]
    first.write_bytes(files[1].read_bytes())
    assert decoded_key(files) != key


def test_imagenette_waits_for_another_writer_at_most_its_bound(tmp_path, monkeypatch, capsys):
    """While another process holds the decoded file's lock (writing it), a reader waits, says
    so once, and after ``LOCK_WAIT_S`` decodes every batch instead, with the same pixels."""
    import subprocess
    import sys

    from lpdt.data import imagenette

    folder = write_imagenette(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    files = sorted(folder.glob("val/*/*.JPEG"))  # the test split, in the reader's order
    lock = cache / f"test-{decoded_key(files)}.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'ab'); fcntl.lockf(f, fcntl.LOCK_EX);"
            " print('held', flush=True); time.sleep(60)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(imagenette, "LOCK_WAIT_S", 1.0)
        got = _imagenette(folder, cache).batch("test", torch.arange(6))[0]
    finally:
        holder.kill()
        holder.wait(timeout=30)
    out = capsys.readouterr().out
    assert out.count("waiting for another process decoding the test images") == 1
    assert "decoding every batch instead" in out and "waited 1 s" in out
    assert torch.equal(got, _imagenette(folder, None).batch("test", torch.arange(6))[0])


def test_load_imagenette_keeps_its_decoded_files_under_the_data_root(tmp_path):
    write_imagenette(tmp_path)
    ds = load_dataset(DataConfig(dataset="imagenette", root=str(tmp_path)))
    ds.batch("test", torch.arange(2))
    kinds = sorted(p.suffix for p in (tmp_path / ".cache" / "imagenette").iterdir())
    assert kinds == [".json", ".lock", ".u8"]


REAL = Path("/usr/share/datasets/fashion-mnist")


@pytest.mark.skipif(not REAL.exists(), reason="dataset-fashion-mnist not installed")
def test_real_debian_fashion_mnist(monkeypatch, tmp_path):
    monkeypatch.setattr(images, "DEBIAN_FASHION_MNIST", REAL)
    ds = load_dataset(DataConfig(dataset="fashion_mnist", root=str(tmp_path), test_subset=1000))
    assert len(ds) == 60000 == DATASETS.get("fashion_mnist").train_size  # the plan's size
    assert ds.info.source == str(REAL)
    assert np.bincount(ds.labels("train")).tolist() == [6000] * 10
    assert np.bincount(ds.labels("test")).tolist() == [100] * 10
    x, _ = ds.batch("train", torch.arange(60000))
    assert abs(float(x.mean())) < 1e-3 and abs(float(x.std()) - 1) < 1e-3  # documented constants


def test_image_size_downsamples_once_and_scales_crop_padding(tmp_path):
    write_fmnist(tmp_path)
    full = load_dataset(DataConfig(dataset="fashion_mnist", root=str(tmp_path)))
    small = load_dataset(DataConfig(dataset="fashion_mnist", root=str(tmp_path), image_size=16))
    assert small.info.input_shape == (3, 16, 16)
    x32, _ = full.batch("test", np.arange(4))
    x16, _ = small.batch("test", np.arange(4))
    assert x16.shape == (4, 3, 16, 16)
    # Antialiased downsampling keeps each image's mean brightness (up to uint8 rounding and
    # normalisation: 1/255 in pixels is about 0.012 normalised).
    assert torch.allclose(x16.mean((1, 2, 3)), x32.mean((1, 2, 3)), atol=0.05)
    # Training crops at 16 px pad by 2 (4 at 32 px): every augmented image is a shift of at most
    # 2 px (possibly flipped) of its source; with padding 4 most of 64 crops would not be.
    idx = np.arange(32)
    aug, _ = small.batch("train", idx, augment=True, generator=torch.Generator().manual_seed(0))
    src, _ = small.batch("train", idx)
    fill = (0 - images.FASHION_MNIST_MEAN[0]) / images.FASHION_MNIST_STD[0]
    padded = torch.nn.functional.pad(src, (2, 2, 2, 2), value=fill)
    for a, p in zip(aug, padded, strict=True):
        crops = [p[:, dy : dy + 16, dx : dx + 16] for dy in range(5) for dx in range(5)]
        assert any(torch.equal(a, c) or torch.equal(a, c.flip(-1)) for c in crops)


def test_generated_images_take_the_size_asked_and_unresized_data_refuses_one():
    """``synthetic`` was generated at 32 px whatever ``data.image_size`` said (a ResNet-18 at
    16 px, refused on real data, trained; the plan priced the size asked). Imagenette crops to
    224 px and text has no pixels: the key is refused there, not ignored."""
    from lpdt.config import ConfigError, load_config
    from lpdt.data import load_dataset
    from lpdt.data.synthetic import load_synthetic

    assert load_synthetic(DataConfig(dataset="synthetic", image_size=12)).info.input_shape == (
        3,
        12,
        12,
    )
    default = load_dataset(DataConfig(dataset="synthetic", train_subset=20, test_subset=10))
    assert default.info.input_shape == (3, 32, 32)
    for data, says in (("imagenette", "is not resized"), ("fortunes4", "holds text")):
        model = "distilbert_tiny" if data == "fortunes4" else "resnet18"
        with pytest.raises(ConfigError, match=f"data.image_size.*{says}"):
            load_config(
                overrides=[f"data.dataset={data}", f"model.name={model}", "data.image_size=16"]
            )


def test_image_size_out_of_range_is_a_config_error():
    from lpdt.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="data.image_size"):
        load_config(overrides=["data.image_size=3"])


def test_every_spec_names_a_reader_and_the_generated_sizes_are_the_plans() -> None:
    """Each registered dataset's reader imports; the generated dataset has the split sizes its
    spec gives the plan (``lpdt.data.full_train_size`` / ``full_test_size``)."""
    for name in DATASETS:
        assert callable(DATASETS.get(name).load()), name
    spec = DATASETS.get("synthetic")
    ds = load_dataset(DataConfig(dataset="synthetic"))
    assert (len(ds.labels("train")), len(ds.labels("test"))) == (spec.train_size, spec.test_size)


def _rewrite_cifar(folder: Path, batch: str, **changes: object) -> None:
    with open(folder / batch, "rb") as f:
        d = pickle.load(f)
    d.update({k.encode(): v for k, v in changes.items()})
    with open(folder / batch, "wb") as f:
        pickle.dump(d, f)


@pytest.mark.parametrize(
    ("batch", "changes", "says"),
    [
        # each was read without a word before 2026-12-01: pixels wrapped modulo 256, labels cut
        # to whole numbers, an empty batch; the empty test split failed after an epoch with a
        # ZeroDivisionError (the accuracy curve's rows)
        ("data_batch_2", {"data": np.ones((20, 3072), np.float32)}, "images are float32"),
        ("data_batch_2", {"labels": [1.5] * 20}, "labels are float64, not whole numbers"),
        (
            "data_batch_2",
            {"data": np.zeros((0, 3072), np.uint8), "labels": []},
            "data_batch_2: ValueError: it holds no images",
        ),
        ("test_batch", {"data": np.zeros((0, 3072), np.uint8), "labels": []}, "no images"),
    ],
)
def test_a_damaged_cifar_batch_is_refused_naming_it(tmp_path, batch, changes, says):
    folder = write_cifar10(tmp_path)
    _rewrite_cifar(folder, batch, **changes)
    with pytest.raises(DatasetError) as e:
        load_dataset(DataConfig(dataset="cifar10", root=str(tmp_path)))
    assert f"corrupt CIFAR file {folder / batch}" in str(e.value) and says in str(e.value), e


@pytest.mark.parametrize("batch", ["test_batch", "data_batch_3"])
def test_a_class_missing_from_a_whole_split_is_refused(tmp_path, batch):
    """Imagenette refused a class without images; CIFAR-10 without a label 9 anywhere trained
    nine classes and ended "ok" (before 2026-12-01). Only the whole split counts: a subset
    may leave a class out."""
    folder = write_cifar10(tmp_path)
    batches = ["test_batch"] if batch == "test_batch" else [f"data_batch_{i}" for i in range(1, 6)]
    for b in batches:
        _rewrite_cifar(folder, b, labels=[i % 9 for i in range(20)])
    split = "test" if batch == "test_batch" else "train"
    with pytest.raises(DatasetError) as e:
        load_dataset(DataConfig(dataset="cifar10", root=str(tmp_path)))
    assert f"cifar10 ({folder}): no {split} example of class 9 (of 0..9): a partial" in str(e.value)
    write_cifar10(tmp_path / "whole")  # a subset of 4 images holds 4 of the 10 classes
    ds = load_dataset(DataConfig(dataset="cifar10", root=str(tmp_path / "whole"), train_subset=4))
    assert sorted(ds.labels("train")) == [0, 1, 2, 3]


def test_a_partial_fashion_mnist_copy_is_refused_not_replaced(tmp_path, monkeypatch):
    """A data root's Fashion-MNIST folder without one of its four files: Debian's copy was read
    in its place, silently (before 2026-12-01)."""
    debian = write_fmnist(tmp_path / "debian")
    monkeypatch.setattr(images, "DEBIAN_FASHION_MNIST", debian)
    mine = write_fmnist(tmp_path / "mine")
    (mine / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DatasetError) as e:
        load_dataset(DataConfig(dataset="fashion_mnist", root=str(tmp_path / "mine")))
    assert str(e.value) == (
        f"fashion_mnist: {mine} holds some of its files but not t10k-labels-idx1-ubyte[.gz]: "
        "complete the copy, or remove it"
    )
    ds = load_dataset(DataConfig(dataset="fashion_mnist", root=str(tmp_path / "empty")))
    assert ds.info.source == str(debian)  # no copy of the user's: Debian's, as before

    # with data.download, torchvision completes an interrupted download (not Debian's copy)
    def complete(root: str, train: bool, download: bool) -> None:
        write_fmnist(tmp_path / "fetched")
        for f in (tmp_path / "fetched" / "FashionMNIST" / "raw").iterdir():
            if not (mine / f.name).exists():
                f.rename(mine / f.name)

    import torchvision.datasets

    monkeypatch.setattr(torchvision.datasets, "FashionMNIST", complete)
    ds = load_dataset(
        DataConfig(dataset="fashion_mnist", root=str(tmp_path / "mine"), download=True)
    )
    assert ds.info.source == str(mine) and (mine / "t10k-labels-idx1-ubyte.gz").is_file()
