"""The plan's wall-time estimate: job packing and the images an evaluation reads."""

import os

import pytest

from lpdt.config import load_config
from lpdt.models import MODELS
from lpdt.plan import probe, runtime


def test_packing_longest_first_on_two_slots():
    assert runtime.packed_wall_seconds([], 2) == 0
    assert runtime.packed_wall_seconds([5, 5, 5, 5], 2) == 10
    # LPT: 7 | 4+3 -> 7 (a naive in-order fill 3+4 | 7 would also give 7; 6,5,4,3: 6+3 | 5+4 = 9)
    assert runtime.packed_wall_seconds([3, 4, 7], 2) == 7
    assert runtime.packed_wall_seconds([3, 4, 5, 6], 2) == 9
    assert runtime.packed_wall_seconds([3, 4, 5, 6], 1) == 18


def _cfg(*extra):
    return load_config(
        None,
        [
            "model.name=resnet20",
            "data.dataset=fashion_mnist",
            "data.image_size=16",
            "data.test_subset=1000",
            "topology.nodes=8",
            "train.epochs=8",
            *extra,
        ],
    ).to_dict()


def test_evaluated_images_full_vs_sharded():
    # eval_every 1000 > epochs: the final evaluation only (lpdt.engine.loop skips the last epoch's
    # own evaluation: the final one, after the last gossip rounds, replaces it)
    full = _cfg("train.eval_every=1000")
    sharded = _cfg("train.eval_every=1000", "train.node_eval=sharded")
    assert runtime.full_eval_images(full) == 1 * 9 * 1000  # 8 nodes + the average model
    assert runtime.full_eval_images(sharded) == 1 * 2 * 1000
    every = _cfg("train.eval_every=1", "train.node_eval=sharded")
    assert runtime.full_eval_images(every) == (7 + 1) * 2 * 1000  # epochs 1-7, then the final
    third = _cfg("train.eval_every=3", "train.node_eval=sharded")
    assert runtime.full_eval_images(third) == (2 + 1) * 2 * 1000  # epochs 3, 6, then the final
    # and the accuracy curve: its subset (train.curve_images) after every epoch
    assert runtime.curve_images(third) == 8 * 500
    assert runtime.evaluated_images(third) == (2 + 1) * 2 * 1000 + 8 * 500
    third["train"]["curve_images"] = 0
    assert runtime.evaluated_images(third) == (2 + 1) * 2 * 1000


def test_evaluated_images_without_a_subset_read_the_full_test_split():
    whole = _cfg("train.eval_every=1000", "train.node_eval=sharded")
    whole["data"]["test_subset"] = None
    assert runtime.full_eval_images(whole) == 1 * 2 * 10000  # Fashion-MNIST's 10,000 test images
    whole["data"]["dataset"] = "x"  # unknown size: counted as 1,000 images
    assert runtime.full_eval_images(whole) == 1 * 2 * 1000


def test_run_seconds_uses_the_measured_cost_and_knows_what_it_does_not_know():
    cfg = _cfg("train.eval_every=1000", "train.node_eval=sharded")
    train_ms, eval_ms = runtime.STEP_MS[("resnet20", "fp32", 16)]
    gossip = runtime.gossip_units(cfg, 48000) * runtime.GOSSIP_NS / 1e9
    images = 2000 + runtime.curve_images(cfg)  # 1 evaluation of the split, and the curve
    expect = runtime.START_S + 48000 * train_ms / 1e3 + images * eval_ms / 1e3 + gossip
    assert runtime.run_seconds(cfg, 48000) == pytest.approx(expect)
    assert runtime.run_seconds(_cfg("data.image_size=24"), 48000) is None  # not measured
    assert runtime.run_seconds(cfg, None) is None


def test_gossip_term_grows_with_nodes_and_entries_and_sparsifiers_cost_more():
    """Many nodes of a large model gossip far more entries than one node computes samples: the
    term the first estimate lacked (VGG-11 on 16 nodes took 3x its estimate)."""
    one = _cfg("topology.nodes=1", "train.final_gossip_rounds=10")
    eight = _cfg("train.final_gossip_rounds=10")
    assert runtime.gossip_units(one, 48000) == 0.0  # a single node does not gossip
    iters = 48000 / (eight["train"]["batch_size"] // 8 * 8)
    assert runtime.gossip_units(eight, 48000) == (iters + 10) * 8 * MODELS.get("resnet20").gossiped
    sparse = _cfg(
        "train.final_gossip_rounds=10",
        "algorithm.compression.name=topk",
        "algorithm.compression.ratio=0.99",
    )
    assert runtime.sparse(sparse) and not runtime.sparse(eight)
    extra = runtime.run_seconds(sparse, 48000) - runtime.run_seconds(eight, 48000)
    assert extra == pytest.approx(runtime.gossip_units(eight, 48000) * runtime.TOPK_NS / 1e9)


def test_gossiped_entries_match_the_models():
    """Every image model's ``ModelSpec.gossiped`` is its parameter count (fp32, 10 classes)."""
    from lpdt.models import build_model

    names = [n for n in MODELS if MODELS.get(n).gossiped and MODELS.get(n).inputs == "image"]
    assert {"resnet20", "resnet54", "vgg11"} <= set(names)
    for name in names:
        model = build_model(load_config(None, [f"model.name={name}"]), 10, (3, 32, 32))
        assert sum(p.numel() for p in model.parameters()) == MODELS.get(name).gossiped, name


def test_h100_estimate_is_the_gpu_price():
    """On the H100 a run's estimate is its price (lpdt.plan.gpu: measured where measured, else
    derived): every paper-scale shape has one, 16 nodes and 8 bits included; runtime's
    ``run_seconds`` prices the CPU only and points there."""
    from lpdt.plan import gpu

    paper = [
        "model.name=resnet20",
        "data.dataset=cifar10",
        "topology.nodes=8",
        "train.batch_size=256",
        "train.epochs=200",
        "train.compile=true",
    ]
    for extra in ([], ["topology.nodes=16"], ["precision.mode=int8", "model.norm=rangeen"]):
        cfg = load_config(None, [*paper, *extra]).to_dict()
        price = gpu.run_price(cfg, 200 * 50000)
        assert price is not None and price.seconds > 0
    with pytest.raises(ValueError, match="lpdt.plan.gpu.run_price"):
        runtime.run_seconds(cfg, 200 * 50000, "h100")
    with pytest.raises(ValueError, match="allowed cpu, h100"):
        runtime.run_seconds(cfg, 1, "tpu")


# -- the speed probe: the reference machine's costs scaled to the machine at hand ---------------


def test_a_machine_twice_as_slow_doubles_the_training_terms():
    """Constructed probe timings: fp32 steps twice as slow, 8-bit ones three times. The 8-bit run's
    training and evaluation terms scale by 3, its start-up, compile and gossip terms by fp32's 2."""
    ref = {"fp32": 10.0, "int8": 25.0}
    speed = probe.speed_factors({"fp32": 20.0, "int8": 75.0}, ref)
    assert speed == {"fp32": 2.0, "int8": 3.0}
    fp32 = _cfg("train.eval_every=1000", "train.node_eval=sharded")
    assert runtime.run_seconds(fp32, 48000, speed=speed) == pytest.approx(
        2 * runtime.run_seconds(fp32, 48000)
    )
    int8 = _cfg("train.eval_every=1000", "train.node_eval=sharded", "precision.mode=int8")
    train_ms, eval_ms = runtime.STEP_MS[("resnet20", "int8", 16)]
    train = 48000 * train_ms / 1e3 + runtime.evaluated_images(int8) * eval_ms / 1e3
    other = runtime.run_seconds(int8, 48000) - train  # start-up + gossip
    assert other > 0
    assert runtime.run_seconds(int8, 48000, speed=speed) == pytest.approx(3 * train + 2 * other)
    compiled = _cfg("train.compile=true", "precision.mode=int8")
    compile_s = runtime.warm_compile_seconds(compiled)
    base = runtime.run_seconds(compiled, 48000)
    # compiled 8-bit steps scale by the tensor operations' factor (int8_ops), never by the
    # eager 8-bit step's (which moves with the quantiser kernel they do not use)
    no_kernel = {"fp32": 1.0, "int8": 1.6, "int8_ops": 2.0}
    scaled = runtime.run_seconds(compiled, 48000, speed=no_kernel)
    # only the compiled per-sample cost and the (compiled) evaluation double; the compile does not
    per_sample = 48000 * runtime.COMPILED_MS[("resnet20", "int8", 16)][0] / 1e3
    evals = runtime.evaluated_images(compiled) * eval_ms / 1e3
    assert scaled - base == pytest.approx(per_sample + evals)
    assert compile_s > 0 and runtime.run_seconds(compiled, 48000, speed=None) == base
    # an eager evaluation (train.compile_eval false) takes the eager 8-bit step's factor
    eager_eval = _cfg("train.compile=true", "train.compile_eval=false", "precision.mode=int8")
    gained = runtime.run_seconds(eager_eval, 48000, speed=no_kernel) - runtime.run_seconds(
        eager_eval, 48000
    )
    assert gained == pytest.approx(
        per_sample + 0.6 * runtime.evaluated_images(eager_eval) * eval_ms / 1e3
    )
    assert runtime.speed_kind("int8", compiled=True) == "int8_ops"
    assert runtime.speed_kind("int8", compiled=False) == "int8"
    assert runtime.speed_kind("fp32", compiled=True) == "fp32"


def test_run_seconds_rejects_a_speed_it_cannot_apply():
    cfg = _cfg("precision.mode=int8")
    with pytest.raises(ValueError, match="no factor for int8"):
        runtime.run_seconds(cfg, 48000, speed={"fp32": 1.0})
    compiled = _cfg("precision.mode=int8", "train.compile=true")
    with pytest.raises(ValueError, match="no factor for int8_ops"):
        runtime.run_seconds(compiled, 48000, speed={"fp32": 1.0, "int8": 1.0})
    with pytest.raises(ValueError, match="prices the CPU"):
        runtime.run_seconds(cfg, 48000, "h100", speed={"fp32": 1.0, "int8": 1.0})


def test_cold_compiles_cost_once_per_compiled_shape(tmp_path):
    a = _cfg("train.compile=true", "precision.mode=int8")
    b = _cfg("train.compile=true", "precision.mode=int8", "seed=7")  # same shape, other seed
    c = _cfg("train.compile=true")  # fp32: another shape
    d = _cfg("train.compile=true", "data.image_size=12")  # another px
    eager = _cfg()
    cold = runtime.cold_compile_seconds({"a": a, "b": b, "c": c, "d": d, "e": eager})
    fp, i8 = (
        sum(runtime.cold_compile_s("resnet20", "fp32")),
        sum(runtime.cold_compile_s("resnet20", "int8")),
    )
    assert cold == {"a": i8, "c": fp, "d": fp}
    # a model with its own measured cold compile; one without falls back to ResNet-20's
    assert runtime.cold_compile_s("resnet8", "int8") == runtime.COLD_COMPILE_S[("resnet8", "int8")]
    assert runtime.cold_compile_s("resnet8", "int8") != runtime.cold_compile_s("resnet20", "int8")
    assert runtime.cold_compile_s("vgg11", "fp32") == runtime.cold_compile_s("resnet20", "fp32")
    r8 = _cfg("train.compile=true", "model.name=resnet8")
    assert runtime.cold_compile_seconds({"r8": r8}) == {
        "r8": sum(runtime.COLD_COMPILE_S[("resnet8", "fp32")])
    }
    # the evaluation compiled or not: another shape, and without the evaluation's compile
    f = _cfg("train.compile=true", "train.compile_eval=false")
    assert runtime.cold_compile_seconds({"c": c, "f": f}) == {
        "c": fp,
        "f": runtime.cold_compile_s("resnet20", "fp32")[0],
    }
    # two job slots: the first two runs of a shape start together and both compile cold
    a2 = _cfg("train.compile=true", "precision.mode=int8", "seed=8")
    two = runtime.cold_compile_seconds({"a": a, "b": b, "a2": a2, "c": c}, slots=2)
    assert two == {"a": i8, "b": i8, "c": fp}
    assert runtime.compile_cache_is_empty(str(tmp_path / "absent"))
    assert runtime.compile_cache_is_empty(str(tmp_path))
    (tmp_path / "fxgraph").mkdir()
    assert not runtime.compile_cache_is_empty(str(tmp_path))


def test_an_eager_evaluation_does_not_pay_the_evaluation_compile():
    both = _cfg("train.compile=true", "precision.mode=int8")
    step_only = _cfg("train.compile=true", "precision.mode=int8", "train.compile_eval=false")
    _, train_s, eval_s = runtime.COMPILED_MS[("resnet20", "int8", 16)]
    assert runtime.warm_compile_seconds(both) == train_s + eval_s
    assert runtime.warm_compile_seconds(step_only) == train_s
    assert runtime.warm_compile_seconds(_cfg()) == 0.0  # eager
    assert runtime.run_seconds(both, 48000) - runtime.run_seconds(step_only, 48000) == (
        pytest.approx(eval_s)
    )


def _benchmarks(tmp_path, **seconds: float):
    """Snakemake benchmark files (a header line, then the wall seconds first) of the given jobs."""
    bench = tmp_path / "bench"
    bench.mkdir()
    for job, s in seconds.items():
        (bench / f"{job}.tsv").write_text(f"s\th:m:s\n{s}\t0:00:00\n")
    return bench


def test_plan_check_compares_finished_jobs_with_their_estimates(tmp_path):
    """Constructed plan table and benchmark files: two of three runs finished, 30 + 60 s against
    40 + 50 s planned; a run without an estimate or with a torn benchmark file is not counted."""
    plan = tmp_path / "plan-quick.tsv"
    plan.write_text(
        "run_id\tmodel\test_s\na\tresnet8\t40\nb\tresnet8\t50\nc\tresnet8\t70\nd\tx\t\n"
    )
    bench = _benchmarks(tmp_path, a=30.0, b=60.0, d=9.0)  # d: no estimate, not counted
    line = runtime.plan_check(plan, bench, since=0.0)
    assert line is not None
    assert line.startswith(
        "training jobs: 2 of the plan's 4 runs ran in this invocation; their own times sum to "
        "90 s against 90 s planned (+0%;"
    )
    (bench / "c.tsv").write_text("s\th:m:s\n")  # torn: not counted
    assert "2 of the plan's 4" in runtime.plan_check(plan, bench, since=0.0)
    (bench / "c.tsv").write_text("s\th:m:s\n140.0\t0:02:20\n")
    assert "230 s against 160 s planned (+44%;" in runtime.plan_check(plan, bench, since=0.0)
    assert runtime.plan_check(tmp_path / "missing.tsv", bench, since=0.0) is None
    assert runtime.plan_check(plan, tmp_path / "nothing", since=0.0) is None


def test_plan_check_counts_only_the_jobs_this_invocation_ran(tmp_path):
    """Benchmark files left by an earlier invocation (a no-op rerun, a plateau_check after the
    pipeline) are not compared with this invocation's plan; none ran: no line."""
    plan = tmp_path / "plan-quick.tsv"
    plan.write_text("run_id\test_s\na\t40\nb\t50\n")
    bench = tmp_path / "bench"
    bench.mkdir()
    for name, secs in (("a", 30.0), ("b", 60.0)):
        (bench / f"{name}.tsv").write_text(f"s\th:m:s\n{secs}\t0:00:00\n")
    start = 1_000_000.0
    os.utime(bench / "a.tsv", (start - 3600, start - 3600))  # yesterday's job
    os.utime(bench / "b.tsv", (start + 60, start + 60))  # ran in this invocation
    line = runtime.plan_check(plan, bench, since=start)
    assert line is not None and "1 of the plan's 2 runs" in line and "60 s against 50 s" in line
    os.utime(bench / "b.tsv", (start - 60, start - 60))
    assert runtime.plan_check(plan, bench, since=start) is None


def test_plan_check_counts_a_batch_as_one_job_of_its_runs(tmp_path):
    """A batch of runs (column ``job``) is one benchmark file: its runs' estimates add up."""
    plan = tmp_path / "plan-quick.tsv"
    plan.write_text(
        "run_id\tjob\test_s\na\tseeds-a\t40\nb\tseeds-a\t20\nc\tc\t30\ne\tseeds-e\t10\nf\tseeds-e\t\n"
    )
    # seeds-e: a batch with a run without an estimate, not counted
    bench = _benchmarks(tmp_path, **{"seeds-a": 66.0, "c": 27.0, "seeds-e": 5.0})
    line = runtime.plan_check(plan, bench, since=0.0)
    assert line is not None and line.startswith(
        "training jobs: 3 of the plan's 5 runs ran in this invocation; their own times sum to "
        "93 s against 90 s planned (+3%;"
    )


def test_a_run_after_the_first_of_a_batch_pays_neither_start_up_nor_compile():
    compiled = _cfg("model.name=resnet8", "data.image_size=12", "train.compile=true")
    first = runtime.run_seconds(compiled, 48000)
    later = runtime.run_seconds(compiled, 48000, in_batch=True, graph_compiled=True)
    saved = runtime.START_S - runtime.BATCHED_START_S + runtime.warm_compile_seconds(compiled)
    assert first - later == pytest.approx(saved) and saved > runtime.START_S - 2.5
    # another graph of the batch's process: compiled once more
    other = runtime.run_seconds(compiled, 48000, in_batch=True)
    assert other - later == pytest.approx(runtime.warm_compile_seconds(compiled))


@pytest.mark.parametrize("machine", ["cpu", "h100"])
def test_a_plan_of_runs_none_of_which_has_a_cost_says_so(tmp_path, capsys, machine):
    """The smoke scale's tiny models have no measured cost on either machine: the plan printed
    "0 training jobs for 0 runs, 32 of them in 2 batches" and "~0 min" (CPU), or "~0 GPU-hours
    (range 0-0)" with every lever at ~0 (H100). It says that nothing could be priced."""
    from pathlib import Path

    from lpdt import grid
    from lpdt.plan.table import write_plan

    root = Path(__file__).resolve().parents[2]
    runs = grid.expand(grid.load(root / "config/studies.yaml", root / "config/scales/smoke.yaml"))
    batches = {"b0": sorted(runs)[:2]}
    config = {"plan_machine": machine, "plan_probe": False}
    write_plan(runs, batches, config, "smoke", tmp_path / "plan.tsv")
    out = capsys.readouterr().out
    assert "GPU-hours" not in out and "training jobs for" not in out, out
    said = "can be priced on" if machine == "h100" else "has a measured cost on"
    assert f"none of {'its ' if machine == 'h100' else 'the '}{len(runs)} runs {said}" in out
    assert (tmp_path / "plan.tsv").is_file()
