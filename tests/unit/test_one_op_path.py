"""Every op question goes through the one op engine (``components.opmodel.routing``), which names the tier
that answered it: its data tiers for tensor-dtype GEMMs, attention, MoE and all-reduce; its measured tier for
the other families where the GPU's own kernels are near the shape; the learned tier (the tabular champion's
prediction, unchanged) for the rest."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from components.opmodel.routing import LEARNED_TIER, TIERS, data_tiers_answer
from components.physics.registry import REGISTRY
from components.serving.query import FAMILY_OF_OP
from components.serving.question_forms import parse_questions
from components.serving.questions import answer_frame, answer_questions

# One shape per family a question may name (a family askable without a shape here fails the first test).
SHAPES: dict[str, dict[str, int]] = {
    "gemm": {"M": 1024, "N": 2048, "K": 2048},
    "linear": {"M": 1024, "N": 2048, "K": 2048},
    "bmm": {"B": 4, "M": 256, "N": 256, "K": 64},
    "elementwise": {"N": 1 << 22},
    "softmax": {"B": 64, "H": 4096},
    "layernorm": {"B": 2048, "H": 1024},
    "rmsnorm": {"B": 2048, "H": 4096},
    "attention": {"B": 2, "S": 1024, "KV": 1024, "H": 16, "HKV": 4, "D": 128},
    "moe": {"T": 512, "E": 16, "topk": 2, "H": 2048, "I": 1024},
    "allreduce": {"bytes": 1 << 26, "gpus": 8},
    "conv": {"B": 8, "cin": 64, "cout": 64, "ksize": 3, "insize": 56},
}
MEASURED_GPU = "t4"
GRID = {"M": (256, 512, 1024, 2048), "N": (1024, 2048, 4096), "K": (1024, 2048, 4096)}
LEARNED_FACTOR = 3.0  # the stand-in champion answers three times the analytical roofline time


class _Champion:
    """A tabular predictor's contract: ``predict_columns`` on the serving feature columns."""

    family = "tabular"

    def predict_columns(self, cols: dict) -> dict[str, np.ndarray]:
        return {"pred_duration_us": LEARNED_FACTOR * np.asarray(cols["f_roofline_time_us"], dtype="float64")}


def _measured_fp32_gemms() -> pd.DataFrame:
    """FP32 GEMM kernels of one GPU on a grid (each at 40% of its roofline speed, two repeats each)."""
    from components.devices.catalog import load_catalog
    from components.physics import roofline as physics

    m, n, k = (a.ravel() for a in np.meshgrid(*GRID.values(), indexing="ij"))
    shape = {"M": m.astype("float64"), "N": n.astype("float64"), "K": k.astype("float64")}
    roof = physics.roofline("gemm", "fp32", shape, load_catalog().get(MEASURED_GPU))
    latency = roof.time_us / 0.4
    return pd.DataFrame(
        {
            "device_id": MEASURED_GPU,
            "dtype": "fp32",
            "M": m,
            "N": n,
            "K": k,
            "latency_us": latency,
            "latency_min_us": latency,
            "latency_max_us": latency,
            "n_repeats": 2,
        }
    )


@pytest.fixture()
def engine(tmp_path, monkeypatch):
    from components.opmodel.engine import OpEngine

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))  # no stored calibration reaches the answers
    built = OpEngine.from_frames({"gemm": _measured_fp32_gemms()})
    monkeypatch.setattr("components.serving.engine_answers.engine_for", lambda predictor: built)
    return built


def _ask(rows: list[tuple[str, dict, str, str]]) -> list[dict]:
    questions = parse_questions(
        [{"op": op, "shape": shape, "dtype": dtype, "device": device} for op, shape, dtype, device in rows]
    )
    return answer_questions(_Champion(), questions, model_version="test")


def test_every_family_is_askable_or_answered_by_neither() -> None:
    askable = {family for family, _ in FAMILY_OF_OP.values()}
    for name, fam in REGISTRY.items():
        assert name in askable or not (fam.engine or fam.tabular), name
    assert askable <= set(SHAPES), sorted(askable - set(SHAPES))


def test_every_op_question_is_answered_by_the_engine_and_names_its_tier(engine) -> None:
    rows = []
    for op, (family, _) in FAMILY_OF_OP.items():
        for dtype in ("bf16", "fp32"):
            if family in ("moe", "allreduce") and dtype == "fp32":
                continue
            rows += [(op, SHAPES[family], dtype, "H100"), (op, SHAPES[family], dtype, "T4")]
    answers = _ask(rows)
    assert len(answers) == len(rows)
    for (op, _, dtype, device), answer in zip(rows, answers, strict=True):
        family = FAMILY_OF_OP[op][0]
        where = (op, dtype, device, answer["note"])
        assert answer["tier"] in TIERS, where
        assert np.isfinite(answer["duration_us"]) and answer["duration_us"] >= answer["roofline_us"], where
        if data_tiers_answer(family, dtype):
            assert answer["tier"] != LEARNED_TIER, where
        elif answer["tier"] == LEARNED_TIER:
            assert answer["duration_us"] == pytest.approx(LEARNED_FACTOR * answer["roofline_us"]), where
            assert answer["support"].startswith("the champion model"), where
        else:  # only the GPU with measured FP32 GEMMs answers a learned-tier family from its kernels
            assert (answer["tier"], family, dtype, device) == ("measured", family, "fp32", "T4"), where


def test_measured_kernels_answer_on_their_gpu_the_learned_tier_elsewhere(engine) -> None:
    frame = _measured_fp32_gemms()
    kernel = frame.iloc[7]
    shape = {d: int(kernel[d]) for d in ("M", "N", "K")}
    far = {"M": 64, "N": 64, "K": 64}  # below every measured site: no interpolation reaches it
    answers = _ask(
        [
            ("gemm", shape, "fp32", "T4"),
            ("linear", shape, "fp32", "T4"),
            ("gemm", shape, "fp32", "H100"),
            ("gemm", far, "fp32", "T4"),
            ("gemm", shape, "fp64", "T4"),
        ]
    )
    for answer in answers[:2]:
        assert answer["tier"] == "measured" and answer["support"].startswith("measured kernel")
        assert answer["duration_us"] == pytest.approx(float(kernel["latency_us"]), rel=1e-12)
    for answer in answers[2:]:  # no measured kernel of the GPU and dtype near the shape
        assert answer["tier"] == LEARNED_TIER
        assert answer["duration_us"] == pytest.approx(LEARNED_FACTOR * answer["roofline_us"])


def test_the_registered_models_frame_takes_the_same_path(engine) -> None:
    """The pyfunc's answerer (``answer_frame``: question columns in, answer columns out): the same tiers."""
    kernel = _measured_fp32_gemms().iloc[7]
    exact = json.dumps({d: int(kernel[d]) for d in ("M", "N", "K")})
    frame = pd.DataFrame(
        {
            "device": ["T4", "H100", "H100"],
            "op": ["gemm", "softmax", "gemm"],
            "shape": [exact, json.dumps(SHAPES["softmax"]), json.dumps(SHAPES["gemm"])],
            "dtype": ["fp32", "fp16", "bf16"],
        }
    )
    out = answer_frame(_Champion(), frame, model_version="test")
    assert out["tier"].tolist()[:2] == ["measured", LEARNED_TIER]
    assert out["tier"].iloc[2] in TIERS and out["tier"].iloc[2] != LEARNED_TIER
    assert out["duration_us"].iloc[0] == pytest.approx(float(kernel["latency_us"]), rel=1e-12)


def test_data_tiers_answer_the_tensor_families_only() -> None:
    assert data_tiers_answer("gemm", "bf16") and data_tiers_answer("bmm", "fp8")
    assert data_tiers_answer("attention", "fp16") and data_tiers_answer("allreduce", "bf16")
    assert not data_tiers_answer("gemm", "fp32") and not data_tiers_answer("linear", "fp64")
    for family in ("elementwise", "softmax", "layernorm", "rmsnorm", "conv"):
        assert not data_tiers_answer(family, "fp16"), family
