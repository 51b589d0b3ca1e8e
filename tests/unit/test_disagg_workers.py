"""Worker counts of disaggregated runs that record none: AIConfigurator's rate matching (roofline op times:
no GPU, no trained engine needed)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from components.deployments.bench_silicon import disagg_concurrency, silicon_deployments
from components.deployments.config import DeploymentError
from components.deployments.disagg_workers import (
    DECODE_BATCH_MAX,
    DECODE_DEGRADATION,
    MAX_DECODE_WORKERS,
    MAX_PREFILL_WORKERS,
    PREFILL_DEGRADATION,
    derived_note,
    fewest_decode_workers,
    match_prefill_workers,
    power_of_two_decode_workers,
    with_derived_workers,
)
from components.deployments.engines.registry import engine_for
from components.deployments.serve import kv_capacity
from components.devices import load_catalog
from components.platform.config import DEFAULT_DATASETS_DIR

# One of the DeepSeek-R1 runs of 2026-03 as the silicon CSV records it: no worker counts, no decode batch.
R1_RUN = {
    "id": "2026_03_25_deepseek_r1_h200_sxm_trtllm_fp8_disagg_1024x1024_c3584_tp8_0_ep8_0_414",
    "model_path": "deepseek-ai/DeepSeek-R1",
    "device_id": "h200",
    "backend": "trtllm",
    "mode": "disagg",
    "isl": 1024,
    "osl": 1024,
    "precision": "fp8",
    "gemm_quant_mode": "fp8",
    "prefill_num_workers": float("nan"),
    "decode_num_workers": float("nan"),
    "decode_batch_size": float("nan"),
    **{
        f"{side}_{k}": v
        for side in ("prefill", "decode")
        for k, v in (
            ("tp_size", 8.0),
            ("pp_size", 1.0),
            ("attention_dp_size", 1.0),
            ("moe_tp_size", 1.0),
            ("moe_ep_size", 8.0),
        )
    },
}


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_prefill_workers_maximise_rate_matched_throughput_per_gpu():
    """AIConfigurator's objective: the chosen count beats every other in 1..32, and sits at the balance
    point (one fewer leaves prefill the bottleneck, one more idles a worker), capped at AIConfigurator's
    worker limit."""

    def per_gpu(x: int, p: float, d: float) -> float:
        return min(x * p * PREFILL_DEGRADATION, d * DECODE_DEGRADATION) / (x * 8 + 24)

    for p, d in ((3.0, 10.0), (1.0, 40.0), (50.0, 5.0)):
        x = match_prefill_workers(p, 8, d, 24)
        assert all(per_gpu(x, p, d) >= per_gpu(y, p, d) for y in range(1, 33))
        balance = d * DECODE_DEGRADATION / (p * PREFILL_DEGRADATION)
        assert min(math.floor(balance), MAX_PREFILL_WORKERS) <= x <= max(math.ceil(balance), 1)
    # a faster decode side never needs fewer prefill workers
    assert match_prefill_workers(2.0, 8, 40.0, 24) >= match_prefill_workers(2.0, 8, 10.0, 24)


def test_decode_workers_are_the_fewest_whose_kv_cache_holds_the_clients(catalog):
    _, dec = silicon_deployments(
        {**R1_RUN, "prefill_num_workers": 1.0, "decode_num_workers": 1.0}, catalog, DEFAULT_DATASETS_DIR
    )
    workers, batch = fewest_decode_workers(dec, 3584)
    assert batch == math.ceil(3584 / workers)
    engine = engine_for(dec.framework, dec.gpu, fitted=False)
    assert kv_capacity(dec.with_(concurrency=batch), engine)[1]["concurrent_requests"] >= batch
    assert workers > 1  # 3584 clients' 2k-token MLA caches do not fit one 8 x H200 worker
    fewer = math.ceil(3584 / (workers - 1))
    assert kv_capacity(dec.with_(concurrency=fewer), engine)[1]["concurrent_requests"] < fewer


def test_runs_without_worker_counts_get_them_derived_and_stated(catalog):
    """The derived counts fill the run (so ``disagg_concurrency`` splits C over them) and say so; a run
    recording its counts is left as recorded; one without counts or ``_c<C>_`` stays refused."""
    recorded = {
        **R1_RUN,
        "id": "dsr1_h200_trtllm_fp8_disagg_1024x1024_c576_cfg303",
        "prefill_num_workers": 1.0,
        "decode_num_workers": 9.0,
        "decode_batch_size": 64.0,
    }
    no_c = {**R1_RUN, "id": "deepseek_r1_disagg_without_concurrency"}
    runs = pd.DataFrame([R1_RUN, recorded, no_c])
    out = with_derived_workers(runs, catalog, DEFAULT_DATASETS_DIR)
    assert out["workers_derived"].tolist() == [True, False, False]
    derived = out.iloc[0].to_dict()
    assert derived["prefill_num_workers"] >= 1 and derived["decode_num_workers"] >= 1
    pre_c, dec_c = disagg_concurrency(derived)
    assert dec_c == round(3584 / derived["decode_num_workers"])
    assert pre_c == round(3584 / derived["prefill_num_workers"])
    assert disagg_concurrency(out.iloc[1].to_dict()) == (576, 64)
    with pytest.raises(DeploymentError, match="not recorded"):
        disagg_concurrency(out.iloc[2].to_dict())
    note = derived_note(out)
    assert note.startswith("1 disaggregated runs record no worker counts: derived")
    assert f"{int(derived['prefill_num_workers'])}P{int(derived['decode_num_workers'])}D x 1" in note


def _decode(catalog, **decode):
    row = {**R1_RUN, "prefill_num_workers": 1.0, "decode_num_workers": 1.0, **decode}
    return silicon_deployments(row, catalog, DEFAULT_DATASETS_DIR)[1]


def test_decode_split_is_the_recorded_runs_power_of_two_batch(catalog):
    """The decode split a run that records none gets is the one the recorded runs of the same deployment
    show (silicon_sample.csv: TensorRT-LLM DeepSeek-V3 on H200, decode TP 8 -- C = 576 as 9 workers x 64,
    36 as 9 x 4, 28 as 7 x 4; attention DP 8 -- 3584 as 7 x 64 x 8, 1152 as 9 x 16 x 8), not one worker
    packed to its KV capacity (576 clients on one worker: what the memory rule alone derives)."""
    tp8 = _decode(catalog)
    assert power_of_two_decode_workers(tp8, 576) == (9, 64)
    assert power_of_two_decode_workers(tp8, 36) == (9, 4)
    assert power_of_two_decode_workers(tp8, 28) == (7, 4)
    dp8 = _decode(catalog, decode_tp_size=1.0, decode_attention_dp_size=8.0)
    assert power_of_two_decode_workers(dp8, 3584) == (7, 64)
    assert power_of_two_decode_workers(dp8, 1152) == (9, 16)
    assert fewest_decode_workers(tp8, 576)[0] < 9  # the memory rule packs the same clients on fewer


def test_decode_split_falls_back_to_the_fewest_workers_holding_the_clients(catalog):
    """No power-of-two batch within the limits (more than AIConfigurator's 32 decode workers, or clients
    that attention DP does not split evenly): the fewest workers whose KV cache holds the clients."""
    tp8 = _decode(catalog)
    assert MAX_DECODE_WORKERS < 37 // 1  # a prime: only batch 1, 37 workers
    assert power_of_two_decode_workers(tp8, 37) == fewest_decode_workers(tp8, 37)
    assert 3584 // DECODE_BATCH_MAX > MAX_DECODE_WORKERS  # 56 workers of 64 at decode TP 8
    assert power_of_two_decode_workers(tp8, 3584) == fewest_decode_workers(tp8, 3584)
    dp8 = _decode(catalog, decode_tp_size=1.0, decode_attention_dp_size=8.0)
    assert power_of_two_decode_workers(dp8, 100) == fewest_decode_workers(dp8, 100)


def test_a_recorded_run_blanked_gets_its_recorded_decode_split_back(catalog):
    """A recorded run (TensorRT-LLM DeepSeek-V3 H200, 1024/1024, C = 576: 1 prefill, 9 decode workers of
    batch 64) with its counts blanked is derived as recorded; the memory rule derived one decode worker."""
    blank = {**R1_RUN, "id": "dsr1_h200_trtllm_fp8_disagg_1024x1024_c576_cfg303"}
    out = with_derived_workers(pd.DataFrame([blank]), catalog, DEFAULT_DATASETS_DIR).iloc[0].to_dict()
    assert out["workers_derived"] and out["decode_num_workers"] == 9.0
    assert disagg_concurrency(out)[1] == 64
