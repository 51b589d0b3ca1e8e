"""The serving-engine simulation: engines as a seam, the scheduler's queueing, speed, linearity in the step
cost, and physics on every answer (roofline op times: no GPU, no trained engine needed)."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import numpy as np
import pytest

from components.deployments.answer import answer_deployments
from components.deployments.compose import weight_bytes_per_gpu
from components.deployments.config import Deployment, DeploymentError, model_shape
from components.deployments.engines.base import POLICIES, StepCost
from components.deployments.engines.registry import ENGINES, engine_for
from components.deployments.ops import roofline_op_time
from components.deployments.serve import kv_capacity, simulate_deployment
from components.deployments.simulate import BATCH, RATE, Workload, simulate, theta
from components.deployments.stepmodel import build_step_models
from components.devices import load_catalog
from components.platform.config import DEFAULT_DATASETS_DIR
from tests.unit.test_deployments import LLAMA8B

MOE = {
    "architectures": ["MixtralForCausalLM"],
    "num_hidden_layers": 16,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 32000,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
}


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def _deploy(catalog, gpu: str, config=LLAMA8B, **kw) -> Deployment:
    return Deployment(model=model_shape(json.dumps(config)), gpu=catalog.resolve(gpu), **kw)


def test_every_engine_has_documented_defaults_and_a_clear_error(catalog):
    spec = catalog.resolve("h100-sxm")
    for name in ENGINES:
        engine = engine_for(name, spec)
        settings = engine.settings()
        assert settings["name"] == name and engine.policy in POLICIES
        assert 0.5 < engine.memory_fraction <= 0.95 and engine.max_num_batched_tokens >= 2048
    assert engine_for("tensorrt-llm", spec).name == "trtllm"
    with pytest.raises(DeploymentError, match=r"framework 'tgi': unknown serving engine; choose vllm"):
        engine_for("tgi", spec)
    with pytest.raises(DeploymentError, match="framework"):
        _deploy(catalog, "h100-sxm", isl=8, osl=8, framework="tgi")


def test_closed_loop_queues_when_the_kv_cache_holds_fewer_than_the_clients(catalog):
    """Qwen3-32B on one H100 at C = 16: TTFT grows with OSL (a queue, not a kernel). Same here: Llama-8B on
    an L4 whose KV cache holds ~27 of 64 requests."""
    ttft = []
    for osl in (128, 256):
        d = _deploy(catalog, "l4", isl=1024, osl=osl, concurrency=64)
        engine = engine_for("vllm", d.gpu, fitted=False)
        kv, _ = kv_capacity(d, engine)
        assert kv / (d.isl + d.osl) < d.concurrency
        step = build_step_models([d], roofline_op_time)[0]
        ttft.append(simulate_deployment(d, engine, step).prefill.metrics()["ttft_ms"])
    assert ttft[1] > 1.5 * ttft[0]


def test_a_deployment_question_simulates_in_well_under_a_second(catalog):
    """aiperf's 20C measured + 2C warm-up requests, C = 64, OSL 512: CPU time of the simulation."""
    d = _deploy(catalog, "h100-sxm", isl=1024, osl=512, concurrency=64)
    step = build_step_models([d], roofline_op_time)[0]
    engine = engine_for("vllm", d.gpu, fitted=False)
    started = time.process_time()
    stats = simulate_deployment(d, engine, step).prefill
    assert time.process_time() - started < 1.0
    assert len(stats.first_us) == 20 * 64 and np.isfinite(stats.finish_us).all()


def test_times_are_linear_in_the_step_cost(catalog):
    """What lets the bench fit an engine's constants from one simulation per run: the timeline under cost
    theta equals its step features times theta (closed loop)."""
    d = _deploy(catalog, "h100-sxm", tp=2, isl=2048, osl=64, concurrency=16)
    step = build_step_models([d], roofline_op_time)[0]
    cost = StepCost(1.3, 0.9, base_us=800.0, per_seq_us=4.0, allreduce_us=7.0, per_layer_us=40.0)
    engine = engine_for("vllm", d.gpu, fitted=False).with_cost(cost)
    kv, _ = kv_capacity(d, engine)
    stats = simulate(step, engine, kv, Workload(d.isl, d.osl, d.concurrency))
    th = theta(cost)
    np.testing.assert_allclose(stats.finish_us, stats.f_finish @ th, rtol=1e-9)
    np.testing.assert_allclose(stats.first_us, stats.f_first @ th, rtol=1e-9)
    # every step runs the model's layers once: the per-layer cost adds layers x steps to the timeline
    assert stats.f_finish[-1, 6] == pytest.approx(stats.f_finish[-1, 2] * d.model.layers)
    slower = simulate(
        step, engine.with_cost(replace(cost, per_layer_us=80.0)), kv, Workload(d.isl, d.osl, d.concurrency)
    )
    assert slower.finish_us[-1] > stats.finish_us[-1] + 40.0 * d.model.layers * (d.osl - 1)


def test_batch_ttft_grows_with_the_batch_and_each_engine_schedules_its_way(catalog):
    ttft = {}
    for name in ENGINES:
        for c in (1, 32):
            d = _deploy(catalog, "h100-sxm", isl=4096, osl=32, concurrency=c, framework=name)
            step = build_step_models([d], roofline_op_time)[0]
            engine = engine_for(name, d.gpu, fitted=False)
            ttft[name, c] = simulate_deployment(d, engine, step, BATCH).prefill.metrics()["ttft_ms"]
        assert ttft[name, 32] > 4 * ttft[name, 1]
    # SGLang prefills the whole batch before decoding; vLLM lets decodes in as soon as prompts finish
    assert ttft["sglang", 32] == pytest.approx(ttft["vllm", 32], rel=0.3)


@pytest.mark.parametrize("gpu", ["l4", "h100-sxm", "a100-sxm4-80gb"])
def test_physics_on_every_answer(catalog, gpu):
    """TPOT never below reading the weights a decode step touches at the DRAM bandwidth, nor below the
    decode step; TTFT never below one request's prefill; the interval contains both (the L4 case: 15 GB
    -- all but the input embedding table, gathered a row per token -- at 300 GB/s = 50 ms)."""
    from components.deployments.serve import decode_weight_bytes_per_gpu

    d = _deploy(catalog, gpu, isl=1024, osl=256, concurrency=4)
    (a,) = answer_deployments([d], roofline_op_time)
    weights_ms = decode_weight_bytes_per_gpu(d) / (float(d.gpu.dram_gbps) * 1e9) * 1e3
    assert a.tpot_ms >= weights_ms
    assert a.tpot_ms >= a.decode_step_ms
    assert a.ttft_ms >= a.prefill_ms
    lo, hi = a.interval["tpot_ms"]
    assert lo <= a.tpot_ms <= hi and lo >= weights_ms
    lo, hi = a.interval["ttft_ms"]
    assert lo <= a.ttft_ms <= hi
    assert a.deployment["engine"]["name"] == "vllm"


def test_fp8_weights_halve_the_decode_on_a_gpu_without_an_fp8_pipe(catalog):
    """A100 has no fp8 pipe: a weight-only fp8 decode still reads 1-byte weights (the answer said bf16)."""
    answers = answer_deployments(
        [_deploy(catalog, "a100-sxm4-80gb", isl=512, osl=128, weight_dtype=w) for w in ("bf16", "fp8")],
        roofline_op_time,
    )
    bf16, fp8 = answers
    assert fp8.tpot_ms < 0.7 * bf16.tpot_ms


def test_expert_parallelism_changes_a_moe_answer(catalog):
    answers = answer_deployments(
        [_deploy(catalog, "h200", MOE, isl=1024, osl=128, concurrency=32, tp=8, ep=ep) for ep in (1, 8)],
        roofline_op_time,
    )
    assert answers[0].tpot_ms != answers[1].tpot_ms
    assert "alltoall" in answers[1].breakdown["decode"] and "alltoall" not in answers[0].breakdown["decode"]


def test_attention_data_parallelism_spreads_the_experts_and_serves_every_rank(catalog):
    """dp ranks each run their own requests' attention; the experts sit over all GPUs: per-GPU weights
    fall, the GPUs multiply, and the MoE of each GPU serves every rank's tokens."""
    one = _deploy(catalog, "h200", MOE, isl=1024, osl=64, concurrency=16, tp=1, ep=1)
    wide = _deploy(catalog, "h200", MOE, isl=1024, osl=64, concurrency=16, tp=1, ep=8, dp=8)
    assert wide.gpus == 8
    assert weight_bytes_per_gpu(wide) < 0.3 * weight_bytes_per_gpu(one)
    a_one, a_wide = answer_deployments([one, wide], roofline_op_time)
    assert a_wide.deployment["dp"] == 8 and "alltoall" in a_wide.breakdown["decode"]
    assert a_wide.memory["weights_gb"] < a_one.memory["weights_gb"]
    with pytest.raises(DeploymentError, match="dp 2: attention data parallelism is modelled for MoE"):
        _deploy(catalog, "h200", isl=8, osl=8, dp=2)


def test_attention_dp_ranks_share_one_queue_and_step_together(catalog):
    """An attention-DP worker is simulated whole: its dp x C clients in one queue, each step as long as its
    busiest rank's. A prompt prefilled on one rank stalls every rank's decodes, so a rank's TPOT carries the
    other ranks' prefills (simulated alone, a rank saw only its own: 13% lower TPOT here)."""
    wide = _deploy(catalog, "h200", MOE, isl=4096, osl=64, concurrency=4, tp=1, ep=8, dp=8)
    (step,) = build_step_models([wide], roofline_op_time)
    assert step.dp == 8
    engine = engine_for("trtllm", wide.gpu, fitted=False).with_cost(StepCost(base_us=100.0))
    served = simulate_deployment(wide, engine, step, per_client=(3, 1))
    assert served.clients == 32 and len(served.decode.first_us) == 3 * 32
    assert served.decode.decode_batch <= 4.0 + 1e-9  # per rank
    kv, _ = kv_capacity(wide, engine)  # one rank alone (as before): its own 4 clients, its own prefills
    alone = simulate(replace(step, dp=1), engine, kv, Workload(4096, 64, 4, requests=12, warmup=4))
    tpot = served.times_us(engine)[1]
    th = theta(engine.cost)
    tpot1 = float(alone.features()[2] @ th)
    assert tpot > 1.1 * tpot1
    # one rank's step: decodes spread over the ranks, chunks dealt to them in turn; the busiest rank's time
    total, dec, _ = step.rank_step_us(16, 2048.0, [(4096.0, 4096.0)] * 2, [True, True])
    assert dec == step.decode_us(2, 2048.0) and total == step.step_us(2, 2048.0, [(4096.0, 4096.0)], 1)


def test_an_aggregated_run_serves_the_clients_its_id_names():
    """aiperf's concurrency is the run id's ``_c<C>_``, shared by the recorded attention-DP ranks (a row
    whose batch_size records C / 64 is simulated with C / dp clients per rank, not batch_size)."""
    from pathlib import Path

    from components.deployments.bench_silicon import silicon_deployments

    row = {
        "id": "dsr1_h200_trtllm_fp8_agg_8192x1024_c64_cfg183",
        "model_path": "deepseek-ai/DeepSeek-V3",
        "device_id": "h200",
        "backend": "trtllm",
        "mode": "agg",
        "isl": 8192,
        "osl": 1024,
        "gemm_quant_mode": "fp8_block",
        "precision": "fp8",
        "batch_size": 1.0,
        "tp_size": 1.0,
        "pp_size": 1.0,
        "attention_dp_size": 8.0,
        "moe_tp_size": 1.0,
        "moe_ep_size": 8.0,
    }
    agg, _ = silicon_deployments(row, load_catalog(), Path(DEFAULT_DATASETS_DIR))
    assert (agg.concurrency, agg.dp) == (8, 8)
    no_id = silicon_deployments({**row, "id": "x"}, load_catalog(), Path(DEFAULT_DATASETS_DIR))[0]
    assert no_id.concurrency == 1


def test_disaggregated_runs_split_the_clients_over_workers_or_say_why_not():
    """C = decode_batch_size x decode DP x decode workers (``_c576_`` = 64 x 1 x 9); the prefill workers
    share the same C; a run without worker counts is refused with the field named."""
    from components.deployments.bench_silicon import disagg_concurrency

    row = {
        "id": "dsr1_h200_trtllm_fp8_disagg_1024x1024_c576_cfg303",
        "decode_batch_size": 64.0,
        "decode_attention_dp_size": 1.0,
        "decode_num_workers": 9.0,
        "prefill_attention_dp_size": 8.0,
        "prefill_num_workers": 2.0,
    }
    assert disagg_concurrency(row) == (36, 64)
    no_batch = {**row, "decode_batch_size": float("nan"), "id": "x_c288_y"}
    assert disagg_concurrency(no_batch) == (18, 32)
    with pytest.raises(DeploymentError, match="decode_num_workers: not recorded"):
        disagg_concurrency({**row, "decode_num_workers": float("nan"), "prefill_num_workers": None})


def test_a_run_recording_no_moe_sizes_shards_the_experts_over_its_gpus(catalog):
    """moe_tp_size = moe_ep_size = 0 (not recorded; two vLLM runs of Qwen3-235B): the engine's default, the
    experts over every GPU of the worker (tp x attention DP), no expert parallelism; a recorded size that
    does not cover the GPUs is still refused."""
    from components.deployments.bench_silicon import silicon_deployments

    row = {
        "id": "qwen3_235b_h100_sxm_vllm_disagg_4000x1000_c_1",
        "model_path": "Qwen/Qwen3-235B-A22B-FP8",
        "device_id": "h100-sxm",
        "isl": 4000,
        "osl": 1000,
        "mode": "disagg",
        "backend": "vllm",
        "gemm_quant_mode": "fp8",
        "precision": "fp8",
        "prefill_num_workers": 1.0,
        "decode_num_workers": 3.0,
        "decode_batch_size": 24.0,
        **{f"prefill_{k}": v for k, v in (("tp_size", 1.0), ("attention_dp_size", 4.0))},
        **{f"decode_{k}": v for k, v in (("tp_size", 4.0), ("attention_dp_size", 1.0))},
        **{f"{side}_moe_{k}_size": 0.0 for side in ("prefill", "decode") for k in ("tp", "ep")},
    }
    pre, dec = silicon_deployments(row, catalog, DEFAULT_DATASETS_DIR)
    assert (pre.tp, pre.dp, pre.ep) == (1, 4, 1) and (dec.tp, dec.dp, dec.ep) == (4, 1, 1)
    with pytest.raises(DeploymentError, match="moe_tp_size x moe_ep_size 2"):
        silicon_deployments(
            {**row, "prefill_moe_tp_size": 2.0, "prefill_moe_ep_size": 1.0}, catalog, DEFAULT_DATASETS_DIR
        )


def test_a_prefill_worker_whose_clients_decode_elsewhere_queues_less(catalog):
    """The disaggregated prefill worker's clients come back after their decode (``think_us``): at the same
    client count its requests meet fewer others than back-to-back prompts do."""
    d = _deploy(catalog, "h100-sxm", isl=4096, osl=1, concurrency=32)
    step = build_step_models([d], roofline_op_time)[0]
    engine = engine_for("vllm", d.gpu, fitted=False).with_cost(StepCost(base_us=1000.0))
    kv, _ = kv_capacity(d, engine)
    ttft = [
        simulate(step, engine, kv, Workload(d.isl, 1, 32, think_us=think)).metrics()["ttft_ms"]
        for think in (0.0, 2e6)
    ]
    assert ttft[1] < 0.5 * ttft[0]


def test_a_rank_over_every_engine_times_each_option_once_and_names_the_engine(catalog):
    """``framework=all``: every GPU x TP option under each engine, the op grids shared (the same answers as
    one engine at a time); an unknown engine is one clear error."""
    from components.deployments.service import rank_deployments, rank_frameworks

    specs = [catalog.resolve(n) for n in ("h100-sxm", "l40s")]
    params = {"isl": 1024, "osl": 64, "concurrency": 8}
    every, _ = rank_deployments(
        json.dumps(LLAMA8B), specs, {**params, "framework": "all"}, {}, op_time=roofline_op_time
    )
    assert {r["engine"] for r in every} == set(ENGINES)
    alone, _ = rank_deployments(
        json.dumps(LLAMA8B), specs, {**params, "framework": "sglang"}, {}, op_time=roofline_op_time
    )
    shared = {(r["device"], r["tp"]): r["tpot_ms"] for r in every if r["engine"] == "sglang"}
    assert shared == pytest.approx({(r["device"], r["tp"]): r["tpot_ms"] for r in alone}, rel=1e-6)
    assert rank_frameworks("trtllm, vllm") == ["trtllm", "vllm"]
    with pytest.raises(DeploymentError, match="framework 'tgi'"):
        rank_frameworks("vllm,tgi")


def test_each_engine_sizes_its_kv_cache_its_own_way(catalog):
    """TensorRT-LLM takes 0.9 of the memory weights and activations leave (more room than vLLM's 0.9 of
    all memory when the weights fill most of it); SGLang derives its static fraction from the GPU's memory
    and the TP group: (80 - 9.5 - 0.5) / 80 on one H100, (141 - 12 - 4) / 141 on eight H200s."""
    d = _deploy(catalog, "h100-sxm", isl=1024, osl=256, concurrency=16, weight_dtype="fp8")
    big = _deploy(catalog, "h100-sxm", config={**LLAMA8B, "num_hidden_layers": 120}, isl=1024, osl=256)
    vllm, trt = (engine_for(n, d.gpu, fitted=False) for n in ("vllm", "trtllm"))
    assert kv_capacity(big, trt)[0] > kv_capacity(big, vllm)[0]
    sglang = engine_for("sglang", d.gpu, fitted=False)
    assert sglang.kv_fraction(80.0, 1, 1) == pytest.approx(70.0 / 80.0)
    h200 = engine_for("sglang", catalog.resolve("h200"), fitted=False)
    assert h200.kv_fraction(141.0, 8, 1) == pytest.approx(125.0 / 141.0)
    assert kv_capacity(d, sglang)[0] > 0


def test_an_engine_is_refused_on_a_gpu_it_does_not_run_on(catalog):
    """TensorRT-LLM is CUDA only: an MI300X deployment under it is one clear error; vLLM serves it."""
    d = _deploy(catalog, "mi300x", isl=512, osl=64, concurrency=4, framework="trtllm")
    with pytest.raises(DeploymentError, match=r"trtllm: runs on nvidia GPUs, not on mi300x \(amd\)"):
        kv_capacity(d, engine_for("trtllm", d.gpu, fitted=False))
    assert kv_capacity(d, engine_for("vllm", d.gpu, fitted=False))[0] > 0


def test_step_models_are_kept_across_calls_per_op_time_function(catalog):
    """A second question on the same GPUs (another workload) reuses the step grids; another op-time
    function, GPU or TP builds its own."""

    def op_time(*args, **kwargs):  # the roofline, as a function of its own
        return roofline_op_time(*args, **kwargs)

    a = _deploy(catalog, "h100-sxm", isl=1024, osl=128, concurrency=8, tp=2)
    b = _deploy(catalog, "h100-sxm", isl=4096, osl=16, concurrency=64, tp=2)
    first = build_step_models([a], op_time)[0]
    again, other_tp, other_gpu = build_step_models(
        [b, _deploy(catalog, "h100-sxm", isl=8, osl=8, tp=4), _deploy(catalog, "h200", isl=8, osl=8, tp=2)],
        op_time,
    )
    assert again.attn_pre is first.attn_pre and other_tp.attn_pre is not first.attn_pre
    assert other_gpu.attn_pre is not first.attn_pre
    assert again is not first and not again._memo  # its memos start empty: no answer depends on history
    fresh = build_step_models([a], roofline_op_time)[0]
    assert fresh is not first
    np.testing.assert_array_equal(fresh.attn_pre, first.attn_pre)


def test_a_benchmarked_run_is_simulated_with_aiconfigurators_settings(catalog):
    """AIConfigurator's benchmark deploys an aggregated worker with max_batch_size C, a token budget of
    C + ISL + 1500, CUDA graphs at every size 1..C (no padding) and SGLang's mixed chunk from 0.5.6 on
    (``engines.aic_benchmark``); a user's question keeps the engine defaults."""
    from components.deployments.engines.aic_benchmark import PARTS, as_benchmarked

    spec = catalog.resolve("h100-sxm")
    for name in ENGINES:
        base = engine_for(name, spec, fitted=False)
        eng = as_benchmarked(base, isl=1024, concurrency=33, version="0.5.9")
        assert eng.max_num_seqs == 33 and eng.graph_batch(33) == 33 and eng.graph_batch(17) == 17
        assert "AIConfigurator benchmark rules" in eng.provenance
        if name == "sglang":
            assert eng.mixed_chunk and eng.max_num_batched_tokens == 1024 + 1500
        else:
            assert eng.max_num_batched_tokens == 33 + 1024 + 1500
    assert engine_for("vllm", spec, fitted=False).graph_batch(33) == 40  # the default pads
    trt = engine_for("trtllm", spec)
    assert as_benchmarked(trt, 1024, 8).memory_fraction == trt.memory_fraction  # "kv" not applied by default
    assert as_benchmarked(trt, 1024, 8, (*PARTS, "kv")).memory_fraction == pytest.approx(0.8)
    # SGLang 0.5.1's template never passed --enable-mixed-chunk; a version without a template of its own
    # (a named build, none recorded) is rendered by the default template, which passes it
    sglang = engine_for("sglang", spec)
    assert not as_benchmarked(sglang, 1024, 8, version="0.5.1.post1").mixed_chunk
    for version in ("glm5-hopper", None, "0.5.8"):
        assert as_benchmarked(sglang, 1024, 8, version=version).mixed_chunk


def test_sglangs_mixed_chunk_runs_the_decodes_in_prefill_steps(catalog):
    """Without mixed chunk a step with prefill work runs no decode (SGLang's default: the running requests
    wait); with it the decodes ride along, so the same requests need fewer steps (arrivals at a fixed rate
    keep prompts entering while others decode)."""
    d = _deploy(catalog, "h100-sxm", isl=4096, osl=64, concurrency=1, framework="sglang")
    step = build_step_models([d], roofline_op_time)[0]
    base = engine_for("sglang", d.gpu, fitted=False)
    kv, _ = kv_capacity(d, base)
    w = Workload(d.isl, d.osl, kind=RATE, requests=32, rate=8.0)
    apart = simulate(step, base, kv, w)
    mixed = simulate(step, base.with_settings(mixed_chunk=True), kv, w)
    assert mixed.steps < apart.steps  # a prompt entering beside decodes saves their separate step


def test_a_rank_simulates_fewer_requests_per_client_and_agrees_with_predict(catalog):
    """A rank simulates 6 + 1 requests per client (``service.RANK_PER_CLIENT``), a question aiperf's 20 + 2:
    the closed loop's steady state repeats, so the two agree within a few percent on every engine (TPOT 2-3%
    lower: the final drain is a larger share of fewer requests)."""
    from components.deployments.service import RANK_PER_CLIENT, rank_deployments

    assert RANK_PER_CLIENT == (6, 1)
    spec = catalog.resolve("h100-sxm")
    params = {"isl": 2048, "osl": 128, "concurrency": 16, "framework": "all"}
    ranked, _ = rank_deployments(json.dumps(LLAMA8B), [spec], params, {}, tps=[1], op_time=roofline_op_time)
    for row in ranked:
        d = _deploy(catalog, "h100-sxm", isl=2048, osl=128, concurrency=16, framework=row["engine"])
        (asked,) = answer_deployments([d], roofline_op_time)
        assert row["tpot_ms"] == pytest.approx(asked.tpot_ms, rel=0.05)
        assert row["ttft_ms"] == pytest.approx(asked.ttft_ms, rel=0.05)


def test_the_tpot_floor_counts_what_a_decode_step_must_read(catalog):
    """A decode step reads every dense weight and the LM head (not the input embedding table, gathered a row
    per token) and at least topk of the routed experts (Mixtral: 2 of 8); a sliding-window layer reads its
    window at most. The old floor (every weight byte) stood above 298 of 1,854 measured silicon runs."""
    from dataclasses import replace

    from components.deployments.serve import decode_weight_bytes_per_gpu, kv_tokens_read, physics_floors

    d = _deploy(catalog, "h100-sxm", config=MOE, isl=1024, osl=256, concurrency=1)
    m = d.model
    table = m.vocab * m.hidden * 2.0  # bf16 input embedding table
    unread_experts = m.parameter_counts()["experts"] * 2.0 * (1 - m.topk / m.experts)
    assert decode_weight_bytes_per_gpu(d) == pytest.approx(weight_bytes_per_gpu(d) - table - unread_experts)
    dense = _deploy(catalog, "h100-sxm", isl=1024, osl=256, concurrency=1)
    dense_table = dense.model.vocab * dense.model.hidden * 2.0
    assert decode_weight_bytes_per_gpu(dense) == pytest.approx(weight_bytes_per_gpu(dense) - dense_table)
    (a,) = answer_deployments([d], roofline_op_time)
    assert a.tpot_ms * 1e3 >= physics_floors(d, None, 1.0)["tpot"] - 0.1  # the answer rounds to 0.1 us
    windowed = replace(d, model=replace(m, sliding_window=128, sliding_layers=m.layers // 2))
    assert kv_tokens_read(windowed, 4096.0) == pytest.approx((4096.0 + 128.0) / 2)
    assert kv_tokens_read(d, 4096.0) == 4096.0


def test_a_prefill_workers_clients_are_away_as_long_as_the_decode_worker_keeps_them(catalog):
    """Disaggregated: a client comes back to the prefill worker after its request's time on the decode
    worker as that worker's simulation has it (``serve.decode_worker_us``), so a slower decode step keeps the
    clients away longer and the prefill worker queues less."""
    pre = _deploy(catalog, "h100-sxm", isl=4096, osl=64, concurrency=32, mode="disagg")
    dec = _deploy(catalog, "h100-sxm", isl=4096, osl=64, concurrency=32, mode="disagg")
    steps = build_step_models([pre, dec], roofline_op_time)
    engine = engine_for("vllm", pre.gpu, fitted=False).with_cost(StepCost(base_us=1000.0))
    ttft = []
    for base in (1000.0, 100000.0):
        served = simulate_deployment(
            pre,
            engine,
            steps[0],
            decode_worker=(dec, steps[1]),
            decode_engine=engine.with_cost(StepCost(base_us=base)),
        )
        ttft.append(served.prefill.metrics()["ttft_ms"])
        assert served.decode.metrics()["tpot_ms"] * 1e3 >= base
    assert ttft[1] < ttft[0]


def test_aiconfigurators_disaggregated_workers_follow_its_rules(catalog):
    """A prefill worker one prompt of ISL (+ 1500 headroom) per rank and step unless the run records its
    batch; a decode worker its batch, with a graph captured at every size up to it (no padding)."""
    from components.deployments.engines.aic_benchmark import as_disaggregated

    spec = catalog.resolve("h200")
    pre, dec = as_disaggregated(engine_for("trtllm", spec, fitted=False), 8192, 24)
    assert (pre.max_num_seqs, pre.max_num_batched_tokens) == (1, 8192 + 1500)
    assert dec.max_num_seqs == 24 and [dec.graph_batch(n) for n in (5, 17, 24)] == [5, 17, 24]
    assert as_disaggregated(engine_for("vllm", spec, fitted=False), 1024, 8, 4)[0].max_num_seqs == 4
    sglang = engine_for("sglang", spec, fitted=False)
    assert as_disaggregated(sglang, 65536, 8)[0].max_num_batched_tokens == sglang.max_num_batched_tokens
