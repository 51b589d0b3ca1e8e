"""An MoE's grouped GEMM (``aten._grouped_mm``, Hugging Face's default experts implementation) is answered
as GEMM work with the experts its routed rows touch (physics/moe.py's uniform-routing count), not as a
bytes-moved op that reads every expert's weights."""

from __future__ import annotations

import numpy as np
import pytest

from components.physics.moe import experts_touched
from components.physics.registry import op_work
from components.programs.ops import map_op, program_ops
from tests.unit.test_programs_ops import _op


def _router(tokens: int, experts: int, k: int) -> dict:
    return _op(
        "topk",
        [([tokens, experts], "float32")],
        [([tokens, k], "float32"), ([tokens, k], "int64")],
        [None, k],
    )


def _grouped(rows: int, experts: int, k: int, n: int, dtype: str = "bfloat16") -> dict:
    return _op(
        "_grouped_mm",
        [([rows, k], dtype), ([experts, k, n], dtype), ([experts], "int32")],
        [([rows, n], dtype)],
        [None, None, None],
    )


def _work(question):
    shape = {name: np.asarray([value]) for name, value in question.shape}
    work = op_work(question.family, question.dtype, shape, op=question.op)
    return float(work.flops[0]), float(work.dram_bytes[0])


def test_a_grouped_gemm_after_its_router_touches_the_experts_the_moe_family_counts():
    # Qwen3-30B-A3B's gate/up projection: 512 tokens x top-8 of 128 experts -> 4,096 routed rows
    program = program_ops([_router(512, 128, 8), _grouped(4096, 128, 2048, 1536)])
    question = next(q for q in program.questions if q.aten == "_grouped_mm")
    assert (question.kind, question.family, question.mapped) == ("bmm", "bmm", True)
    touched = float(experts_touched(512.0, 128.0, 8.0))
    shape = dict(question.shape)
    assert shape["B"] == pytest.approx(touched, rel=1e-4)
    assert shape["B"] * shape["M"] == pytest.approx(4096.0)
    flops, nbytes = _work(question)
    assert flops == pytest.approx(2.0 * 4096 * 2048 * 1536, rel=1e-9)  # every routed row through its expert
    # rows in and out once, each touched expert's weights once (bf16: 2 bytes)
    assert nbytes == pytest.approx(2.0 * (4096 * 2048 + 4096 * 1536 + touched * 2048 * 1536), rel=1e-4)
    assert not program.unmapped


def test_a_decode_step_reads_only_the_experts_its_few_tokens_touch():
    few = program_ops([_router(2, 128, 8), _grouped(16, 128, 2048, 1536)])
    question = next(q for q in few.questions if q.aten == "_grouped_mm")
    _, nbytes = _work(question)
    every_expert = 128 * 2048 * 1536 * 2.0
    # 2 tokens x top-8 touch ~15.5 experts: an eighth of the weights, where the bytes-moved estimate read all
    assert nbytes < every_expert / 7
    assert question.bytes_moved > every_expert  # what the traced tensors hold (the old estimate's traffic)


def test_without_a_matching_router_the_rows_are_independent_picks():
    alone = map_op(_grouped(96, 3, 128, 64, "float32"))
    shape = dict(alone.shape)
    assert shape["B"] == pytest.approx(float(experts_touched(96.0, 3.0, 1.0)), rel=1e-4)
    assert alone.dtype == "fp32"
    # a router of another width (a sampler's top-k) does not set the experts
    other = program_ops([_router(4, 50000, 8), _grouped(96, 3, 128, 64, "float32")])
    assert dict(next(q for q in other.questions if q.aten == "_grouped_mm").shape) == dict(alone.shape)


def test_the_weight_gradient_layout_is_a_grouped_gemm_too():
    # backward of the experts' weights: A^T [K, R] x dY [R, N] -> [G, K, N]
    grad = map_op(
        _op(
            "_grouped_mm",
            [([2048, 4096], "bfloat16"), ([4096, 1536], "bfloat16"), ([128], "int32")],
            [([128, 2048, 1536], "bfloat16")],
        )
    )
    assert grad.kind == "bmm"
    flops, _ = _work(grad)
    assert flops == pytest.approx(2.0 * 2048 * 4096 * 1536, rel=1e-9)


def test_an_unknown_grouped_layout_keeps_the_named_bytes_moved_fallback():
    odd = map_op(
        _op("_grouped_mm", [([4, 8, 16], "bfloat16"), ([4, 16, 8], "bfloat16")], [([4, 8, 8], "bfloat16")])
    )
    assert (odd.kind, odd.family, odd.mapped) == ("bmm", "elementwise", False)
