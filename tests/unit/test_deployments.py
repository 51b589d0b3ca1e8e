"""LLM deployments: config parsing, memory refusal, composition sanity, the serving bench on real subsets."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from components.deployments.bench_common import FAMILY, FAMILY_ROOFLINE
from components.deployments.bench_pipeweave import (
    bounded,
    compose_pipeweave,
    fit_limits,
    fit_pipeweave,
    run_pipeweave_bench,
)
from components.deployments.bench_silicon import run_silicon_bench
from components.deployments.compose import BATCH, DoesNotFit, compose_phases, memory_check
from components.deployments.config import Deployment, DeploymentError, model_shape
from components.deployments.data import read_allreduce_tables, read_pipeweave_runs, read_silicon_runs
from components.deployments.framework_cost import answer
from components.deployments.service import rank_deployments
from components.devices import load_catalog
from components.platform.config import DEFAULT_DATASETS_DIR
from kernelcast.cli import app

DATA = DEFAULT_DATASETS_DIR
needs_data = pytest.mark.skipif(
    not (DATA / "pipeweave" / "config").is_dir(), reason="public datasets not present"
)
LLAMA8B = {
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
}


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_config_text_parses_and_counts_parameters():
    shape = model_shape(json.dumps(LLAMA8B))
    assert (shape.layers, shape.heads, shape.kv_heads, shape.head_dim) == (32, 32, 8, 128)
    assert not shape.is_moe
    assert 7.5e9 < shape.parameters < 8.5e9  # Llama-3.1-8B has 8.03 B parameters


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({**LLAMA8B, "architectures": ["BertForMaskedLM"]}, "architectures"),
        ({k: v for k, v in LLAMA8B.items() if k != "vocab_size"}, "vocab_size"),
        ({**LLAMA8B, "index_topk": 2048}, "index_topk"),
        ({**LLAMA8B, "kv_lora_rank": 512}, "qk_rope_head_dim"),  # MLA needs its head dims
        ({**LLAMA8B, "layer_types": ["linear_attention"] * 32}, "layer_types"),
        ({**LLAMA8B, "num_hidden_layers": "many"}, "num_hidden_layers"),
    ],
)
def test_config_errors_name_the_field(config, field):
    with pytest.raises(DeploymentError, match=field) as info:
        model_shape(config)
    assert "\n" not in str(info.value)


def test_bad_json_and_unknown_name_are_one_line_errors():
    with pytest.raises(DeploymentError, match="not JSON"):
        model_shape("{not json")
    with pytest.raises(DeploymentError, match="not a file and not a bundled config"):
        model_shape("No-Such-Model-7B")


def test_tp_must_divide_heads(catalog):
    with pytest.raises(DeploymentError, match=r"tp 3: does not divide num_attention_heads 32"):
        Deployment(model=model_shape(LLAMA8B), gpu=catalog.resolve("h100-sxm"), isl=128, osl=16, tp=3)
    with pytest.raises(DeploymentError, match="ep 2: a dense model has no experts"):
        Deployment(model=model_shape(LLAMA8B), gpu=catalog.resolve("h100-sxm"), isl=128, osl=16, tp=2, ep=2)


def test_memory_refusal_names_what_does_not_fit(catalog):
    big = {
        **LLAMA8B,
        "num_hidden_layers": 80,
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "intermediate_size": 28672,
    }  # Llama-3.1-70B's shape: 141 GB of bf16 weights
    d = Deployment(model=model_shape(big), gpu=catalog.resolve("h100-sxm"), isl=2048, osl=256, concurrency=8)
    with pytest.raises(DoesNotFit, match=r"weights .* GB .* > 77.3 GB.*the weights alone need 2 GPUs"):
        memory_check(d)  # 0.9 x 80 GiB = 77.3 GB
    assert memory_check(d.with_(tp=4))["weights_gb"] == pytest.approx(141 / 4, rel=0.05)
    # More KV cache than fits: the server holds fewer requests at once (noted), it does not refuse.
    many = d.with_(tp=4, concurrency=512, isl=32768)
    memory = memory_check(many)
    assert 1 <= memory["concurrent_requests"] < 512 and memory["kv_cache_wanted_gb"] > memory["kv_cache_gb"]
    assert any("room for" in note for note in answer(many).notes)
    # One request's context that cannot fit is refused (81,920 B per token per GPU: ~12 M tokens > 40 GB).
    with pytest.raises(DoesNotFit, match="one request's KV cache"):
        memory_check(d.with_(tp=4, concurrency=1, isl=1_000_000))


def test_memory_check_passes_runs_that_ran(catalog):
    """Qwen3-32B bf16 on one H100 (65.5 GB of weights), 16 x (2048 + 512) tokens: SGLang served it
    (AIConfigurator's silicon runs); 80 GiB of HBM minus the 10% reserve holds it."""
    d = Deployment(
        model=model_shape("Qwen/Qwen3-32B"),
        gpu=catalog.resolve("h100-sxm"),
        isl=2048,
        osl=512,
        concurrency=16,
    )
    memory = memory_check(d)
    assert memory["weights_gb"] == pytest.approx(65.5, rel=0.02) and memory["concurrent_requests"] >= 14


def test_composition_sanity(catalog):
    h200 = catalog.resolve("h200")
    d = Deployment(model=model_shape(LLAMA8B), gpu=h200, isl=1024, osl=128, concurrency=16)
    short, long = compose_phases(d), compose_phases(d.with_(isl=16384))
    assert long.decode_kernels_us > short.decode_kernels_us  # decode reads a longer KV cache
    assert long.prefill_kernels_us > 10 * short.prefill_kernels_us  # 16x the tokens, attention quadratic
    for line in short.prefill + short.decode:
        assert line.time_us >= line.floor_us > 0 or line.family == "allreduce"
    big = {
        **LLAMA8B,
        "num_hidden_layers": 64,
        "hidden_size": 5120,
        "num_attention_heads": 64,
        "intermediate_size": 25600,
    }
    d32 = Deployment(model=model_shape(big), gpu=h200, isl=2048, osl=256, concurrency=8)
    one, two = answer(d32), answer(d32.with_(tp=2))
    assert two.tpot_ms < one.tpot_ms and two.ttft_ms < one.ttft_ms
    assert "allreduce" in two.breakdown["decode"] and "allreduce" not in one.breakdown["decode"]
    for phase in ("prefill", "decode"):
        assert sum(v["share"] for v in one.breakdown[phase].values()) == pytest.approx(1.0, abs=0.01)
    assert one.interval["tpot_ms"][0] < one.tpot_ms < one.interval["tpot_ms"][1]
    batch = answer(d32, workload=BATCH)
    assert batch.ttft_ms > answer(d32).ttft_ms * 0.5  # the whole batch's prefill, not one request's


@needs_data
def test_bundled_moe_and_sliding_window_configs(catalog):
    qwen = model_shape("Qwen/Qwen3-235B-A22B")
    assert (qwen.experts, qwen.topk, qwen.moe_intermediate, qwen.moe_layers) == (128, 8, 1536, 94)
    assert 2.2e11 < qwen.parameters < 2.5e11
    oss = model_shape("openai/gpt-oss-120b")
    assert oss.sliding_window == 128 and oss.sliding_layers == 18
    d = Deployment(
        model=oss,
        gpu=catalog.resolve("h200"),
        isl=8192,
        osl=64,
        concurrency=8,
        tp=4,
        ep=4,
        weight_dtype="nvfp4",
    )
    a = answer(d)
    assert "moe" in a.breakdown["decode"]
    assert any("no nvfp4 pipe" in note for note in a.notes)  # Hopper has no FP4 tensor pipe


@needs_data
def test_mla_composition_deepseek_v3(catalog):
    """DeepSeek-V3: 671 B parameters, 187 M of attention per layer; the KV cache keeps one latent row
    (512 + 64 elements) per token and layer on every TP rank; decode runs absorbed (per-head BMMs into and
    out of the latent, MQA over it)."""
    m = model_shape("deepseek-ai/DeepSeek-V3")
    assert m.is_mla and m.parameters == pytest.approx(671e9, rel=0.01)
    assert m.parameter_counts()["attention"] / m.layers == pytest.approx(187e6, rel=0.01)
    assert m.kv_elements_per_token_layer(1) == m.kv_elements_per_token_layer(8) == 576
    d = Deployment(
        model=m,
        gpu=catalog.resolve("h200"),
        isl=1024,
        osl=256,
        concurrency=32,
        tp=8,
        ep=8,
        weight_dtype="fp8_block",
        kv_dtype="fp8",
    )
    memory = memory_check(d)
    assert memory["kv_cache_gb"] == pytest.approx(32 * 1280 * 61 * 576 / 1e9, rel=0.01)
    ph = compose_phases(d)
    decode_attn = [x for x in ph.decode if x.kind == "attention"]
    prefill_attn = [x for x in ph.prefill if x.kind == "attention"]
    assert decode_attn[0].shape["HKV"] == 1 and prefill_attn[0].shape["HKV"] == 128 // 8
    assert any(x.shape.get("B") == 128 // 8 for x in ph.decode if x.family == "gemm")  # absorbed BMMs
    a = answer(d)
    assert 0 < a.tpot_ms < a.ttft_ms * 10 and a.breakdown["decode"]["moe"]["share"] > 0.3
    assert model_shape("zhipuai/GLM-5").is_dsa  # sparse (indexer) MLA: composed (test_dsa.py)


@needs_data
def test_allreduce_fit_from_measured_tables():
    tables = read_allreduce_tables(DATA)
    h800 = tables["h800"]
    small, large = h800(np.array([4096.0, 1 << 30]), np.array([8, 8]))
    assert 5 < small < 100  # tens of microseconds for a small message
    assert large > 100 * small  # a GB moves at bus bandwidth: milliseconds
    assert 50 < h800.link_gbps() < 900  # NVLink-class bus bandwidth


@needs_data
def test_pipeweave_bench_on_a_subset(catalog):
    runs = read_pipeweave_runs(DATA)
    subset = runs[runs["gpu"].isin(["A100", "H100", "H200", "L40"]) & (runs["tp"] == 1)]
    bench = run_pipeweave_bench(DATA, catalog, runs=subset)
    rows = {(r["family"], r["target"]): r for r in bench.rows}
    ours, roof = rows[(FAMILY, "total_ms")], rows[(FAMILY_ROOFLINE, "total_ms")]
    assert ours["n"] == len(subset) == 8
    assert ours["ours"] < roof["ours"]  # the learned framework cost beats the bare roofline sum
    assert ours["ours"] < 0.35
    assert rows[(FAMILY, "total_ms[gpu=H100]")]["published"] is not None  # PipeWeave's own figure beside ours


@needs_data
def test_framework_fit_never_sees_the_held_out_gpu(catalog):
    runs = read_pipeweave_runs(DATA)
    composed = compose_pipeweave(runs[runs["tp"] == 1], catalog, DATA)
    without = fit_pipeweave(composed[composed["gpu"] != "H100"])
    assert "H100" not in without.source.split(", ") and "A100" in without.source
    assert all(c >= 0 for c in without.prefill[:3]) and all(c >= 0 for c in without.decode[:3])


@needs_data
def test_power_cap_learned_on_training_gpus_of_the_same_sm_design(catalog):
    """The L40 held out: its tensor energy comes from the other Ada GPUs (L20, RTX 6000 Ada) only; it slows
    the 300 W L40 below its datasheet peak, never the H20 (whose Hopper energy the 700 W H100 sets), and a
    design with no training GPU (A100's 8.0 here) keeps its op source's tensor-op times."""
    runs = read_pipeweave_runs(DATA)
    composed = compose_pipeweave(
        runs[runs["gpu"].isin(["L20", "RTX_6000_Ada", "L40", "H20", "H100", "A100"])], catalog, DATA
    )
    train = composed[~composed["gpu"].isin(["L40", "A100"])]
    limits = fit_limits(train)
    assert set(limits.watts_per_tflops) == {"8.9", "9.0"}  # Ada and Hopper from their training GPUs; no 8.0
    capped = bounded(composed, limits)
    by_gpu = capped.groupby("gpu")["power_slowdown"].min()
    assert by_gpu["L40"] > 1.2 and by_gpu["H20"] == 1.0 and by_gpu["A100"] == 1.0
    a100 = composed["gpu"] == "A100"
    assert np.allclose(capped.loc[a100, "prefill_kernels_us"], composed.loc[a100, "prefill_kernels_us"])
    l40 = composed["gpu"] == "L40"
    assert (capped.loc[l40, "prefill_kernels_us"] > 1.05 * composed.loc[l40, "prefill_kernels_us"]).all()
    # the roofline's fixed tensor efficiency gives way to the reachable rate: the unthrottled H20 runs its
    # GEMMs faster than the fixed 70% says, never below the speed of light
    h20 = composed["gpu"] == "H20"
    assert (capped.loc[h20, "prefill_kernels_us"] < 0.9 * composed.loc[h20, "prefill_kernels_us"]).all()
    for phase in ("prefill", "decode"):
        assert (capped[f"{phase}_kernels_us"] >= composed[f"{phase}_roof_us"]).all()
    assert fit_pipeweave(train).limits == limits
    # the SM feed bound: the 78-SM, 4 TB/s H20 cannot keep its DRAM busy; a GDDR card can; the A100's design
    # (8.0) has no training GPU: not capped
    fed = capped.groupby("gpu")["sm_feed_slowdown"].min()
    assert fed["H20"] > 1.5 and fed["L40"] == fed["L20"] == fed["RTX_6000_Ada"] == fed["A100"] == 1.0


@needs_data
def test_launch_and_allreduce_latency_are_fitted_not_constants(catalog):
    """The op times carry no launch or all-reduce start-up constant; the fit learns them on its train runs
    (per kernel launched, per physics all-reduce, per all-reduce x GPU), never below zero."""
    from components.deployments.ops import roofline_op_time, sol_time

    spec = catalog.resolve("h100-sxm")
    tiny = {"N": np.array([1.0])}
    assert roofline_op_time("elementwise", "bf16", {**tiny, "op": "add"}, spec)[0] < 0.01  # no 2 us launch
    ar = {"bytes": np.array([16.0]), "gpus": np.array([4.0])}
    assert roofline_op_time("allreduce", "bf16", ar, spec)[0] == pytest.approx(
        sol_time("allreduce", "bf16", ar, spec)[0]
    )
    runs = read_pipeweave_runs(DATA)
    composed = compose_pipeweave(runs[runs["gpu"].isin(["A100", "H100", "L40", "H200"])], catalog, DATA)
    assert (composed["decode_launches"] > 100).all()  # dozens of kernels per layer
    assert (composed["decode_allreduces"] == 0).all()  # every TP run here has a measured collective table
    fw = fit_pipeweave(composed)
    assert len(fw.decode) == 7 and min(fw.decode[4:]) >= 0 and fw.decode[5] == fw.decode[6] == 0.0


@needs_data
def test_silicon_bench_counts_unanswered_runs(catalog):
    runs = read_silicon_runs(DATA)
    llama = runs[runs["model_path"].str.contains("Llama-3.1-8B") & (runs["mode"] == "agg")]
    subset = llama.groupby("device_id").head(15)
    # GLM-5's runs relabelled as GLM-5.2, whose shared-indexer layers are not modelled
    sparse = runs[runs["model_path"] == "zhipuai/GLM-5"].head(2).assign(model_path="zai-org/GLM-5.2")
    bench = run_silicon_bench(DATA, catalog, runs=pd.concat([subset, sparse]))
    total = {r["target"]: r for r in bench.rows if r["family"] == FAMILY and r["scope"] == ""}
    assert total["ttft_ms"]["n"] == 30 and total["ttft_ms"]["n_asked"] == 32
    # the gate's family is what `predict --llm` answers (the simulated engines), the composition beside it
    assert any(
        n.startswith("llm-serving-silicon deployment: 30 of 32 runs answered by simulating")
        for n in bench.notes
    )
    steady = {
        r["target"]: r
        for r in bench.rows
        if r["family"] == "deployment:steady-composition" and not r["scope"]
    }
    assert steady["tpot_ms"]["ours"] != total["tpot_ms"]["ours"]
    assert np.isfinite(total["tpot_ms"]["ours"])
    assert any("2 x model config field indexer_types" in n for n in bench.notes)


@needs_data
def test_rank_lists_fitting_options_only(catalog):
    specs = [catalog.resolve(n) for n in ("h100-sxm", "h200", "l40s")]
    ranking, skipped = rank_deployments(
        "Llama-3.1-70B",
        specs,
        {"isl": 2048, "osl": 256, "concurrency": 16},
        {"H100": 2.5, "h200": 3.5},
        by="cost",
    )
    assert skipped > 0 and ranking
    assert not any(r["device"] == "h100-sxm" and r["tp"] == 1 for r in ranking)  # 141 GB do not fit in 80
    costs = [r["usd_per_mtok"] for r in ranking if r["usd_per_mtok"] is not None]
    assert costs == sorted(costs) and ranking[0]["usd_per_mtok"] is not None
    assert all(r["usd_per_mtok"] is None for r in ranking if r["device"] == "l40s")  # no price: ranked last


@needs_data
def test_cli_predict_and_rank_llm():
    runner = CliRunner()
    ok = runner.invoke(
        app,
        [
            "predict",
            "--llm",
            "Llama-3.1-8B",
            "--isl",
            "1024",
            "--osl",
            "128",
            "--concurrency",
            "8",
            "--device",
            "H100",
            "--json",
        ],
    )
    assert ok.exit_code == 0, ok.output
    first = json.loads(ok.output)["deployments"][0]
    assert first["ttft_ms"] > 0 and first["tpot_ms"] > 0 and first["memory"]["weights_gb"] > 10
    bad = runner.invoke(
        app,
        [
            "predict",
            "--llm",
            "Llama-3.1-8B",
            "--isl",
            "1024",
            "--osl",
            "128",
            "--tp",
            "3",
            "--device",
            "H100",
        ],
    )
    assert bad.exit_code == 2 and "tp 3" in bad.output and "Traceback" not in bad.output
    ranked = runner.invoke(
        app,
        [
            "rank",
            "--llm",
            "Llama-3.1-8B",
            "--isl",
            "512",
            "--osl",
            "64",
            "--device",
            "H100",
            "--device",
            "A100-SXM4-80GB",
            "--by",
            "ttft",
            "--json",
        ],
    )
    assert ranked.exit_code == 0, ranked.output
    rows = json.loads(ranked.output)["ranking"]
    assert [r["ttft_ms"] for r in rows] == sorted(r["ttft_ms"] for r in rows)


def test_injected_op_time_and_its_tier_are_used(catalog):
    from dataclasses import dataclass

    from components.deployments.ops import roofline_op_time, with_small_ops

    @dataclass
    class Times:  # the op engine's answer shape: duration_us and a tier per row
        duration_us: np.ndarray
        tier: np.ndarray

    asked = []

    def engine(family, dtype, shape, spec, kv_dtype=None):
        asked.append(family)
        t = 2.0 * roofline_op_time(family, dtype, shape, spec, kv_dtype=kv_dtype)
        return Times(t, np.full(len(t), "measured", dtype=object))

    h100 = catalog.resolve("h100-sxm")
    d = Deployment(model=model_shape(LLAMA8B), gpu=h100, isl=512, osl=32, concurrency=4, tp=2)
    base, slow = compose_phases(d), compose_phases(d, with_small_ops(engine))
    assert slow.decode_kernels_us > 1.5 * base.decode_kernels_us
    assert {"gemm", "attention", "allreduce"} <= set(asked) and "rmsnorm" not in asked
    tiers = {line.family: line.tier for line in slow.decode}
    assert tiers["gemm"] == "measured" and tiers["rmsnorm"] == "roofline"


@needs_data
def test_api_deployment_form():
    from fastapi.testclient import TestClient

    from components.serving.app import create_app

    with TestClient(create_app("roofline", poll=False)) as client:
        body = {
            "deployment": {"model": "Llama-3.1-8B", "isl": 1024, "osl": 128, "concurrency": 8},
            "devices": ["H100", "A100-SXM4-80GB"],
        }
        answer = client.post("/v1/predict", json=body)
        assert answer.status_code == 200, answer.text
        deployments = answer.json()["deployments"]
        assert [d["deployment"]["gpu"] for d in deployments] == ["h100-sxm", "a100-sxm4-80gb"]
        assert deployments[0]["tpot_ms"] < deployments[1]["tpot_ms"]  # H100 reads weights faster
        ranked = client.post("/v1/rank", json={**body, "devices": ["H100", "L4"], "prices": {"H100": 2.5}})
        assert ranked.status_code == 200, ranked.text
        assert ranked.json()["deployment_ranking"][0]["device"] == "h100-sxm"
        bad = client.post("/v1/predict", json={**body, "deployment": {**body["deployment"], "tp": 3}})
        assert bad.status_code == 422 and "tp 3" in bad.json()["error"]["message"]
        path = client.post(
            "/v1/predict", json={**body, "deployment": {**body["deployment"], "model": "/etc/hostname"}}
        )
        assert path.status_code == 422  # a server never reads a file a client names
        gemm = {"op": "gemm", "shape": {"M": 8, "N": 8, "K": 8}, "dtype": "bf16"}
        both = client.post("/v1/predict", json={**body, "kernels": [gemm]})
        assert both.status_code == 422 and "exactly one" in both.json()["error"]["message"]


@needs_data
def test_cli_batch_of_deployments(tmp_path):
    good = tmp_path / "deployments.csv"
    good.write_text(
        "llm,device,isl,osl,concurrency,tp,dtype\nLlama-3.1-8B,H100,1024,128,8,1,bf16\n"
        "Qwen3-32B,H200,2048,256,16,2,fp8\n"
    )
    result = CliRunner().invoke(app, ["predict", "--batch", str(good), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["deployments"]
    assert [r["row"] for r in rows] == ["deployments.csv:2", "deployments.csv:3"]
    assert rows[1]["deployment"]["tp"] == 2 and rows[1]["deployment"]["dtype"] == "fp8"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"llm": "Llama-3.1-8B", "device": "H100", "isl": 1024, "osl": 128, "tp": 3}\n')
    failed = CliRunner().invoke(app, ["predict", "--batch", str(bad)])
    assert failed.exit_code == 2 and "bad.jsonl:1: tp 3" in failed.output


@needs_data
def test_registered_pyfunc_answers_the_deployment_form():
    """The pyfunc (what models:/kernelcast@champion loads) answers a deployment row beside an op row, in the
    rows' order; a deployment that does not fit answers with its refusal; a bad one is a one-line error."""
    import json

    import pandas as pd

    from components.models.roofline import RooflinePredictor
    from components.registry.pyfunc import QUESTION_COLUMNS, KernelcastPyfunc
    from components.serving.query import QueryError

    assert "deployment" in QUESTION_COLUMNS
    model = KernelcastPyfunc()
    model.predictor, model.model_version = RooflinePredictor(), "test"
    llama = {"model": "Llama-3.1-8B", "isl": 1024, "osl": 128, "concurrency": 8}
    rows = [
        {
            "device": "H100",
            "dtype": "fp16",
            "op": "gemm",
            "shape": json.dumps({"M": 4096, "N": 4096, "K": 4096}),
        },
        {"device": "H200", "deployment": json.dumps(llama)},
        {"device": "L4", "deployment": json.dumps({**llama, "model": "Llama-3.1-70B"})},
    ]
    out = model.predict(None, pd.DataFrame(rows))
    assert out["question"].tolist() == [0, 1, 2] and out["kind"].tolist()[1:] == ["deployment"] * 2
    assert out.loc[0, "kind"] == "op" and out.loc[0, "duration_us"] > 0
    deployed = out.loc[1]
    assert deployed["ttft_ms"] > 0 and deployed["tpot_ms"] > 0
    assert deployed["duration_us"] == pytest.approx(
        (deployed["ttft_ms"] + 127 * deployed["tpot_ms"]) * 1e3, rel=1e-3
    )
    assert deployed["duration_us_lo"] < deployed["duration_us"] < deployed["duration_us_hi"]
    assert json.loads(deployed["breakdown"])["memory"]["weights_gb"] > 10
    assert pd.isna(out.loc[2, "duration_us"]) and "does not fit" in out.loc[2, "note"]
    with pytest.raises(QueryError, match=r"question 0.deployment: tp 3: does not divide"):
        model.predict(None, pd.DataFrame([{"device": "H100", "deployment": json.dumps({**llama, "tp": 3})}]))
    with pytest.raises(QueryError, match=r"question 0.deployment: unknown field 'gpu'"):
        model.predict(
            None, pd.DataFrame([{"device": "H100", "deployment": json.dumps({**llama, "gpu": "x"})}])
        )


@needs_data
def test_evaluate_scores_the_serving_runs_of_an_upstream_tree(tmp_path, monkeypatch):
    """`kernelcast evaluate --source aiconfigurator --from DIR` scores the tree's silicon runs per device;
    a run without an answer (shared-indexer layers, a GPU outside the catalog) is listed with its
    reason."""
    from components.deployments.config import AIC_CONFIGS
    from components.deployments.data import SILICON_CSV

    runs = read_silicon_runs(DATA)
    llama = runs[runs["model_path"] == "meta-llama/Llama-3.1-8B-Instruct"].head(6)
    sparse = runs[runs["model_path"] == "zhipuai/GLM-5"].head(2).assign(model_path="zai-org/GLM-5.2")
    alien = llama.head(1).assign(system="zz9_sxm", id="alien-run")
    subset = pd.concat([llama, sparse, alien]).drop(columns=["device_id"])
    csv = tmp_path.joinpath(*SILICON_CSV.parts[1:])
    csv.parent.mkdir(parents=True)
    subset.to_csv(csv, index=False)
    configs = tmp_path / AIC_CONFIGS.relative_to("aiconfigurator")
    configs.symlink_to(DATA / AIC_CONFIGS, target_is_directory=True)
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    out = tmp_path / "eval.json"
    argv = [
        "evaluate",
        "--model",
        "roofline",
        "--source",
        "aiconfigurator",
        "--from",
        str(tmp_path),
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(app, [*argv, "--no-log"])
    assert result.exit_code == 0, result.output
    serving = json.loads(out.read_text())["serving"]
    assert serving["n_asked"] == 9 and serving["n"] == 6
    entry = (
        serving["by_device"]["h100-sxm"]
        if "h100-sxm" in serving["by_device"]
        else serving["by_device"]["h200"]
    )
    assert 0 < entry["ttft_ms_mape"] < 5 and 0 < entry["tpot_ms_mape"] < 5
    reasons = {row["id"]: row["reason"] for row in serving["unanswered"]}
    assert "indexer layers (reusing another layer's top-k) are not modelled" in " ".join(reasons.values())
    assert "alien-run" in reasons and "zz9" in reasons["alien-run"]
    assert "not answered" in result.output and "serving runs: 6/9 answered" in result.output


def test_silicon_runs_recorded_with_a_squared_moe_split_read_as_the_gpus_their_ids_name():
    """tp_size 64 with moe_tp = moe_ep = 8 (a ``..._tp8_ep8_`` run) is 8 GPUs, not 64; a real 4-GPU run with
    MoE TP 2 x EP 2 whose id says tp4 is left as recorded."""
    from components.deployments.data import with_squared_parallel_read

    frame = pd.DataFrame(
        {
            "id": ["m_agg_c8_tp8_ep8_1", "m_agg_c8_cfg181", "m_agg_c8_tp8_ep8_2", "m_agg_c8_tp4_ep2_3"],
            "tp_size": [64.0, 64.0, 1.0, 4.0],
            "attention_dp_size": [1.0, 1.0, 64.0, 1.0],
            "moe_tp_size": [8.0, 8.0, 8.0, 2.0],
            "moe_ep_size": [8.0, 8.0, 8.0, 2.0],
        }
    )
    out = with_squared_parallel_read(frame)
    assert out["tp_size"].tolist() == [8.0, 8.0, 1.0, 4.0]
    assert out["attention_dp_size"].tolist() == [1.0, 1.0, 8.0, 1.0]
    assert out["moe_tp_size"].tolist() == [1.0, 1.0, 1.0, 2.0]
    assert (out["parallel_read"] != "").tolist() == [True, True, True, False]
    assert frame["tp_size"].tolist() == [64.0, 64.0, 1.0, 4.0]  # the caller's frame untouched


def test_a_deployment_without_a_dtype_is_served_as_its_checkpoint_ships():
    """DeepSeek-V3 ships fp8 block-scaled weights (671 B parameters fit on 8 x H200 only so); a bf16
    checkpoint stays bf16; an asked dtype wins; mxfp4 (gpt-oss) is answered as the 4-bit float nvfp4 its
    engines' runs record, and says so (as bf16 its 120B weights needed four H100s)."""
    from components.deployments.service import deployment_from

    h200 = load_catalog().get("h200")
    asked = {"isl": 1024, "osl": 256}
    ds = deployment_from(model_shape("deepseek-ai/DeepSeek-V3"), h200, asked)
    assert ds.weight_dtype == "fp8_block" and any("ships fp8_block" in n for n in ds.notes)
    assert (
        deployment_from(model_shape("deepseek-ai/DeepSeek-V3"), h200, {**asked, "dtype": "bf16"}).weight_dtype
        == "bf16"
    )
    llama = deployment_from(model_shape("Llama-3.1-8B"), h200, asked)
    assert llama.weight_dtype == "bf16" and not any("checkpoint" in n for n in llama.notes)
    oss = deployment_from(model_shape("openai/gpt-oss-120b"), h200, asked)
    assert oss.weight_dtype == "nvfp4" and any("ships mxfp4" in n for n in oss.notes)
