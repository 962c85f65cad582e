"""The eager quantiser kernel (``lpdt.layers.quant.kernel``): it builds here, ``quantize`` runs it
eagerly and gives the tensor operations' bits, a compiled graph never calls it, and a machine
that cannot build it gets a warning and the tensor operations."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from lpdt.layers.quant import kernel, quantize, quantize_minmax


def _tensor_ops(monkeypatch: pytest.MonkeyPatch, *args, fn=quantize) -> torch.Tensor:
    """``fn(*args)`` with the kernel turned off: the reference."""
    with monkeypatch.context() as m:
        m.setenv(kernel.ENV, "0")
        return fn(*args)


def _counting_load(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Count the calls of ``kernel.load`` that return the kernel (``quantize`` asks for it each
    time it would run it)."""
    calls: list[bool] = []
    real = kernel.load

    def load():
        k = real()
        calls.append(k is not None)
        return k

    monkeypatch.setattr(kernel, "load", load)
    return calls


def _inputs(case: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(8, 16, 12, 12, generator=g) * 3
    lo, hi = x.amin(), x.amax()
    if case == "range [1], values outside it":  # a batch range: both clamps are exercised
        lo, hi = torch.tensor([-1.0]), torch.tensor([1.5])
    elif case == "channels-last":
        x = x.to(memory_format=torch.channels_last)
    elif case == "transposed":
        x = torch.randn(37, 53, generator=g).t()
    elif case == "odd length":  # the vectorised loop's tail
        x = torch.randn(70_001, generator=g)
        lo, hi = x.amin(), x.amax()
    elif case == "constant":  # hi == lo: the minimum step
        x = torch.full((5, 7), 0.25)
        lo, hi = x.amin(), x.amax()
    elif case == "zero-dimensional":
        x = torch.tensor(0.3)
        lo, hi = torch.tensor([-1.0]), torch.tensor([1.0])
    elif case == "nan and infinities":
        x = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.5, -0.5])
        lo, hi = torch.tensor(-1.0), torch.tensor(1.0)
    return x, lo, hi


CASES = [
    "per-tensor range",
    "range [1], values outside it",
    "channels-last",
    "transposed",
    "odd length",
    "constant",
    "zero-dimensional",
    "nan and infinities",
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("stochastic", [True, False])
@pytest.mark.parametrize("bits", [8, 2])
def test_kernel_gives_the_tensor_operations_bits(monkeypatch, case, stochastic, bits):
    """Bit for bit, NaN where the tensor operations give NaN, and the same shape."""
    calls = _counting_load(monkeypatch)
    x, lo, hi = _inputs(case)
    seed = torch.tensor([20261126])
    got = quantize(x, lo, hi, bits, stochastic, seed, 11)
    assert calls == [True], "quantize did not run the kernel (it needs g++: make setup)"
    want = _tensor_ops(monkeypatch, x, lo, hi, bits, stochastic, seed, 11)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize(
    "values",
    [
        torch.randn(4, 3, 5, 5, generator=torch.Generator().manual_seed(1)),  # a weight
        torch.randn(70_001, generator=torch.Generator().manual_seed(2)) * 1e-3,  # a gradient
        torch.full((6,), -0.5),  # constant: the minimum step
        torch.tensor(2.0),  # zero-dimensional
        torch.tensor([1.0, float("nan"), 3.0]),  # the range is NaN, as amin / amax give it
    ],
    ids=["weight", "gradient", "constant", "zero-dimensional", "nan"],
)
@pytest.mark.parametrize("stochastic", [True, False])
def test_minmax_kernel_gives_the_tensor_operations_bits(monkeypatch, values, stochastic):
    """``quantize_minmax`` (weights: nearest; gradients: stochastic) takes the range and rounds
    in one kernel call: the same bits and shape as amin / amax and the tensor operations."""
    calls = _counting_load(monkeypatch)
    seed = torch.tensor([77])
    got = quantize_minmax(values, 8, stochastic, seed, 3)
    assert calls == [True]
    want = _tensor_ops(monkeypatch, values, 8, stochastic, seed, 3, fn=quantize_minmax)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def test_the_step_is_rounded_as_the_tensor_operations_round_it(monkeypatch):
    """The kernel computes the step max((hi - lo) / levels, 1e-8) itself, in float32: over
    ranges of every magnitude (some below the minimum step) it rounds as the tensors do."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(257, generator=g)
    for _ in range(300):
        lo = torch.randn(1, generator=g) * 10.0 ** float(torch.randint(-9, 4, (1,), generator=g))
        hi = lo + torch.rand(1, generator=g) * 10.0 ** float(
            torch.randint(-9, 4, (1,), generator=g)
        )
        xs = lo + (hi - lo) * x
        for stochastic in (True, False):
            got = quantize(xs, lo, hi, 8, stochastic, torch.tensor([1]), 0)
            want = _tensor_ops(monkeypatch, xs, lo, hi, 8, stochastic, torch.tensor([1]), 0)
            assert torch.equal(got, want), (lo.item(), hi.item())


def test_kernel_draws_a_fresh_seed_like_the_tensor_operations(monkeypatch):
    """``seed=None`` draws one seed from torch's generator, as the tensor operations do: the same
    generator state gives the same noise, and the generator advances alike."""
    x = torch.randn(300)
    lo, hi = torch.tensor(-2.0), torch.tensor(2.0)
    torch.manual_seed(3)
    got = quantize(x, lo, hi, 8, True)
    after_kernel = torch.rand(1)
    torch.manual_seed(3)
    want = _tensor_ops(monkeypatch, x, lo, hi, 8, True)
    assert torch.equal(got, want)
    assert torch.equal(torch.rand(1), after_kernel)


def test_compiled_graphs_and_gradients_keep_the_tensor_operations(monkeypatch):
    """While torch.compile traces, and for an input that needs a gradient, ``quantize`` does not
    ask for the kernel (inductor fuses the tensor operations itself; the kernel has no
    backward)."""
    calls = _counting_load(monkeypatch)
    lo, hi, seed = torch.tensor(-1.0), torch.tensor(1.0), torch.tensor([5])

    def f(x):
        return quantize(x, lo, hi, 8, True, seed, 2)

    x = torch.randn(64)
    compiled = torch.compile(f, backend="eager", fullgraph=True)(x)
    assert calls == []
    assert torch.equal(compiled, f(x))  # the eager call runs the kernel: the same bits
    assert calls == [True]
    w = torch.randn(64, requires_grad=True)
    quantize(w, lo, hi, 8, True, seed, 2)
    assert calls == [True]


def test_without_a_compiler_a_warning_and_the_same_values(tmp_path):
    """A machine that cannot build the kernel (here: no compiler on PATH) warns once and
    quantises with the tensor operations; ``LPDT_QUANT_KERNEL=0`` is silent. Each process has a
    build directory of its own, with no library built in it."""
    code = textwrap.dedent(
        """
        import os, warnings
        import torch
        from lpdt.layers.quant import kernel, quantize, quantize_minmax
        x, lo, hi, seed = torch.randn(1000), torch.tensor(-1.0), torch.tensor(1.0), torch.tensor([9])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            a = quantize(x, lo, hi, 8, True, seed, 4)
            b = quantize(x, lo, hi, 8, True, seed, 4)
        print(len(caught), kernel.load() is None, a.sum().item() == b.sum().item())
        print(str(caught[0].message) if caught else "")
        """
    )
    env = dict(os.environ, PATH="/nonexistent", TORCH_EXTENSIONS_DIR=str(tmp_path / "a"))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    first, message = out.stdout.splitlines()[:2]
    assert first == "1 True True"
    assert "'c++' is not on PATH" in message and kernel.ENV in message
    assert not list(tmp_path.rglob(kernel.LIBRARY))
    env = dict(env, TORCH_EXTENSIONS_DIR=str(tmp_path / "b"), **{kernel.ENV: "0"})
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[0] == "0 True True"


def test_a_compiler_that_fails_leaves_no_library(monkeypatch, tmp_path):
    """A compiler that fails (``CXX=false``): the build raises with the compiler's name and
    leaves neither the library nor its partial file (``load`` turns this into the warning
    above)."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "false")
    with pytest.raises(RuntimeError, match="false failed"):
        kernel.build()
    left = [p.name for p in kernel.build_dir().iterdir()]
    assert "kernel.cpp" in left and not [n for n in left if n.startswith(kernel.LIBRARY)], left


def _in_a_process(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_build_directory_names_the_compiler_the_flags_and_the_source(monkeypatch, tmp_path):
    """The build directory names what the binary depends on: another compiler, other flags or
    another source text get another directory (and another lock); another torch version does
    not (nothing of torch is compiled in)."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    here = kernel.build_dir()
    assert here.parent == tmp_path / kernel.NAME
    with monkeypatch.context() as m:
        m.setattr(torch, "__version__", "2.11.0")
        assert kernel.build_dir() == here
    with monkeypatch.context() as m:
        m.setattr(kernel, "CFLAGS", [*kernel.CFLAGS, "-march=native"])
        assert kernel.build_dir() != here
    with monkeypatch.context() as m:
        m.setenv("CXX", "clang++")
        assert kernel.build_dir() != here
    edited = tmp_path / "kernel.cpp"
    edited.write_bytes(kernel.SOURCE.read_bytes() + b"\n// edited\n")
    monkeypatch.setattr(kernel, "SOURCE", edited)
    assert kernel.build_dir() != here


@pytest.mark.slow  # a build of the kernel: 4 s of the default suite (2026-12-01)
def test_checkouts_of_the_same_source_share_one_build(monkeypatch, tmp_path):
    """The build directory is keyed by the source's text, not its path: built from another
    checkout's copy of ``kernel.cpp`` (here, in this process), the library is what a process of
    this checkout loads without compiling (no compiler on its PATH) and runs."""
    clone = tmp_path / "clone" / "kernel.cpp"
    clone.parent.mkdir()
    clone.write_bytes(kernel.SOURCE.read_bytes())
    with monkeypatch.context() as m:
        m.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
        m.setattr(kernel, "SOURCE", clone)
        built = kernel.build()
    assert built.name == kernel.LIBRARY and (built.parent / "kernel.cpp").read_bytes() == (
        clone.read_bytes()
    )
    code = """
        import torch
        from lpdt.layers.quant import kernel
        k = kernel.load()
        x = torch.randn(100)
        q = k.quantize(x, x.amin(), x.amax(), 255.0, 1e-8, True, 7)
        print(bool((q - x).abs().max() <= (x.amax() - x.amin()) / 255), kernel.build_dir())
        """
    out = _in_a_process(code, {"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"), "PATH": "/x"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", str(built.parent)], out.stdout


@pytest.mark.slow  # a second process importing torch: 5 s of the default suite (2026-12-01)
def test_a_held_build_lock_is_waited_on_for_a_bounded_time(monkeypatch, tmp_path):
    """Another process holds the build directory (a build that hangs): this one waits
    ``LPDT_QUANT_BUILD_WAIT`` seconds, not for ever, then warns once, naming the lock and the
    wait, and quantises with the tensor operations."""
    from filelock import FileLock

    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path), kernel.WAIT_ENV: "0.5"}
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    where = kernel.build_dir()  # the same in the process below: the same compiler and source
    os.makedirs(where)
    code = """
        import time, warnings
        import torch
        from lpdt.layers.quant import kernel, quantize
        x, lo, hi = torch.randn(100), torch.tensor(-1.0), torch.tensor(1.0)
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            a = quantize(x, lo, hi, 8, True, torch.tensor([3]), 1)
            b = quantize(x, lo, hi, 8, True, torch.tensor([3]), 1)
        print(f"{time.perf_counter() - t0:.2f}", len(caught), kernel.load() is None,
              torch.equal(a, b))
        print(caught[0].message if caught else "")
        """
    with FileLock(os.path.join(where, kernel.LOCK)):  # held by this (another) process
        out = _in_a_process(code, env)
    assert out.returncode == 0, out.stderr[-2000:]
    (took, *rest), message = out.stdout.splitlines()[0].split(), out.stdout.splitlines()[1]
    assert rest == ["1", "True", "True"], out.stdout
    assert float(took) < 30, took  # 0.5 s of waiting, not an unbounded wait
    assert "BuildWaitTimeout" in message and kernel.LOCK in message and "0.5 s" in message


def test_a_killed_build_leaves_nothing_that_loads(monkeypatch, tmp_path):
    """A build killed halfway leaves its partial file under a name of its own: the next build
    makes the library (the partial file is not it), which loads and quantises."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    where = kernel.build_dir()
    where.mkdir(parents=True)
    (where / f"{kernel.LIBRARY}.12345.partial").write_bytes(b"half a library")
    built = kernel.build()
    assert built == where / kernel.LIBRARY
    k = kernel.Kernel(ctypes.CDLL(str(built)))
    x = torch.randn(10)
    q = k.quantize(x, x.amin(), x.amax(), 255.0, 1e-8, False, 0)
    assert torch.equal(q, _tensor_ops(monkeypatch, x, x.amin(), x.amax(), 8, False))


def test_a_bad_build_wait_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setenv(kernel.WAIT_ENV, "soon")
    with pytest.raises(ValueError, match=f"{kernel.WAIT_ENV}='soon'"):
        kernel.build()
