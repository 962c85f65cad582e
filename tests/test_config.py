import pytest
import yaml

from lpdt.config import ConfigError, load_config, resolve_key


def test_defaults_and_derived_values():
    cfg = load_config()
    assert cfg.topology.nodes == 8 and cfg.per_node_batch == 32
    assert cfg.consensus_lr == 1.0
    cfg = load_config(None, ["algorithm.compression.name=topk", "ratio=0.99"])
    assert cfg.consensus_lr == 0.01  # the reference's eta with compression
    assert load_config(None, ["consensus_lr=0.5"]).consensus_lr == 0.5


def test_leaf_aliases_and_yaml_values(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("partition:\n  skew: 0.4\ntrain:\n  epochs: 3\n")
    cfg = load_config(p, ["skew=0.9", "milestones=[2, 4]", "qgm=true"])
    assert cfg.partition.skew == 0.9 and cfg.train.epochs == 3
    assert cfg.schedule.milestones == [2, 4] and cfg.optim.qgm is True
    assert resolve_key("skew") == "partition.skew"


@pytest.mark.parametrize(
    "override,needle",
    [
        ("foo=1", "unknown config key 'foo'"),
        ("seed=", "'seed': no value (empty, or null); expected int"),  # "invalid value None"
        ("train.lr=0.1", "'train.lr'; did you mean optim.lr?"),
        # a torch error at the first step ("Expected tensor for argument #1 'indices'")
        ("dataset=agnews", "'resnet20' takes image inputs, but data.dataset 'agnews' holds text"),
        # the key meant, where one is close (a 1.3 kB list of every key before 2026-11-30)
        ("compression.name=topk", "'compression.name'; did you mean algorithm.compression.name?"),
        ("epoch=3", "'epoch'; did you mean train.epochs?"),
        ("train.epoch=3", "'train.epoch'; did you mean train.epochs?"),
        ("skew=1.5", "'partition.skew': must be in [0, 1]"),
        ("epochs=two", "'train.epochs'"),
        ("precision.mode=int4", "allowed: fp32, int8"),
        ("model.name=resnet999", "'model.name'"),
        ("name=x=y", None),  # values may contain '='
        ("weight_bits=7", "allowed: 4, 8, 16, 32"),
        ("model.range_chunks=0", "'model.range_chunks': must be >= 1"),
        ("model.dropout_noise=philox", "allowed: generator, hash"),
        # each passed before 2026-11-30 and made a run that ended "ok" with nothing trained
        # (-1), every accuracy 0 % (-1), or failed late with a message naming no key
        ("max_iters_per_epoch=-1", "'train.max_iters_per_epoch': must be >= 1 or null"),
        ("max_iters_per_epoch=0", "'train.max_iters_per_epoch': must be >= 1 or null"),
        ("eval_batch_size=-1", "'train.eval_batch_size': must be >= 1"),
        ("eval_batch_size=0", "'train.eval_batch_size': must be >= 1"),
        ("threads=0", "'threads': must be between 1 and 1024, or null"),
        ("seed=-1", "'seed': must be in [0, 2**32)"),
        ("partition.seed=4294967296", "'partition.seed': must be in [0, 2**32)"),
        # passed every range check and diverged at epoch 0 (exit 3)
        ("optim.lr=inf", "'optim.lr': invalid value 'inf'; expected a finite number"),
        ("skew=-inf", "'partition.skew': invalid value '-inf'; expected a finite number"),
        # trained to its first step, then torch: "value cannot be converted to type float
        # without overflow" (before 2026-12-01)
        ("optim.lr=1e308", "'optim.lr': invalid value '1e308'; expected a number of at most 3.4"),
        # each trained silently (a negative or zero rate, weights grown by a negative decay) or
        # ended diverged, exit 3, before 2026-12-01; the text ones failed late naming no key
        ("schedule.warmup_factor=-5", "'schedule.warmup_factor': must be > 0"),
        ("schedule.gamma=-1", "'schedule.gamma': must be in (0, 1]"),
        ("schedule.gamma=0", "'schedule.gamma': must be in (0, 1]"),
        ("schedule.warmup_epochs=-2", "'schedule.warmup_epochs': must be >= 0"),
        ("schedule.milestones=[-1]", "'schedule.milestones': each must be an epoch >= 0"),
        ("optim.weight_decay=-1", "'optim.weight_decay': must be >= 0"),
        ("optim.eps=-1", "'optim.eps': must be > 0"),
        ("optim.betas=[2,-1]", "'optim.betas': both must be in [0, 1)"),
        ("data.per_class=-1", "'data.per_class': must be >= 3 or null"),
        # an empty test split (two examples of a class both train): "no test examples: an
        # empty or truncated file", and a ZeroDivisionError before that (2026-12-01)
        ("data.per_class=2", "'data.per_class': must be >= 3 or null (80 % of each class"),
        ("model.gn_groups=0", "'model.gn_groups': must be >= 1"),
        # the synthetic dataset drew 10**9 images in memory (before 2026-12-01)
        # YAML 1.1 read these as 60, 8 and 90 epochs; the last of two keys won in a --set value
        # no key: "unknown config key ''" and the 70 keys (2026-12-02)
        ("=1", "override '=1' must look like key=value, e.g. seed=1"),
        ("seed=1:00", "'seed': invalid value '1:00'; expected int"),
        ("seed=010", "'seed': invalid value '010'; expected int"),
        (
            "train={epochs: 1, epochs: 2}",
            "'{epochs: 1, epochs: 2}': the key 'epochs' is written twice",
        ),
    ],
)
def test_bad_values_are_one_line_errors(override, needle):
    if needle is None:
        assert load_config(None, [override]).name == "x=y"
        return
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("split", ["train", "test"])
def test_a_generated_dataset_bounds_its_subsets(split):
    """``data.dataset=synthetic data.train_subset=1000000000`` drew 10**9 images in memory
    before 2026-12-01 (its ``DatasetSpec.max_subset``)."""
    sets = ["data.dataset=synthetic", "model.name=tiny_cnn"]
    assert load_config(None, [*sets, f"data.{split}_subset=50000"]).data.dataset == "synthetic"
    with pytest.raises(ConfigError) as e:
        load_config(None, [*sets, f"data.{split}_subset=50001"])
    assert f"'data.{split}_subset': must be at most 50,000 for 'synthetic'" in str(e.value)


@pytest.mark.parametrize(
    ("model", "length", "says"),
    [
        # a 43-line OverflowError; a misleading shape error; a 160 GB allocation
        ("distilbert", "-5", "must be in 3..512 (tokens per example"),
        ("distilbert", "1024", "distilbert holds 512 positions"),
        ("distilbert_tiny", "100000", "must be in 3..4096"),
        ("distilbert_tiny", "1024", None),  # built with as many positions as it needs
        ("resnet20", "100000", None),  # an image model does not read it
    ],
)
def test_max_length_is_checked_where_a_text_model_reads_it(model, length, says):
    data = "fashion_mnist" if model == "resnet20" else "fortunes4"
    sets = [f"model.name={model}", f"data.dataset={data}", f"data.max_length={length}"]
    if says is None:
        assert load_config(None, sets).data.max_length == int(length)
        return
    with pytest.raises(ConfigError) as e:
        load_config(None, sets)
    assert "'data.max_length': " in str(e.value) and says in str(e.value), e.value


def test_a_set_value_that_yaml_cannot_construct_is_its_text():
    """``--set tracking.experiment=!wip``: a YAML tag; the text as written, as before."""
    assert load_config(None, ["tracking.experiment=!wip"]).tracking.experiment == "!wip"


def test_unused_schedule_keys_are_not_checked():
    """gamma and the milestones only matter to a step schedule, the factor only to a warm-up."""
    cfg = load_config(
        None,
        [
            "schedule.decay=linear",
            "schedule.gamma=0",
            "schedule.warmup_epochs=0",
            "schedule.warmup_factor=0",
        ],
    )
    assert cfg.schedule.gamma == 0 and cfg.schedule.warmup_factor == 0


def test_unknown_key_in_file_and_missing_file(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("topology:\n  nodez: 8\n")
    with pytest.raises(ConfigError, match="topology.nodez"):
        load_config(p)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    p.write_text("")  # cut off, or not yet written: not "all defaults" (CIFAR-10, 200 epochs)
    with pytest.raises(ConfigError, match=r"c\.yaml' is empty"):
        load_config(p)


def test_run_id_is_stable_and_ignores_tracking():
    a = load_config(None, ["skew=0.4"])
    b = load_config(None, ["skew=0.4", "tracking.mlflow=true", "name=foo"])
    c = load_config(None, ["skew=0.8"])
    assert a.run_id() == b.run_id() != c.run_id()


def test_run_id_hashes_only_what_changes_results():
    from lpdt.config import EXECUTION_KEYS, result_diff

    assert set(EXECUTION_KEYS) >= {"name", "threads", "device", "data.root", "tracking"}
    a = load_config(None, ["skew=0.4"])
    b = load_config(
        None,
        [
            "skew=0.4",
            "threads=3",
            "device=cpu",
            "data.root=/elsewhere",
            "tracking.uri=sqlite:///x.db",
            "name=n",
        ],
    )
    assert a.run_id() == b.run_id() and result_diff(a, b.to_dict()) == []
    for change in ("seed=7", "data.train_subset=100", "precision.mode=int8", "lr=0.2"):
        c = load_config(None, ["skew=0.4", change])
        assert c.run_id() != a.run_id()
        assert result_diff(a, c.to_dict()) == [resolve_key(change.split("=")[0])]


def test_data_download_is_an_execution_key_that_keeps_the_recorded_ids():
    """``data.download`` fetches a missing dataset first: the same files, so the same run id
    (turning it on for the paper grid renamed every run, and off again would have retrained
    them). Ids recorded before still hash it at false, so they stay as they were."""
    from lpdt.config import result_dict, result_diff

    off = load_config(None, ["skew=0.4"])
    on = load_config(None, ["skew=0.4", "data.download=true"])
    assert on.data.download and on.run_id() == off.run_id()
    assert result_diff(off, on.to_dict()) == []
    assert result_dict(on.to_dict())["data"]["download"] is False  # as every recorded id hashed


def test_recipe_version_moves_only_8bit_run_ids():
    """fp32 ids hash the config alone (as before the versions existed); 8-bit ids also hash the
    8-bit recipe's version, so a changed rounding-noise recipe gets new run directories."""
    import hashlib
    import json

    from lpdt.config import RECIPE_VERSIONS, result_dict

    def plain_hash(cfg) -> str:
        blob = json.dumps(result_dict(cfg.to_dict()), sort_keys=True, default=str).encode()
        return hashlib.sha1(blob).hexdigest()[:12]

    fp32, int8 = load_config(None, ["skew=0.4"]), load_config(None, ["precision.mode=int8"])
    assert "fp32" not in RECIPE_VERSIONS and fp32.run_id() == plain_hash(fp32)
    assert RECIPE_VERSIONS["int8"] >= 2 and int8.run_id() != plain_hash(int8)


@pytest.mark.parametrize("key", ["algorithm.compression.ratio", "ratio"])
@pytest.mark.parametrize("value", [99, 90, 1])
def test_compression_percentage_is_refused_with_the_fraction_it_means(key, value, capsys):
    """Studies and tables say "Comp. 99 %"; a run config takes the fraction 0.99. A percentage
    given to `lpdt train --set` is refused (exit 2) with one line naming the fraction."""
    from lpdt.cli import main

    assert main(["train", "--set", f"{key}={value}", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'algorithm.compression.ratio'" in err
    assert "fraction in [0, 1)" in err and f"write {value / 100:g}" in err


@pytest.mark.parametrize("value", [-0.1, 100, 250])
def test_compression_ratio_out_of_range_names_the_range(value):
    with pytest.raises(ConfigError) as e:
        load_config(None, [f"ratio={value}"])
    msg = str(e.value)
    assert "fraction in [0, 1)" in msg and "\n" not in msg and "write" not in msg


def test_compression_fraction_is_accepted():
    cfg = load_config(None, ["algorithm.compression.name=topk", "ratio=0.99"])
    assert cfg.algorithm.compression.ratio == 0.99


@pytest.mark.parametrize("name", ["none", "qsgd", "int8"])
def test_compression_ratio_without_a_sparsifier_is_refused(name):
    """`--set ratio=0.99` alone would train uncompressed: refused, naming the compressor to set."""
    with pytest.raises(ConfigError) as e:
        load_config(None, [f"algorithm.compression.name={name}", "ratio=0.99"])
    msg = str(e.value)
    assert "no effect" in msg and "compression.name=topk" in msg and "\n" not in msg


def test_hashed_dropout_is_a_result_key_added_at_the_old_default():
    """``model.dropout_noise``: at its default (nn.Dropout) the run ids are those from before the
    key existed; hashed masks are other results, so another id; and a text model, which also
    drops out inside attention, is refused in one line."""
    from lpdt.config import result_dict

    plain = load_config(None, ["model.name=vgg11"])
    assert "dropout_noise" not in result_dict(plain.to_dict())["model"]
    assert load_config(None, ["model.name=vgg11", "model.dropout_noise=generator"]).run_id() == (
        plain.run_id()
    )
    assert load_config(None, ["model.name=vgg11", "model.dropout_noise=hash"]).run_id() != (
        plain.run_id()
    )
    with pytest.raises(ConfigError, match="'model.dropout_noise': hash replaces nn.Dropout"):
        load_config(None, ["model.name=minilm", "model.dropout_noise=hash"])


def test_an_override_of_a_text_key_keeps_its_words():
    """``--set name=2024-01-01`` names the run "2024-01-01" (YAML reads a date, and refused it:
    "expected str"), ``name=042`` "042" (YAML 1.1: the octal 34); keys of other types keep
    YAML's reading, and ``null`` still clears a key that may be null."""
    for text in ("2024-01-01", "042", "42", "1e3", "yes"):
        assert load_config(None, [f"name={text}"]).name == text
    cfg = load_config(None, ["tracking.experiment=2024", "epochs=3", "data.root=null"])
    assert cfg.tracking.experiment == "2024" and cfg.train.epochs == 3 and cfg.data.root is None
    assert load_config(None, {"name": "x"}).name == "x"  # a dict of values is taken as it is


def test_a_config_file_that_is_not_text_is_named(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    with pytest.raises(ConfigError, match=r"c\.yaml' is not text"):
        load_config(p)


def test_print_config_of_several_files_needs_no_out(tmp_path, capsys):
    """``--print-config`` writes nothing, yet two ``-c`` asked for two ``--out``; the configs
    are printed as one YAML stream, a document each."""
    from lpdt.cli import main

    paths = []
    for seed in (1, 2):
        paths += ["-c", str(tmp_path / f"{seed}.yaml")]
        (tmp_path / f"{seed}.yaml").write_text(f"seed: {seed}\n")
    assert main(["train", *paths, "--print-config"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["seed"] for d in docs] == [1, 2]


def test_an_empty_override_of_a_key_that_may_be_null_is_null():
    """``--set data.train_subset=`` is YAML's null, as before: "no subset"."""
    assert (
        load_config(None, ["data.train_subset=100", "data.train_subset="]).data.train_subset is None
    )


def test_the_settings_a_run_does_not_use_are_named_with_why():
    """``unused_settings``: keys away from their defaults that change nothing (each one still
    changes the run id); what a run reads is not listed."""
    from lpdt.config import unused_settings

    def unused(*overrides: str, slot: bool = True) -> list[str]:
        return unused_settings(load_config(overrides=list(overrides)), norm_slot=slot)

    assert unused() == []
    assert unused(
        "precision.weight_bits=4",
        "precision.lp_init=false",
        "model.norm=batchnorm",
        "model.groups=4",
    ) == [
        "precision.weight_bits=4 (precision.mode fp32)",
        "precision.lp_init=False (precision.mode fp32)",
        "model.groups=4 (model.norm batchnorm)",
    ]
    int8 = ("precision.mode=int8", "precision.weight_bits=4")
    assert unused(*int8, "model.norm=batchnorm", "model.groups=4", "model.gn_groups=4") == [
        "model.gn_groups=4 (model.norm batchnorm at 8 bits)"  # 8-bit Range-EvoNorm reads groups
    ]
    assert unused(*int8, "model.norm=rangebn", "model.range_chunks=3") == [
        "model.range_chunks=3 (model.norm rangebn at 8 bits)"
    ]
    assert unused(
        "precision.mode=int8", "precision.act_bits=32", "precision.act_rounding=nearest"
    ) == ["precision.act_rounding=nearest (32-bit activations)"]
    assert unused("model.norm=rangeen", "model.range_act=sigmoid", "model.range_chunks=3") == []
    assert unused("model.norm=rangeen", "model.name=tiny_cnn", slot=False) == [
        "model.norm=rangeen (tiny_cnn has no norm layer)"
    ]
    assert unused("model.pretrained=false", "train.compile_mode=max-autotune") == [
        "model.pretrained=False (image models train from scratch)",
        "train.compile_mode=max-autotune (train.compile false)",
    ]
    assert unused("train.compile=true", "train.compile_mode=max-autotune") == []
    cfg = load_config(overrides=["model.name=resnet8", "model.dropout_noise=hash"])
    assert unused_settings(cfg, dropout=False) == [
        "model.dropout_noise=hash (resnet8 has no dropout layer)"
    ]
    assert unused_settings(cfg, dropout=True) == []


def test_a_key_with_two_letters_swapped_gets_the_key_meant():
    """``sekw`` listed all 70 keys: difflib's ratio for one swap of a short word is 0.75, under
    its cutoff."""
    with pytest.raises(ConfigError, match="'sekw'; did you mean partition.skew?"):
        load_config(None, ["sekw=0.5"])
    with pytest.raises(ConfigError, match="'ecpohs'; did you mean train.epochs?"):
        load_config(None, ["ecpohs=2"])
    with pytest.raises(ConfigError, match="'swke'; allowed keys: "):  # not one swap: no guess
        load_config(None, ["swke=0.5"])
