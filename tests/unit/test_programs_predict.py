"""predict_module on catalog GPUs (roofline op model, real sandbox), the trace cache and the
KernelBench bench split on a tiny real subset (real timings from the bundled JSON files)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from components.programs.errors import ProgramError

KERNELBENCH = Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "kernelbench"
MODULE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(16, 32, 3)
    def forward(self, x):
        y = torch.relu(self.conv(x))
        return torch.softmax(y.flatten(1), dim=1)

def get_inputs():
    return [torch.randn(32, 16, 64, 64)]

def get_init_inputs():
    return []
"""
ANSWER_KEYS = {
    "question",
    "device",
    "device_name",
    "kind",
    "duration_us",
    "duration_us_lo",
    "duration_us_hi",
    "achieved_gbps",
    "gflops",
    "l1_hit_rate",
    "l2_hit_rate",
    "arith_intensity",
    "roofline_class",
    "bound_pipe",
    "roofline_us",
    "headroom",
    "ood",
    "note",
    "model_version",
    "breakdown",
}


@pytest.fixture()
def empty_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_predict_module_answers_per_catalog_gpu_with_a_breakdown(tmp_path: Path, empty_home: Path):
    from components.devices import load_catalog
    from components.models.roofline import RooflinePredictor
    from components.physics.bounds import class_of_bound
    from components.programs.module_predict import predict_module

    path = tmp_path / "conv_block.py"
    path.write_text(MODULE)
    catalog = load_catalog()
    answers = predict_module(
        str(path), None, [catalog.resolve("H100"), catalog.resolve("T4")], RooflinePredictor()
    )
    assert [a["device"] for a in answers] == [catalog.resolve("H100").id, catalog.resolve("T4").id]
    for answer in answers:
        assert set(answer) >= ANSWER_KEYS
        assert answer["kind"] == "module"
        assert answer["roofline_class"] == class_of_bound(answer["bound_pipe"])  # issue 34: one rule
        # Learned-or-default overheads come on top of the trace's roofline, never below it.
        assert answer["duration_us"] >= answer["roofline_us"] > 0
        breakdown = json.loads(answer["breakdown"])
        assert {b["op"].split()[0] for b in breakdown} == {"convolution", "relu", "_softmax"}
        assert [b["duration_us"] for b in breakdown] == sorted(
            (b["duration_us"] for b in breakdown), reverse=True
        )
        assert all(b["roofline_class"] == class_of_bound(b["bound"]) and b["count"] == 1 for b in breakdown)
        assert "no learned program model" in answer["note"]  # an empty home has none
    h100, t4 = answers
    assert t4["duration_us"] > h100["duration_us"]


def test_predict_module_errors_name_the_problem(tmp_path: Path, empty_home: Path):
    from components.devices import load_catalog
    from components.models.roofline import RooflinePredictor
    from components.programs.module_predict import predict_module

    spec = [load_catalog().resolve("H100")]
    with pytest.raises(ProgramError, match="dtype 'fp12'"):
        predict_module(MODULE, "fp12", spec, RooflinePredictor())
    path = tmp_path / "no_model.py"
    path.write_text("import torch\n")
    with pytest.raises(ProgramError, match=r"no_model\.py: cannot trace the module: no Model defined"):
        predict_module(str(path), None, spec, RooflinePredictor())


def _tiny_kernelbench(problems: int = 8):
    """Real eager timings of the first level-1 problems of the v0.1 tree, as the ingest adapter reads them."""
    from components.devices import load_catalog
    from components.ingest.kernelbench import ingest

    out = ingest(KERNELBENCH, load_catalog())
    kernels = out.kernels[
        out.kernels["source_text"].notna()
        & out.kernels["name"].str.endswith("@v0.1+")
        & out.kernels["program"].str.startswith("level1/")
    ]
    simple = kernels[kernels["op"].str.contains("ReLU|Sigmoid|Tanh|GELU|Softmax|Matmul", regex=True)]
    chosen = simple.sort_values("name").head(problems)
    measurements = out.measurements[out.measurements["kernel_id"].isin(set(chosen["kernel_id"]))]
    measurements = measurements[measurements["params_json"].str.contains('"mode":"eager"')]
    return measurements, chosen


@pytest.mark.skipif(not KERNELBENCH.is_dir(), reason="shared KernelBench data not present")
def test_kernelbench_bench_scores_every_held_out_gpu_beside_the_trace_roofline(tmp_path: Path):
    from components.evaluation.kernelbench_bench import FAMILY_MODEL, FAMILY_ROOFLINE, run_kernelbench_bench
    from components.programs import kernelbench_data

    measurements, kernels = _tiny_kernelbench()
    bench = run_kernelbench_bench(
        measurements, kernels, tmp_path / "cache", min_held_out_rows=3, min_train_rows=10
    )
    rows = pd.DataFrame(bench.rows)
    level1 = rows[rows["scope"].str.match(r"level=1,device=[^,]+$") & (rows["metric"] == "mape")]
    assert set(level1["family"]) == {FAMILY_MODEL, FAMILY_ROOFLINE}
    assert level1["target"].str.match(r"duration_us\[level=1,device=[a-z0-9-]+\]").all()
    assert level1["ours"].notna().all() and level1["n"].gt(0).all()
    # Every timing row is predicted or has a stated reason: the asked rows add up.
    held = set(bench.predictions["device_id"])
    timed = measurements[measurements["device_id"].isin(held)].groupby(["kernel_id", "device_id"]).ngroups
    reasons = bench.reasons[bench.reasons["device_id"].isin(held)]
    assert len(bench.predictions) + len(reasons) == timed
    assert (level1["n"] <= level1["n_asked"]).all()
    # The ops' GPU time inside each answer (what the error-mass tables split on): never above the answer.
    scored = bench.predictions
    assert (scored["pred_ops"] > 0).all() and (scored["pred_ops"] <= scored["pred_model"] * (1 + 1e-9)).all()
    assert bench.notes and "with a stated reason" in bench.notes[0] and "in scope (traced)" in bench.notes[0]
    # The traces are cached by content: a second run traces nothing.
    cached = kernelbench_data.cache_path(tmp_path / "cache")
    assert cached.is_file()

    def refuse(*_args, **_kwargs):
        raise AssertionError("retraced a cached module")

    original = kernelbench_data.trace_many
    kernelbench_data.trace_many = refuse
    try:
        texts = dict(zip(kernels["kernel_id"], kernels["source_text"], strict=True))
        assert all(r.ok for r in kernelbench_data.cached_traces(texts, tmp_path / "cache").values())
    finally:
        kernelbench_data.trace_many = original


SDPA_MODULE = """
import torch
import torch.nn.functional as F

class Model(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=IS_CAUSAL)

def get_inputs():
    return [torch.randn(8, 16, 2048, 64, dtype=torch.float16) for _ in range(3)]

def get_init_inputs():
    return []
"""


def test_sdpa_module_total_never_below_its_ops_and_causal_halves_the_flops(empty_home: Path):
    """The issue's case: a learned program model whose efficiency for attention is high put the
    module's total (1,400 us) below its only op (3,552 us); causal attention was counted as full."""
    from components.devices import load_catalog
    from components.models.roofline import RooflinePredictor
    from components.programs.module_predict import predict_module
    from components.programs.overheads import ConfigModel, ProgramModel

    spec = [load_catalog().resolve("H100")]
    predictor = RooflinePredictor()
    predictor.program_model = ProgramModel(
        "roofline", {"eager": ConfigModel({"attention": 3.0}, 4.0, 6.0, q_log=0.3)}
    )
    full, causal = (
        predict_module(SDPA_MODULE.replace("IS_CAUSAL", flag), "fp16", spec, predictor)[0]
        for flag in ("False", "True")
    )
    for answer in (full, causal):
        (op,) = (
            answer["breakdown"] if isinstance(answer["breakdown"], list) else json.loads(answer["breakdown"])
        )
        assert op["op"].startswith("scaled_dot_product_attention"), op
        assert ("(causal)" in op["op"]) == (answer is causal) and "_for_cpu" not in op["op"]
        assert answer["duration_us"] >= op["duration_us"] - 1e-3 > 0, (
            answer["duration_us"],
            op,
        )  # 3 decimals
        assert answer["duration_us_lo"] >= op["duration_us"] - 1e-3
        # one model: an efficiency above 1 is not applied to the op, nothing is raised afterwards
        assert "total = the ops' GPU time" in answer["note"] and "raised" not in answer["note"]
        assert answer["duration_us"] >= answer["roofline_us"]
    flops = 4 * 8 * 16 * 2048 * 2048 * 64  # QK^T and PV, 2 FLOPs per multiply-add
    assert full["gflops"] * full["duration_us"] * 1e3 == pytest.approx(flops, rel=1e-6)
    assert causal["gflops"] * causal["duration_us"] * 1e3 == pytest.approx(flops / 2, rel=0.01)
    assert causal["roofline_us"] < 0.6 * full["roofline_us"]


def test_program_model_total_is_its_ops_plus_non_negative_time_between_them():
    """One model: whatever efficiency a fit asks for, an op kind never runs faster than its basis time,
    and what is learned on top (launch gaps, host dispatch, the correction) only adds."""
    from components.programs.overheads import ConfigModel
    from components.programs.program_features import FEATURE_KINDS

    frame = pd.DataFrame(
        {
            **{f"pred_{k}": [0.0, 0.0] for k in FEATURE_KINDS},
            "pred_gemm": [500.0, 20.0],
            "pred_elementwise": [100.0, 5.0],
            "n_kernels": [3.0, 3.0],
            "n_aten": [10.0, 400.0],
        }
    )
    model = ConfigModel({"gemm": 2.0, "elementwise": -0.5}, launch_us=4.0, framework_us=6.0)
    ops = model.ops(frame, "pred")
    assert ops.tolist() == pytest.approx([500.0 + 100.0 * 2.718281828**0.5, 20.0 + 5.0 * 2.718281828**0.5])
    total = model.predict(frame, "pred")
    assert (total >= ops).all()
    assert total[1] >= 400 * 6.0 - 1e-6  # host-bound: 400 calls x 6 us of dispatch, not hidden


def test_a_predictor_folder_answers_a_program_with_the_program_model_it_carries(
    tmp_path: Path, empty_home: Path
):
    """``--model DIR``: every part of the answer from DIR, the program model included (the state's
    models/programs/ is empty here: before, the answer said "no learned program model yet")."""
    from components.devices import load_catalog
    from components.models import PROGRAM_MODEL_FILE, load_predictor
    from components.models.roofline import RooflinePredictor
    from components.programs.module_predict import basis_id, predict_module
    from components.programs.overheads import ConfigModel, ProgramModel

    folder = tmp_path / "predictor"
    RooflinePredictor().save(folder)
    launch_us = 1000.0  # far above any default: the answer shows whose launch cost it used
    carried = ProgramModel(basis_id(RooflinePredictor()), {"eager": ConfigModel({}, launch_us, 6.0)})
    carried.save(folder / PROGRAM_MODEL_FILE)
    module = tmp_path / "conv_block.py"
    module.write_text(MODULE)
    h100 = load_catalog().resolve("H100")
    (answer,) = predict_module(str(module), None, [h100], load_predictor(folder))
    assert "no learned program model" not in answer["note"]
    n_kernels = int(answer["note"].split(" kernels from")[0])
    assert answer["duration_us"] >= n_kernels * launch_us
    (plain,) = predict_module(str(module), None, [h100], RooflinePredictor())  # no folder: as before
    assert "no learned program model" in plain["note"] and plain["duration_us"] < n_kernels * launch_us


def test_a_folders_program_model_fitted_on_another_predictor_falls_back_to_the_states(tmp_path: Path):
    from components.programs.module_predict import basis_id, program_model_path, resolve_program_model
    from components.programs.overheads import ConfigModel, ProgramModel

    class Predictor:
        family = "tabular"
        config = ("fitted", "state")

    predictor = Predictor()
    basis = basis_id(predictor)
    stale = tmp_path / "folder" / "program_model.json"
    ProgramModel("tabular-000000000000", {"eager": ConfigModel({}, 7.0, 6.0)}).save(stale)
    ProgramModel(basis, {"eager": ConfigModel({}, 5.0, 6.0)}).save(program_model_path(tmp_path, basis))
    predictor.program_model_file = stale
    model, matches = resolve_program_model(predictor, tmp_path)
    assert (model.basis, matches, model.config().launch_us) == (basis, True, 5.0)
    ProgramModel(basis, {"eager": ConfigModel({}, 9.0, 6.0)}).save(stale)  # its own: it wins
    model, matches = resolve_program_model(predictor, tmp_path)
    assert (model.basis, matches, model.config().launch_us) == (basis, True, 9.0)
