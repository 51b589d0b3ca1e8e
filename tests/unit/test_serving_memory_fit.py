"""A question whose tensors do not fit the GPU's memory is refused, naming the sizes (issue 26)."""

from __future__ import annotations

import pytest

from components.serving.query import QueryError
from components.serving.question_forms import parse_questions
from components.serving.questions import answer_questions

# A GEMM with 223.5 GiB of A: answered for a 24 GB L4 without a word before the check.
HUGE = {"op": "gemm", "shape": {"M": 1_000_000, "N": 1000, "K": 60_000}, "dtype": "fp32"}


def _roofline():
    from components.models.roofline import RooflinePredictor

    return RooflinePredictor()


def test_a_gemm_larger_than_the_gpu_memory_is_refused_naming_sizes_and_memory() -> None:
    questions = parse_questions([{**HUGE, "device": "L4"}])
    with pytest.raises(QueryError) as caught:
        answer_questions(_roofline(), questions, model_version="roofline")
    message = str(caught.value)
    assert message.startswith("question 0.shape:"), message
    assert "A[1000000x60000] 223.5 GiB" in message and "C[1000000x1000] 3.725 GiB" in message, message
    assert "= 227.5 GiB" in message and "L4" in message and "24 GiB" in message, message


def test_questions_that_fit_are_answered_on_every_gpu() -> None:
    rows = [
        {"op": "gemm", "shape": {"M": 8192, "N": 8192, "K": 8192}, "dtype": "bf16", "device": "T4"},
        {"op": "add", "shape": {"N": 1 << 24}, "dtype": "fp32", "device": "L4"},
        {"op": "softmax", "shape": {"B": 4096, "H": 32768}, "dtype": "fp16", "device": "H100"},
    ]
    answers = answer_questions(_roofline(), parse_questions(rows), model_version="roofline")
    assert all(a["duration_us"] > 0 for a in answers)


def test_the_server_refuses_it_with_the_kernel_field() -> None:
    from fastapi.testclient import TestClient

    from components.serving.app import create_app

    with TestClient(create_app("roofline", poll=False)) as client:
        response = client.post("/v1/predict", json={"kernels": [HUGE], "devices": ["L4"]})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "kernels[0].shape" and "does not fit" in error["message"], error


def test_rank_leaves_out_the_gpus_a_workload_does_not_fit_and_says_so(tmp_path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from components.models.roofline import RooflinePredictor
    from components.serving.rank import rank, rank_note, resolve_devices
    from kernelcast.cli import app

    big = {"op": "gemm", "shape": {"M": 100_000, "N": 100_000, "K": 20_000}, "dtype": "bf16"}  # 26 GiB
    specs = resolve_devices(["H100", "T4", "L4"])
    ranking, _ = rank(RooflinePredictor(), [big], [1], specs, None, model_version="roofline")
    assert [e["device"] for e in ranking] == ["h100-sxm"]
    assert rank_note([big], specs, None) == "not ranked, the workload does not fit their memory: t4, l4"
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    result = CliRunner().invoke(
        app,
        [
            "rank",
            "--op",
            "gemm",
            "--shape",
            "M=100000,N=100000,K=20000",
            "--dtype",
            "bf16",
            "--device",
            "H100",
            "--device",
            "T4",
            "--model",
            "roofline",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "note: not ranked, the workload does not fit their memory: t4" in result.output, result.output
