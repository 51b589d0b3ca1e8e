"""The GPU's reachable rates (``physics.limits``): the power-capped tensor rate and the SM-fed DRAM rate only
lengthen unmeasured op times, keep them non-decreasing in sizes, and leave measured kernels as measured."""

from __future__ import annotations

import numpy as np
import pytest

from components.deployments.answer import answer_deployments
from components.deployments.bench_pipeweave import bounded, compose_pipeweave, fit_limits
from components.deployments.compose import BATCH
from components.deployments.config import Deployment, model_shape
from components.deployments.data import read_pipeweave_runs
from components.deployments.op_limits import limited
from components.deployments.ops import roofline_op_time, sol_split
from components.devices import load_catalog
from components.physics.limits import GpuLimits, sm_bytes_per_clock, sm_clocks, tensor_energy
from components.platform.config import DEFAULT_DATASETS_DIR

DATA = DEFAULT_DATASETS_DIR


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_energy_is_the_lowest_per_design_and_feed_the_most_streamed() -> None:
    watts = tensor_energy(
        np.array(["8.9", "8.9", "9.0"]),
        np.array([300.0, 275.0, 700.0]),
        np.array([181.0, 119.5, 989.0]),
        np.array([50.0, 80.0, 60.0]),  # tensor work at the datasheet peak (us)
        np.array([100.0, 100.0, 100.0]),  # the measured step (us)
    )
    # 300 W / (181 x 0.5) = 3.31; 275 W / (119.5 x 0.8) = 2.88: the lower of the design's two
    assert watts == pytest.approx({"8.9": 275.0 / (119.5 * 0.8), "9.0": 700.0 / (989.0 * 0.6)})
    # the most streamed per SM-clock of any step, for each SM design the steps cover
    feed = sm_bytes_per_clock(
        np.array(["9.0", "9.0", "8.9"]),
        np.array([3350.0, 4000.0, 864.0]),  # DRAM GB/s
        np.array([261.4, 154.4, 350.0]),  # SMs x GHz
        np.array([70.0, 45.0, 90.0]),  # the step's bytes at the datasheet rate (us)
        np.array([100.0, 100.0, 100.0]),  # the measured step (us)
    )
    most = 4000.0 * 0.45 / 154.4
    assert feed == pytest.approx({"9.0": most, "8.9": most})


def test_sm_feed_leaves_a_design_nobody_measured_uncapped(catalog) -> None:
    """The old rule carried the figure (the most any GPU streamed per SM-clock) to every design: fitted on
    Hopper steps it held a Blackwell B200 at 3.5 of its 8 TB/s. What an SM keeps in flight per memory latency
    (Little's law) is a property of its SM and memory design: a design no step measured is not capped, and a
    measured GPU is never held below what its own steps streamed."""
    h100, h20, a100, b200, b300 = (
        catalog.resolve(g) for g in ("h100-sxm", "h20", "a100-sxm4-80gb", "b200", "b300")
    )
    designs = np.array(["9.0", "9.0", "9.0", "9.0"])
    dram = np.array([h100.dram_gbps, h100.dram_gbps, h20.dram_gbps, h20.dram_gbps], float)
    clocks = np.array([sm_clocks(h100), sm_clocks(h100), sm_clocks(h20), sm_clocks(h20)])
    share = np.array([0.70, 0.64, 0.47, 0.41])  # decode steps' bytes at the datasheet rate / step time
    limits = GpuLimits({}, sm_bytes_per_clock(designs, dram, clocks, share * 100.0, np.full(4, 100.0)))
    for spec in (b200, b300, a100):  # Blackwell (10.0, 10.3) and Ampere (8.0): no Hopper figure carried
        assert limits.dram_slowdown(spec) == 1.0
        assert not any(n.startswith("SM feed") for n in limits.notes(spec))
    assert limits.dram_slowdown(h20) > 1.5  # the starved H20 stays held at what Hopper SMs streamed
    for spec, s in ((h100, share[:2]), (h20, share[2:])):  # never below what its own steps streamed
        assert float(spec.dram_gbps) / limits.dram_slowdown(spec) >= float(spec.dram_gbps) * s.max()


def test_bound_lengthens_unmeasured_ops_only_and_stays_monotone(catalog) -> None:
    l40, h20, a100 = (catalog.resolve(g) for g in ("l40", "h20", "a100-sxm4-80gb"))
    limits = GpuLimits({"8.9": 2.9, "9.0": 1.1}, {"9.0": 16.0}, "test")
    assert limits.tensor_slowdown(l40) == pytest.approx(181.0 * 2.9 / 300.0, rel=0.05)
    assert limits.tensor_slowdown(a100) == 1.0  # no energy for its design: not capped
    assert limits.dram_slowdown(h20) > 1.5 and limits.dram_slowdown(l40) == 1.0  # no feed learned for 8.9
    sizes = np.geomspace(16, 16384, 12)
    shape = {"M": sizes, "N": np.full(12, 5120.0), "K": np.full(12, 5120.0)}
    for spec in (l40, h20, a100):
        plain = roofline_op_time("gemm", "bf16", shape, spec)
        floor, tensor_us, memory_us, _ = sol_split("gemm", "bf16", shape, spec)
        bounded = limits.bound(plain, tensor_us, memory_us, spec)
        assert (bounded >= plain).all() and (bounded >= floor).all()  # never below the roofline
        assert (np.diff(bounded) >= 0).all()  # non-decreasing in M
        flops = 2 * sizes * 5120.0 * 5120.0
        weights = 2.0 * 5120.0 * 5120.0  # bf16 bytes every row reads at least: no DRAM rate above the peak
        assert (weights / (bounded * 1e-6) <= float(spec.dram_gbps) * 1e9 * (1 + 1e-9)).all()
        assert (flops / (bounded * 1e-6) <= spec.peak_tflops.bf16_tensor * 1e12 * (1 + 1e-9)).all()
        # the roofline's own rows: tensor work at the reachable rate in place of the fixed efficiency
        swapped = limits.bound(
            plain, tensor_us, memory_us, spec, False, sol_split("gemm", "bf16", shape, spec)[3]
        )
        assert (swapped >= floor).all() and (np.diff(swapped) >= 0).all()
        assert (flops / (swapped * 1e-6) <= spec.peak_tflops.bf16_tensor * 1e12 * (1 + 1e-9)).all()
        measured = np.ones(12, bool)
        assert np.array_equal(limits.bound(plain, tensor_us, memory_us, spec, measured), plain)
    plain = roofline_op_time("gemm", "bf16", shape, l40)
    _, tensor_us, memory_us, _ = sol_split("gemm", "bf16", shape, l40)
    assert limits.bound(plain, tensor_us, memory_us, l40)[-1] > plain[-1]  # the L40 is power-bound at scale
    assert any(n.startswith("power cap") for n in limits.notes(l40))
    assert not any(n.startswith("power cap") for n in limits.notes(a100))
    assert any(n.startswith("SM feed") for n in limits.notes(h20))
    assert GpuLimits.from_json(limits.to_json()) == limits and not GpuLimits()
    # constants written when the feed was one figure: it holds the designs the same steps measured (those with
    # an energy) only; a figure that is not a number is refused by name
    old = GpuLimits.from_json({"watts_per_tflops": {"9.0": 1.1}, "bytes_per_sm_clock": 12.1})
    assert old.bytes_per_sm_clock == {"9.0": 12.1} and old.dram_slowdown(h20) > 1.5
    assert old.dram_slowdown(catalog.resolve("b200")) == 1.0
    with pytest.raises(ValueError, match="bytes_per_sm_clock"):
        GpuLimits.from_json({"bytes_per_sm_clock": "fast"})
    with pytest.raises(ValueError, match="watts_per_tflops"):
        GpuLimits.from_json({"watts_per_tflops": {"9.0": "high"}})


@pytest.mark.skipif(not (DATA / "pipeweave" / "config").is_dir(), reason="public datasets not present")
def test_reachable_rates_bound_the_product_op_times_as_the_bench_does(catalog):
    """One place: an op-time function carrying the limits (what ``predict --llm`` composes with) gives the
    very step times the bench's fold re-bounds, and a deployment answer states the limit where it binds."""
    runs = read_pipeweave_runs(DATA)
    runs = runs[runs["gpu"].isin(["L20", "RTX_6000_Ada", "L40", "H20", "H100"])]
    composed = compose_pipeweave(runs, catalog, DATA)
    limits = fit_limits(composed[composed["gpu"] != "L40"])
    product = compose_pipeweave(runs, catalog, DATA, limited(roofline_op_time, limits))
    folded = bounded(composed, limits)
    for phase in ("prefill", "decode"):
        assert np.allclose(product[f"{phase}_kernels_us"], folded[f"{phase}_kernels_us"], rtol=1e-9)
    l40 = Deployment(
        model=model_shape("Qwen2.5-14B", DATA), gpu=catalog.resolve("l40"), isl=1024, osl=64, concurrency=8
    )
    plain, capped = (
        answer_deployments([l40], fn, workload=BATCH)[0]
        for fn in (roofline_op_time, limited(roofline_op_time, limits))
    )
    assert capped.ttft_ms > plain.ttft_ms
    assert any(n.startswith("power cap: NVIDIA L40") for n in capped.notes)
    assert not any(n.startswith("power cap") for n in plain.notes)


def test_production_op_times_carry_the_limits_kept_as_data(tmp_path, monkeypatch) -> None:
    """``predict --llm`` / ``rank --llm`` compose with the limits ``engines/constants.json`` holds (learned on
    every PipeWeave run by ``fit_constants --limits``); a model's own constants file carries its own."""
    import json

    from components.deployments import ops
    from components.deployments.engines.base import CONSTANTS_FILE
    from components.deployments.op_limits import LIMITS_KEY, limits_of, production_limits

    kept = production_limits()
    assert kept.watts_per_tflops and kept.bytes_per_sm_clock and "PipeWeave runs on" in kept.source
    assert "10.0" not in kept.bytes_per_sm_clock  # no PipeWeave run on a Blackwell datacenter GPU
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(ops, "_PRODUCTION", {})
    assert limits_of(ops.production_op_time()[0]) == kept
    data = json.loads(CONSTANTS_FILE.read_text())
    data["framework"][LIMITS_KEY] = {"watts_per_tflops": {"8.9": 9.0}, "bytes_per_sm_clock": {}}
    own = tmp_path / "constants.json"
    own.write_text(json.dumps(data))
    assert production_limits(own) == GpuLimits({"8.9": 9.0}, {}, "")
