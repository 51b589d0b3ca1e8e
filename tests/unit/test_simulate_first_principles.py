"""The serving simulation against times worked out by hand on a small case, and its reuse of identical runs.

A step model with flat grids (every non-attention op a fixed time, decode attention ``a x batch x context``:
bilinear interpolation is exact on it) and a step cost of a base and a per-sequence term: a batch of N
requests whose prompts all fit one step is one prefill step, then OSL - 1 decode steps of the N sequences.
Each figure below follows from that sum alone, not from running the code (no GPU: synthetic step times).
"""

from __future__ import annotations

import numpy as np
import pytest

from components.deployments.engines.base import StepCost
from components.deployments.engines.registry import engine_for
from components.deployments.simulate import BATCH, CLOSED, Workload, simulate
from components.deployments.stepmodel import CTX, SEQS, TOKENS, StepModel
from components.devices import load_catalog

LINEAR_US, HEAD_US, CHUNK_US = 300.0, 40.0, 25.0  # every non-attention op; LM head; one prefill chunk
BASE_US, PER_SEQ_US = 2000.0, 3.0
N, ISL = 4, 256


def _flat_step(attn_per_token_us: float) -> StepModel:
    """Synthetic (mocked-GPU) step times: fixed linear, head and chunk times, decode attention linear in
    the batch times the context."""
    tok, seq, ctx = (np.asarray(g, dtype="float64") for g in (TOKENS, SEQS, CTX))
    return StepModel(
        tokens=tok,
        linear_dec=np.full(len(tok), LINEAR_US),
        linear_pre=np.full(len(tok), LINEAR_US),
        head=np.full(len(seq), HEAD_US),
        seqs=seq,
        ctx=ctx,
        attn_dec=attn_per_token_us * seq[:, None] * ctx[None, :],
        attn_pre=np.full((len(tok), len(ctx)), CHUNK_US),
    )


@pytest.fixture(scope="module")
def engine():
    spec = load_catalog().resolve("h100-sxm")
    eng = engine_for("vllm", spec, fitted=False).with_cost(StepCost(base_us=BASE_US, per_seq_us=PER_SEQ_US))
    assert eng.max_num_batched_tokens >= N * ISL and eng.max_num_seqs >= N  # one prefill step holds them
    return eng


def _metrics(engine, attn: float, osl: int) -> dict[str, float]:
    stats = simulate(_flat_step(attn), engine, 1e7, Workload(ISL, osl, N, BATCH))
    return stats.metrics()


def test_a_batch_costs_one_prefill_step_then_identical_decode_steps_by_hand(engine):
    """No context term: TTFT is the prefill step (linear + head + N chunks + base + N sequences), TPOT one
    decode step (linear + head + base + N sequences), e2e and throughput follow."""
    got = _metrics(engine, 0.0, 65)
    ttft = LINEAR_US + HEAD_US + N * CHUNK_US + BASE_US + N * PER_SEQ_US
    tpot = LINEAR_US + HEAD_US + BASE_US + N * PER_SEQ_US
    e2e = ttft + 64 * tpot
    assert got["ttft_ms"] == pytest.approx(ttft / 1e3, rel=1e-12)
    assert got["tpot_ms"] == pytest.approx(tpot / 1e3, rel=1e-12)
    assert got["e2e_ms"] == pytest.approx(e2e / 1e3, rel=1e-12)
    assert got["tokens_per_s"] == pytest.approx(N * 65 / (e2e / 1e6), rel=1e-12)


def test_decode_steps_jumped_in_one_move_cost_their_mean_context(engine):
    """Attention a x N x context: the decode steps' contexts rise by one a step, so 64 more output tokens
    raise the mean context by 32 and TPOT by a x N x 32 (whatever the first step's context), exactly as
    the steps one by one would."""
    a = 0.01
    short, long = _metrics(engine, a, 65), _metrics(engine, a, 129)
    assert long["tpot_ms"] - short["tpot_ms"] == pytest.approx(a * N * 32 / 1e3, rel=1e-9)
    assert long["ttft_ms"] == pytest.approx(short["ttft_ms"], rel=1e-12)  # the same prefill step


def test_identical_simulations_run_once_with_a_memo_and_answer_the_same(engine):
    step = _flat_step(0.01)
    work = Workload(ISL, 33, 3, CLOSED, requests=6, warmup=3, stagger_us=500.0)
    memo: dict = {}
    first = simulate(step, engine, 1e7, work, memo)
    assert simulate(step, engine, 1e7, work, memo) is first and len(memo) == 1
    other = simulate(step, engine, 1e7, Workload(ISL, 34, 3, CLOSED, requests=6, warmup=3), memo)
    assert other is not first and len(memo) == 2
    fresh = simulate(step, engine, 1e7, work)  # without a memo: the same answer, run again
    assert fresh is not first
    for name in ("arrival_us", "first_us", "finish_us", "f_arrival", "f_first", "f_finish"):
        np.testing.assert_array_equal(getattr(fresh, name), getattr(first, name))
