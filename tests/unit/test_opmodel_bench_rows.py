"""The op engine's bench splits as `kernelcast bench accuracy` rows and README lines, on real AIConfigurator
tables (H100 GEMMs of one vLLM version), and the CLI's one-line refusal of a missing store."""

from __future__ import annotations

from pathlib import Path

import pytest

DATASETS = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
AIC = DATASETS / "aiconfigurator"
DATA = "aic-core/src/aiconfigurator_core/systems/data"
TABLE = "h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from components.opmodel.store import build_store

    if not (AIC / DATA / TABLE).is_file():
        pytest.skip("aiconfigurator tables not present")
    root = tmp_path_factory.mktemp("aic")
    link = root / DATA / TABLE
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(AIC / DATA / TABLE)
    build_store(root, root / "store", families=("gemm",))
    return root / "store"


def test_unseen_shape_rows_sit_beside_the_roofline_per_gpu_and_render_in_the_readme(store_dir: Path) -> None:
    from components.evaluation.bench import BenchResult
    from components.evaluation.bench_markdown import readme_markdown
    from components.evaluation.opmodel_bench import ENGINE_FAMILY, ROOFLINE_FAMILY, extend_result

    result = BenchResult()
    extend_result(result, ["aiconfigurator-unseen-shape"], store_dir, None)
    by = {(r["family"], r["scope"], r["metric"]): r for r in result.rows}
    engine, roof = by[(ENGINE_FAMILY, "op=gemm", "mape")], by[(ROOFLINE_FAMILY, "op=gemm", "mape")]
    gpu = by[(ENGINE_FAMILY, "op=gemm,device=h100-sxm", "mape")]
    assert 0 < engine["ours"] < 0.15 < roof["ours"] and gpu["ours"] == engine["ours"]
    assert engine["n"] > 0 and engine["coverage"] > 0.95 and engine["split"] == "aiconfigurator-unseen-shape"
    assert 0 < by[(ENGINE_FAMILY, "op=gemm", "median_ape")]["ours"] < engine["ours"]
    assert any("test_per_group 400" in note for note in result.notes)
    text = readme_markdown(result, "kernelcast bench accuracy --split aiconfigurator-unseen-shape")
    start = "| aiconfigurator-unseen-shape | measured tier | gemm, h100"
    line = next(x for x in text.splitlines() if x.startswith(start))
    assert f"{100 * engine['ours']:.1f}%" in line and f"{100 * roof['ours']:.1f}%" in line


def test_cli_refuses_an_op_engine_split_without_a_store_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from kernelcast.cli import app

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    result = CliRunner().invoke(
        app,
        ["bench", "accuracy", "--split", "aiconfigurator-unseen-shape", "--store", str(tmp_path / "nowhere")],
    )
    lines = [x for x in result.output.strip().splitlines() if x.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert "--store" in lines[0] and "no measured store" in lines[0]
