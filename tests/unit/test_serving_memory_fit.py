"""A question whose tensors do not fit the GPU's memory is refused, naming the sizes (issue 26)."""

from __future__ import annotations

import re

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


def test_a_convolution_is_a_question_with_its_own_dimensions_and_physics() -> None:
    """--op conv2d (NeuSight's dimensions; padding may be 0, as PyTorch's default): answered at or above its
    roofline, the output side from the one conv definition; a filter larger than the padded image, a zero
    channel count and a batch of images larger than the GPU are refused by name."""
    from components.physics.registry import op_work

    conv = {"B": 8, "cin": 64, "cout": 64, "ksize": 3, "insize": 56, "stride": 1, "pad": 0}
    questions = parse_questions([{"op": "conv2d", "shape": conv, "dtype": "fp16", "device": "H100"}])
    (answer,) = answer_questions(_roofline(), questions, model_version="roofline")
    work = op_work("conv", "fp16", {k: [float(v)] for k, v in conv.items()})
    assert answer["gflops"] == pytest.approx(work.flops[0] / answer["duration_us"] / 1e3, rel=1e-6)
    assert work.flops[0] == 2 * 8 * 64 * 54 * 54 * 64 * 9  # a 3x3 filter without padding: 56 -> 54

    refused = [
        ({**conv, "ksize": 61}, "ksize = 61 exceeds the padded image side"),
        ({**conv, "cin": 0}, "cin: 0 is below the smallest size accepted (1)"),
        ({**conv, "B": 64, "insize": 2048}, "does not fit the NVIDIA L4's memory: x[64x64x2048x2048] 32 GiB"),
    ]
    for shape, fragment in refused:
        with pytest.raises(QueryError, match=re.escape(fragment)):
            questions = parse_questions([{"op": "conv2d", "shape": shape, "dtype": "fp16", "device": "L4"}])
            answer_questions(_roofline(), questions, model_version="roofline")
