"""The question schema (parse_questions / answer_questions / answer_frame) and its vectorised featuriser."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from components.models.roofline import RooflinePredictor
from components.serving.answer_fields import ANSWER_KEYS
from components.serving.op_answers import op_table
from components.serving.query import QueryError, query_frames
from components.serving.question_forms import parse_questions
from components.serving.questions import answer_frame, answer_questions

SAMPLE = [
    ("gemm", {"M": 4096, "N": 4096, "K": 4096}, "bf16", "H100"),
    ("linear", {"B": 4, "M": 512, "N": 1024, "K": 768}, "fp16", "A100"),
    ("bmm", {"B": 8, "M": 64, "N": 48, "K": 32}, "fp32", "T4"),
    ("gemm", {"M": 128, "N": 256, "K": 64}, "fp8", "V100"),
    ("add", {"N": 1 << 20}, "fp32", "MI300X"),
    ("gelu", {"B": 64, "H": 4096}, "bf16", "L4"),
    ("silu", {"N": 12345}, "fp16", "H100"),
    ("softmax", {"B": 64, "H": 4096}, "fp16", "A100"),
    ("layernorm", {"B": 2048, "H": 1024}, "fp32", "H100"),
    ("rmsnorm", {"B": 7, "H": 4096}, "bf16", "MI300X"),
    ("gemm", {"M": 4096, "N": 4096, "K": 4096}, "fp64", "A100"),
]


def _questions():
    return parse_questions(
        [{"op": op, "shape": shape, "dtype": dtype, "device": device} for op, shape, dtype, device in SAMPLE]
    )


def test_vectorised_features_equal_the_feature_builders(tmp_path, monkeypatch) -> None:
    """The serving featuriser and build_feature_table compute the same f_/m_/dev_ columns, row by row."""
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    from components.devices import load_catalog
    from components.features.build import build_feature_table

    fast = op_table(_questions())
    catalog = load_catalog()
    for row, (op, shape, dtype, device) in enumerate(SAMPLE):
        measurements, kernels = query_frames(op, shape, dtype, [catalog.resolve(device).id])
        slow = build_feature_table(measurements, kernels, catalog)
        columns = [c for c in slow.columns if c.startswith(("f_", "m_", "dev_"))]
        assert set(columns) <= set(fast.columns)
        for column in columns:
            expected, got = slow[column].iloc[0], fast[column].iloc[row]
            if isinstance(expected, str) or column in ("f_bound", "m_bound"):
                assert (pd.isna(expected) and pd.isna(got)) or expected == got, (op, column)
            else:
                assert np.allclose(float(expected), float(got), rtol=1e-12, equal_nan=True), (
                    op,
                    device,
                    column,
                )


def test_answers_carry_every_key_and_the_roofline_view() -> None:
    answers = answer_questions(RooflinePredictor(), _questions(), model_version="roofline")
    assert [a["question"] for a in answers] == list(range(len(SAMPLE)))
    for answer in answers:
        assert set(ANSWER_KEYS) <= set(answer)
        assert (
            answer["kind"] == "op" and answer["model_version"] == "roofline" and answer["breakdown"] is None
        )
        assert answer["roofline_us"] > 0 and answer["headroom"] == pytest.approx(1.0)
        assert answer["bound_pipe"] in {"tensor", "fp32", "fp64", "sfu", "dram", "l2", "launch"}
    gemm = answers[0]
    assert gemm["roofline_class"] == "compute" and gemm["bound_pipe"] == "tensor"
    assert answers[4]["roofline_class"] == "bandwidth" and answers[4]["bound_pipe"] == "dram"
    assert answers[10]["bound_pipe"] in ("fp64", "tensor")  # A100 has FP64 tensor cores
    assert "fp8" in answers[3]["note"]  # V100 has no fp8: the answer says it is an emulation estimate


@pytest.mark.parametrize(
    ("row", "fragments"),
    [
        ({"op": "gemm", "shape": {"M": 64, "N": 64}, "device": "H100"}, ("missing K", "M, N, K")),
        ({"op": "add", "shape": {"N": 10, "Q": 3}, "device": "H100"}, ("unknown Q",)),
        (
            {"op": "gemm", "shape": {"M": 1, "N": 1, "K": 1}, "dtype": "banana", "device": "H100"},
            ("banana", "fp32, tf32"),
        ),
        ({"op": "gemm", "shape": {"M": 10**12, "N": 4, "K": 4}, "device": "H100"}, ("68,719,476,736",)),
        (
            {"op": "gemm", "shape": {"M": 2**24, "N": 2**24, "K": 2**20}, "device": "H100"},
            ("2**36 per tensor",),
        ),
        (
            {
                "op": "attention",
                "shape": {"B": 1, "S": 8, "KV": 4, "H": 8, "HKV": 8, "D": 64},
                "device": "H100",
            },
            ("S = 8", "KV = 4"),
        ),
        (
            {
                "op": "attention",
                "shape": {"B": 1, "S": 1, "KV": 4, "H": 6, "HKV": 4, "D": 64},
                "device": "H100",
            },
            ("multiple of HKV",),
        ),
        ({"op": "allreduce", "shape": {"bytes": 1024, "gpus": 1}, "device": "H100"}, ("at least 2 GPUs",)),
        ({"op": "add", "shape": {"N": 1024}, "dtype": "int4_wo", "device": "H100"}, ("weight quantisation",)),
        ({"op": "add", "shape": {"N": 2**24, "B": 4}, "device": "H100"}, ("shape",)),
        ({"op": "gemm", "shape": {"M": 0, "N": 1, "K": 1}, "device": "H100"}, ("shape.M",)),
        ({"op": "gemm", "shape": {"M": 1.5, "N": 1, "K": 1}, "device": "H100"}, ("shape.M",)),
        ({"op": "gemm", "shape": "{not json", "device": "H100"}, ("not valid JSON",)),
        ({"op": "conv9", "shape": {"M": 1}, "device": "H100"}, ("conv9", "gemm")),
        ({"op": "gemm", "shape": {"M": 1, "N": 1, "K": 1}, "device": "H999"}, ("H999",)),
        ({"op": "gemm", "shape": {"M": 1, "N": 1, "K": 1}}, ("exactly one of device",)),
        (
            {"op": "gemm", "shape": {"M": 1, "N": 1, "K": 1}, "device": "H100", "device_spec": "{}"},
            ("exactly one of",),
        ),
        (
            {"op": "gemm", "shape": {"M": 1, "N": 1, "K": 1}, "module": "x", "device": "H100"},
            ("exactly one kernel form",),
        ),
        ({"device": "H100"}, ("exactly one kernel form",)),
        ({"op": "gemm", "shape": {"M": 1, "N": 1, "K": 1}, "device": "H100", "colour": "red"}, ("colour",)),
        (
            {
                "source": "__global__ void k(){}",
                "language": "fortran",
                "launch": {"grid": [1], "block": [1]},
                "device": "H100",
            },
            ("fortran", "cuda, hip"),
        ),
        (
            {
                "source": "__global__ void k(){}",
                "language": "cuda",
                "launch": {"grid": [1]},
                "device": "H100",
            },
            ("missing 'block'",),
        ),
        (
            {
                "source": "__global__ void k(){}",
                "language": "cuda",
                "launch": {"grid": [1], "block": [64, 32]},
                "device": "H100",
            },
            ("2048 threads",),
        ),
        (
            {
                "source": "x" * 300_000,
                "language": "cuda",
                "launch": {"grid": [1], "block": [1]},
                "device": "H100",
            },
            ("at most 200,000",),
        ),
        ({"op": "gemm", "shape": {"M": 1, "N": 1, "K": 1}, "device_spec": {"name": "X"}}, ("device_spec",)),
    ],
)
def test_malformed_questions_are_errors_naming_row_and_field(row: dict, fragments: tuple[str, ...]) -> None:
    good = {"op": "add", "shape": {"N": 4}, "device": "T4"}
    with pytest.raises(QueryError) as info:
        parse_questions([good, row])
    message = str(info.value)
    assert "question 1" in message and all(f in message for f in fragments), message


def test_a_full_device_spec_and_a_json_shape_are_accepted() -> None:
    from components.devices import load_catalog

    spec = load_catalog().resolve("H100").model_dump()
    spec.update(id="my-h100", name="My H100", aliases=())
    questions = parse_questions(
        [
            {
                "op": "gemm",
                "shape": json.dumps({"M": 256, "N": 256, "K": 256}),
                "device_spec": json.dumps(spec),
                "dtype": "bfloat16",
            },
            {"op": "gemm", "shape": {"M": 256, "N": 256, "K": 256}, "device": "H100", "dtype": "bf16"},
        ]
    )
    assert questions[0].dtype == "bf16" and questions[0].device.id == "my-h100"
    mine, catalog = answer_questions(RooflinePredictor(), questions, model_version="roofline")
    assert mine["device"] == "my-h100" and mine["duration_us"] == pytest.approx(catalog["duration_us"])


def test_modules_are_refused_unless_allowed() -> None:
    questions = parse_questions([{"module": "class Model: pass", "device": "H100"}])
    with pytest.raises(QueryError, match="--allow-modules"):
        answer_questions(RooflinePredictor(), questions, model_version="roofline")


def test_answer_frame_is_what_the_pyfunc_returns() -> None:
    frame = pd.DataFrame(
        {
            "device": ["H100", "T4"],
            "op": ["gemm", "add"],
            "shape": ['{"M": 64, "N": 64, "K": 64}', '{"N": 4096}'],
            "dtype": ["fp16", None],
            "source": [None, None],
            "device_spec": [None, np.nan],
        }
    )
    out = answer_frame(RooflinePredictor(), frame, model_version="roofline")
    assert list(out.columns[: len(ANSWER_KEYS)]) == list(ANSWER_KEYS) and len(out) == 2
    assert out["device"].tolist() == ["h100-sxm", "t4"] and out["duration_us"].gt(0).all()
    with pytest.raises(QueryError, match="question 1"):
        answer_frame(RooflinePredictor(), frame.assign(dtype=["fp16", "banana"]), model_version="roofline")
