"""Each serving engine's steps timed with its own kernels (``stepmodel.build_step_models`` asks an op-time
function's ``for_framework``), and the leave-one-GPU-out bench never lets a held-out GPU's runs choose its
own constants."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from components.deployments.bench_engines import N_COST, Simulated, leave_one_gpu_out
from components.deployments.config import Deployment, model_shape
from components.deployments.ops import roofline_op_time
from components.deployments.stepmodel import build_step_models
from components.devices import load_catalog
from tests.unit.test_deployments import LLAMA8B

FACTOR = {"vllm": 2.0, "sglang": 1.0, "trtllm": 1.0}  # vLLM's kernels twice the others' (a synthetic store)


def _per_framework_op_time():
    """The roofline op times, scaled per serving framework (what an op engine's framework tables give)."""

    def scaled(factor: float):
        def op_time(family, dtype, shape, spec, kv_dtype=None):
            return roofline_op_time(family, dtype, shape, spec, kv_dtype) * factor

        return op_time

    base = scaled(1.0)
    base.for_framework = lambda name: scaled(FACTOR[name])  # type: ignore[attr-defined]
    return base


def test_each_engines_steps_come_from_its_own_op_times() -> None:
    catalog = load_catalog()
    model = model_shape(json.dumps(LLAMA8B))
    common = {"model": model, "gpu": catalog.resolve("h100-sxm"), "isl": 1024, "osl": 128, "concurrency": 8}
    deployments = [Deployment(**common, framework=name) for name in ("vllm", "trtllm", "vllm")]
    steps = build_step_models(deployments, _per_framework_op_time())
    vllm, trt = steps[0], steps[1]
    assert steps[2] is vllm  # one step model per (deployment, engine), shared by equal ones
    for n, ctx in ((1, 1024.0), (33, 2048.0), (256, 4096.0)):
        assert vllm.decode_us(n, ctx) == pytest.approx(2.0 * trt.decode_us(n, ctx), rel=1e-9)
    shared = build_step_models(deployments, roofline_op_time)  # a plain op time: the engines share grids
    assert shared[0] is shared[1]
    assert shared[0].decode_us(33, 2048.0) == pytest.approx(trt.decode_us(33, 2048.0), rel=1e-9)


def _simulated(seed: int, scale_h200: float = 1.0) -> Simulated:
    rng = np.random.default_rng(seed)
    n = 40
    devices = np.array(["h100-sxm", "h200"] * (n // 2))
    runs = pd.DataFrame(
        {
            "id": [f"r{i}" for i in range(n)],
            "engine": "vllm",
            "device_id": devices,
            "model_path": "m",
            "mode": "agg",
            "ttft_us": rng.uniform(1e4, 1e5, n) * np.where(devices == "h200", scale_h200, 1.0),
            "tpot_us": rng.uniform(1e3, 1e4, n) * np.where(devices == "h200", scale_h200, 1.0),
        }
    )
    # two settings candidates (the engine's defaults, AIConfigurator's benchmark settings): chosen on the
    # training GPU's runs like the step cost
    keys = [(0.0, "defaults"), (0.0, "aiconfigurator")]
    ttft_x = {k: np.random.default_rng(1 + 2 * j).uniform(10.0, 1e4, (n, N_COST)) for j, k in enumerate(keys)}
    tpot_x = {k: np.random.default_rng(2 + 2 * j).uniform(1.0, 1e3, (n, N_COST)) for j, k in enumerate(keys)}
    return Simulated(runs, ttft_x, {k: np.zeros(n) for k in keys}, tpot_x)


def test_a_held_out_gpus_runs_never_choose_its_constants() -> None:
    """The H200's predictions are the same whatever its measured runs say; the H100's are not."""
    base, _ = leave_one_gpu_out(_simulated(0))
    moved, _ = leave_one_gpu_out(_simulated(0, scale_h200=3.0))
    h200 = (base["device_id"] == "h200").to_numpy()
    for column in ("ttft_pred_us", "tpot_pred_us"):
        np.testing.assert_array_equal(base.loc[h200, column], moved.loc[h200, column])
        assert not np.allclose(base.loc[~h200, column], moved.loc[~h200, column])


def test_a_decode_batch_runs_at_the_engines_next_captured_cuda_graph_size() -> None:
    from components.deployments.engines.registry import engine_for

    catalog = load_catalog()
    h100 = catalog.resolve("h100-sxm")
    vllm, sglang, trt = (engine_for(name, h100, fitted=False) for name in ("vllm", "sglang", "trtllm"))
    assert [vllm.graph_batch(n) for n in (1, 3, 33, 250, 257, 512, 513)] == [1, 4, 40, 256, 272, 512, 513]
    assert [sglang.graph_batch(n) for n in (9, 13, 33, 256, 257)] == [12, 16, 40, 256, 257]
    assert trt.graph_batch(33) == 33  # enable_padding is off by default
    d = Deployment(model=model_shape(json.dumps(LLAMA8B)), gpu=h100, isl=1024, osl=128, concurrency=33)
    step = build_step_models([d], roofline_op_time)[0]
    alone, padded, forty = (
        step.decode_us(33, 2048.0),
        step.decode_us(33, 2048.0, 40),
        step.decode_us(40, 2048.0),
    )
    assert alone < padded < forty  # the GEMMs at 40 rows, the attention of the 33 real sequences only


def test_the_engines_share_the_step_cost_and_keep_their_own_front_end() -> None:
    """The kernel scales and per-step terms are fitted on every engine's training runs, the front end's TTFT
    terms (request_us, per_client_us) on each engine's own; an engine absent from the training GPU takes the
    shared fit whole."""
    from components.deployments.bench_engines import FRONT, fit_engine, fit_engines

    sim = _simulated(0)
    sim.runs["engine"] = ["vllm", "sglang"] * (len(sim.runs) // 2)
    sglang = (sim.runs["engine"] == "sglang").to_numpy()
    key = next(iter(sim.ttft_x))
    slow = sim.ttft_x[key][:, FRONT] @ np.array([5e4, 0.0])  # sglang's front end: 50 ms more per request
    sim.runs.loc[sglang, "ttft_us"] = sim.runs.loc[sglang, "ttft_us"].to_numpy() + slow[sglang]
    h100 = (sim.runs["device_id"] == "h100-sxm").to_numpy()
    fits = fit_engines(sim, h100)
    (_, vllm, _), (_, sg, _) = fits["vllm"], fits["sglang"]
    np.testing.assert_array_equal(vllm[: FRONT.start], sg[: FRONT.start])
    assert not np.allclose(vllm[FRONT], sg[FRONT])
    only_vllm = h100 & ~sglang
    alone = fit_engines(sim, only_vllm)
    _, shared, _ = fit_engine(sim, only_vllm)
    assert alone["sglang"][2] == {}
    np.testing.assert_array_equal(alone["sglang"][1], shared)
