"""A per-GPU correction stored by `kernelcast calibrate` is applied to that GPU's answers, and only to it."""

from __future__ import annotations

import math

import pytest

from components.models.calibration import Correction
from components.models.roofline import RooflinePredictor
from components.serving.question_forms import parse_questions
from components.serving.questions import answer_questions


def _answers(devices: list[str]) -> list[dict]:
    # fp32: the champion answers it (tensor-dtype GEMMs go to the op engine, whose calibration is its own)
    questions = parse_questions(
        [
            {"op": "gemm", "shape": {"M": 2048, "N": 2048, "K": 2048}, "dtype": "fp32", "device": d}
            for d in devices
        ]
    )
    return answer_questions(RooflinePredictor(), questions, model_version="roofline")


def test_a_stored_correction_scales_only_its_gpu(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    before = _answers(["H100", "A100"])
    h100 = before[0]["device"]
    Correction(method="global", device_id=h100, n_rows=40, global_log=math.log(1.5)).save(
        tmp_path / "calibration" / f"{h100}.json"
    )
    after = _answers(["H100", "A100"])
    assert after[0]["duration_us"] == pytest.approx(1.5 * before[0]["duration_us"])
    assert after[0]["gflops"] == pytest.approx(before[0]["gflops"] / 1.5)
    assert "calibrated on 40 profiled rows" in after[0]["note"]
    assert after[1]["duration_us"] == pytest.approx(before[1]["duration_us"])
    assert "calibrated" not in (after[1]["note"] or "")
