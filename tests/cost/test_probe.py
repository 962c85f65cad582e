"""The plan's speed probe (lpdt.cost.probe): real steps timed on this machine, the factors and
the line the plan prints."""

import math

import pytest
import torch

from lpdt.cost import probe


def test_speed_factors_reject_bad_timings():
    ref = {"fp32": 10.0, "int8": 25.0}
    with pytest.raises(ValueError, match="same precisions"):
        probe.speed_factors({"fp32": 10.0}, ref)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive number"):
            probe.speed_factors({"fp32": bad, "int8": 25.0}, ref)


def test_the_reference_probe_timings_are_recorded():
    assert probe.speed_factors(probe.PROBE_REF_MS) == {p: 1.0 for p in probe.PROBE_REF_MS}


def test_probe_times_real_steps_and_restores_the_callers_torch_state():
    """A few timed steps of each precision in this process: positive finite ms per step, and the
    caller's torch thread count and random state survive."""
    threads = torch.get_num_threads()
    state = torch.random.get_rng_state()
    measured = probe.probe_speed(1, seconds=0.0, warmup=0, min_steps=2)
    assert set(measured) == set(probe.PROBE_REF_MS)
    assert all(math.isfinite(ms) and ms > 0 for ms in measured.values()), measured
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.random.get_rng_state(), state)
    with pytest.raises(ValueError, match="allowed fp32, int8"):
        probe.probe_step_ms("fp16")
    with pytest.raises(ValueError, match="slots 0"):
        probe.probe_speed(0)


def test_copies_run_in_their_own_processes_and_report_their_mean():
    """Two copies at once (spawned processes, started together at a barrier): every precision
    timed; the 8-bit step costs more than the fp32 one, as on any CPU."""
    measured = probe.probe_speed(2, seconds=0.2, warmup=1, min_steps=3)
    assert set(measured) == set(probe.PROBE_REF_MS)
    assert all(math.isfinite(ms) and ms > 0 for ms in measured.values()), measured
    assert measured["int8"] > measured["fp32"]


def test_steal_share_is_the_hypervisors_share_of_all_cpu_time():
    assert probe.steal_share((10.0, 1000.0), (60.0, 1100.0)) == pytest.approx(0.5)
    assert probe.steal_share(None, (60.0, 1100.0)) == 0.0
    assert probe.steal_share((10.0, 1000.0), (10.0, 1000.0)) == 0.0  # no time passed


def test_the_plan_line_names_copies_factors_and_steal():
    measured = {"fp32": 7.6, "int8": 13.0}
    ref = {"fp32": 3.8, "int8": 13.0}
    line = probe.probe_line(measured, 2, 0.0, ref)
    assert line == (
        "speed probe (2 at once): fp32 7.6 ms/step (reference 3.8, ×2.00), "
        "8-bit 13.0 ms/step (reference 13.0, ×1.00): estimates scaled"
    )
    stolen = probe.probe_line(measured, 2, 0.45, ref)
    assert "the hypervisor took 45% of the CPU: estimates scaled" in stolen


def test_a_copy_that_fails_stops_the_probe_with_its_error():
    """A copy whose steps raise (here: a negative duration) reports its error, and the probe
    raises it at once instead of waiting for the copy's result (the plan then goes on unscaled)."""
    with pytest.raises(RuntimeError, match="failed in a copy: ValueError: min_steps"):
        probe.probe_speed(2, seconds=-1.0)


def test_the_probe_check_finds_the_quick_scales_claim_cells():
    """benchmarks/check_probe.py times the quick scale's fp32 and 8-bit Table 3 claim cells of the
    first seed: those are the ResNet-8 cells the probe stands for."""
    from benchmarks.check_probe import claim_cells

    cells = claim_cells("quick")
    assert sorted(cells) == ["fp32", "int8"]
    for p, run in cells.items():
        assert run.config["precision"]["mode"] == p
        assert run.config["model"]["name"] == probe.PROBE_MODEL
        assert run.config["seed"] == 1234
    with pytest.raises(SystemExit, match="no Table 3 claim cells"):
        claim_cells("smoke")
