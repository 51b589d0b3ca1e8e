"""LLM deployments with the op engine: per-op tiers in the answer, one batch per GPU, the unseen-GPU variant,
the op source chosen on the training side, the MAPE fit, the gate entry and the README's serving block.

The engine here is a real ``OpEngine`` on a real measured store built from one AIConfigurator table (H100
GEMMs of one vLLM version, as in test_opmodel_tiers.py), without a spec model (its spec tier is the roofline
at 50%).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from components.deployments.bench import gate_entry
from components.deployments.bench_common import (
    FAMILY,
    FAMILY_ENGINE,
    FAMILY_ROOF_OPS,
    FAMILY_UNSEEN,
    relative_l1,
)
from components.deployments.bench_pipeweave import compose_pipeweave, run_pipeweave_bench
from components.deployments.bench_readme import SERVING_END, SERVING_START, write_readme
from components.deployments.compose import compose_many, compose_phases
from components.deployments.config import Deployment, model_shape
from components.deployments.data import read_pipeweave_runs
from components.deployments.framework_cost import answer
from components.deployments.ops import engine_op_time, roofline_op_time
from components.devices import load_catalog
from components.platform.config import DEFAULT_DATASETS_DIR
from tests.unit.test_deployments import LLAMA8B  # one config of the model both files ask about

DATA = DEFAULT_DATASETS_DIR
AIC = DATA / "aiconfigurator"
TABLE = "aic-core/src/aiconfigurator_core/systems/data/h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"
needs_data = pytest.mark.skipif(
    not (DATA / "pipeweave" / "config").is_dir() or not (AIC / TABLE).is_file(),
    reason="public datasets not present",
)


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory):
    from components.opmodel.engine import OpEngine
    from components.opmodel.store import build_store

    root = tmp_path_factory.mktemp("aic")
    link = root / TABLE
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(AIC / TABLE)
    build_store(root, root / "store", families=("gemm",))
    return OpEngine.from_store(root / "store")


def _llama(catalog, gpu: str = "h100-sxm", **kw) -> Deployment:
    fields = {"isl": 1024, "osl": 64, "concurrency": 8, "tp": 1, **kw}
    return Deployment(model=model_shape(LLAMA8B), gpu=catalog.resolve(gpu), **fields)


def test_compose_many_equals_one_deployment_at_a_time(catalog):
    """Batching every deployment of a GPU into one op-time call per kind of op changes no figure."""
    ds = [_llama(catalog), _llama(catalog, tp=2, concurrency=3), _llama(catalog, "l40s", isl=333, osl=7)]
    calls: list[tuple[str, str]] = []

    def counted(family, dtype, shape, spec, kv_dtype=None):
        calls.append((family, spec.id))
        return roofline_op_time(family, dtype, shape, spec, kv_dtype=kv_dtype)

    together = compose_many(ds, counted)
    alone = [compose_phases(d) for d in ds]
    for a, b in zip(together, alone, strict=True):
        assert a.prefill_kernels_us == pytest.approx(b.prefill_kernels_us, rel=1e-12)
        assert a.decode_kernels_us == pytest.approx(b.decode_kernels_us, rel=1e-12)
        assert a.prefill_one_us == pytest.approx(b.prefill_one_us, rel=1e-12)
    gemm_calls = [gpu for family, gpu in calls if family == "gemm"]
    assert sorted(gemm_calls) == ["h100-sxm", "l40s"]  # one GEMM call per GPU for all three deployments


@needs_data
def test_engine_answers_name_each_ops_tier_and_unseen_withholds_the_gpus_kernels(catalog, engine):
    d = _llama(catalog)
    seen = compose_phases(d, engine_op_time(engine))
    blind = compose_phases(d, engine_op_time(engine, unseen=frozenset({"h100-sxm"})))
    tiers = {line.kind: line.tier for line in seen.prefill}
    assert tiers["gemm"] == "measured"  # the H100's own GEMM table answers
    assert tiers["norm"] == "roofline" and tiers["activation"] == "roofline"
    assert tiers["attention"] == "spec"  # no attention table in this store
    assert {line.tier for line in blind.prefill if line.kind == "gemm"} == {"spec"}
    assert seen.prefill_kernels_us != pytest.approx(blind.prefill_kernels_us, rel=0.01)
    for lines in (seen.prefill, seen.decode, blind.decode):  # never below the speed of light
        assert all(line.time_us >= line.floor_us * (1 - 1e-9) for line in lines)
    a = answer(d, engine_op_time(engine))
    assert a.breakdown["prefill"]["gemm"]["tier"] == "measured"
    assert "roofline" in a.breakdown["prefill"]["norm"]["tier"]


@needs_data
def test_pipeweave_bench_with_the_engine_scores_every_variant(catalog, engine):
    runs = read_pipeweave_runs(DATA)
    subset = runs[runs["gpu"].isin(["A100", "H100", "H200", "L40"]) & (runs["tp"] == 1)]
    bench = run_pipeweave_bench(DATA, catalog, runs=subset, engine=engine)
    rows = {(r["family"], r["target"]): r["ours"] for r in bench.rows}
    for family in (FAMILY, FAMILY_ENGINE, FAMILY_UNSEEN, FAMILY_ROOF_OPS):
        assert np.isfinite(rows[(family, "total_ms")])
    # only the H100 has measured kernels in this store: withholding them changes the H100's answers where
    # its fold chose the engine for prefill; a phase a fold answers with roofline ops is the same in both
    chosen, blind = bench.predictions, bench.variants[FAMILY_UNSEEN]
    for phase in ("prefill", "decode"):
        roof = (chosen[f"{phase}_source"] == "roofline").to_numpy()
        np.testing.assert_allclose(chosen.loc[roof, f"{phase}_pred_ms"], blind.loc[roof, f"{phase}_pred_ms"])
    h100 = (chosen["gpu"] == "H100").to_numpy()
    if (chosen.loc[h100, "prefill_source"] == "engine").any():
        assert not np.allclose(chosen.loc[h100, "prefill_pred_ms"], blind.loc[h100, "prefill_pred_ms"])
    assert "op source per phase chosen by inner leave-one-GPU-out" in bench.notes[0]
    assert set(bench.predictions["prefill_source"]) <= {"engine", "roofline"}


@needs_data
def test_relative_l1_recovers_the_cost_and_beats_least_squares_on_mape(catalog):
    composed = compose_pipeweave(read_pipeweave_runs(DATA), catalog, DATA)
    kernels = composed["decode_kernels_us"].to_numpy()
    x = np.c_[np.ones(len(kernels)), kernels]
    truth = np.array([2500.0, 0.1])
    exact = relative_l1(x, x @ truth, x @ truth + kernels, [(0.0, None), (-0.5, 1.0)])
    np.testing.assert_allclose(exact, truth, rtol=1e-6)
    measured = composed["decode_ms"].to_numpy() * 1e3
    l1 = relative_l1(x, measured - kernels, measured, [(0.0, None), (-0.5, 1.0)])
    from scipy.optimize import lsq_linear

    w = 1.0 / measured
    l2 = lsq_linear(x * w[:, None], (measured - kernels) * w, bounds=([0.0, -0.5], [np.inf, 1.0])).x

    def mape(c):
        return np.mean(np.abs(kernels + x @ c - measured) / measured)

    assert mape(l1) <= mape(l2) + 1e-12


@needs_data
def test_gate_entry_gives_the_gates_metrics(catalog):
    entry = gate_entry("llm-serving-pipeweave", DATA, catalog, engine=None)
    metrics = entry["metrics"]
    assert entry["status"] == "ok" and entry["n"] == 46
    assert {"prefill_mape", "decode_mape", "total_mape", "worst_gpu_total_mape", "coverage"} <= set(metrics)
    assert metrics["total_mape"] <= metrics["worst_gpu_total_mape"] and metrics["coverage"] == 1.0
    with pytest.raises(ValueError, match="unknown serving split"):
        gate_entry("llm-serving-nowhere", DATA, catalog)


def test_params_gate_names_the_serving_splits():
    import yaml

    from components.platform.config import PROJECT_ROOT
    from components.registry.gate import PolicyError, read_policy

    params = yaml.safe_load((PROJECT_ROOT / "params.yaml").read_text())
    policy = read_policy(params)
    assert "max_total_mape" in policy.splits["llm-serving-pipeweave"]
    assert "max_ttft_mape" in policy.splits["llm-serving-silicon"]
    bad = {"register": {"splits": {"llm-serving-moon": {"max_total_mape": 0.1}}}}
    with pytest.raises(PolicyError, match="llm-serving-moon: unknown split"):
        read_policy(bad)


@needs_data
def test_readme_serving_block_is_written_and_the_bench_block_left_alone(catalog, tmp_path: Path):
    from components.evaluation.bench import BenchResult
    from components.evaluation.bench_markdown import readme_markdown, write_markdown

    runs = read_pipeweave_runs(DATA)
    bench = run_pipeweave_bench(DATA, catalog, runs=runs[runs["gpu"].isin(["A100", "H100", "L40"])])
    readme = tmp_path / "README.md"
    keep = "<!-- bench:start -->\nthe op table\n<!-- bench:end -->"
    readme.write_text(f"# t\n{keep}\ntext\n{SERVING_START}\nold\n{SERVING_END}\ntail\n")
    result = BenchResult(rows=bench.rows, notes=["header line", *bench.notes])
    write_readme(
        readme,
        result,
        "kernelcast bench accuracy --split llm-serving-pipeweave",
        readme_markdown,
        write_markdown,
    )
    text = readme.read_text()
    assert keep in text and text.endswith("tail\n") and "\nold\n" not in text
    block = text[text.index(SERVING_START) : text.index(SERVING_END)]
    assert "| PipeWeave runs, leave-one-GPU-out | prefill |" in block and "| H100 |" in block
    assert "header line" not in block and "llm-serving-pipeweave: " in block
    (tmp_path / "bare.md").write_text("no markers\n")
    with pytest.raises(ValueError, match="serving:start"):
        write_readme(tmp_path / "bare.md", result, "c", readme_markdown, write_markdown)


@needs_data
@pytest.mark.slow
def test_unseen_engine_drops_the_held_out_gpus_kernels(engine):
    """The unseen-GPU variant's engine: no measured tier, a spec model refitted without the held GPU's rows
    (here only PipeWeave's FP8 GEMM train file is left: H20 and H800), cached per (store, GPU)."""
    from components.deployments.bench_common import spec_trained_on, unseen_engine
    from components.opmodel.engine import OpEngine
    from components.opmodel.spec import SpecModel

    with_spec = OpEngine(
        engine.measured, SpecModel(), meta={"devices": ["h100-sxm"]}, store_dir=engine.store_dir
    )
    assert spec_trained_on(with_spec) == {"h100-sxm"} and spec_trained_on(engine) == set()
    blind = unseen_engine(with_spec, "h100-sxm", DATA)
    assert blind.measured is None and "gemm" in blind.spec_model.boosters
    assert unseen_engine(with_spec, "h100-sxm", DATA) is blind
    h100 = load_catalog().resolve("h100-sxm")
    shape = {"M": np.array([512.0]), "N": np.array([4096.0]), "K": np.array([4096.0])}
    assert list(blind.predict("gemm", "fp8", shape, h100).tier) == ["spec"]
    assert list(with_spec.predict("gemm", "fp8", shape, h100).tier) == ["measured"]


def test_op_source_is_chosen_on_the_training_gpus_answered_like_the_held_out_one():
    """The engine answers A, B, C from their own kernels (exact here) and D, E through relatives (10% off);
    the roofline ops are off by a GPU's own few percent everywhere. Held out: F, answered through relatives.
    Scored on every inner fold the engine looks best (its measured-tier folds are exact); scored on the
    folds answered like F (D and E) the roofline is: the choice the held-out GPU gets."""
    from components.deployments.bench_common import MIN_SCORED, choose_source, tier_matched

    gpus = list("ABCDE")
    own = {"A": True, "B": True, "C": True, "D": False, "E": False, "F": False}
    truth = np.full(len(gpus), 100.0)
    frames = {
        "engine": pd.DataFrame({"gpu": gpus, "t_ms": truth, "k": [100.0, 100.0, 100.0, 110.0, 90.0]}),
        "roofline": pd.DataFrame({"gpu": gpus, "t_ms": truth, "k": [212.0, 190.0, 210.0, 188.0, 212.0]}),
    }

    def fit(train: pd.DataFrame) -> float:
        return float(np.median(train["t_ms"] / train["k"]))

    def predict(frame: pd.DataFrame, ratio: float) -> pd.DataFrame:
        return frame.assign(prefill_pred_ms=frame["k"] * ratio)

    every = choose_source(frames, "gpu", fit, predict, {"prefill": "t_ms"})
    matched = choose_source(frames, "gpu", fit, predict, {"prefill": "t_ms"}, tier_matched(own, "F"))
    assert every == {"prefill": "engine"} and matched == {"prefill": "roofline"}
    assert tier_matched(own, "F") == {"D", "E"} and tier_matched(own, "A") == {"B", "C"}
    # too few training GPUs answered like the held-out one: every training GPU scores
    assert MIN_SCORED == 2 and tier_matched({"A": True, "B": True, "D": False}, "A") is None


@needs_data
def test_own_kernels_marks_the_gpus_the_store_measured(catalog, engine):
    from components.deployments.bench_pipeweave import own_kernels

    runs = read_pipeweave_runs(DATA)
    subset = runs[runs["gpu"].isin(["A100", "H100", "L40"])]
    assert own_kernels(subset, catalog, engine_op_time(engine)) == {"A100": False, "H100": True, "L40": False}
    assert own_kernels(subset, catalog, roofline_op_time) == dict.fromkeys(("A100", "H100", "L40"), False)
