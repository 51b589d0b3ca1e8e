"""Evaluation harness (JSON shape, leakage guard), bench rows, plots, and the CLI's argument errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from components.evaluation.bench import rows_for
from components.evaluation.bench_markdown import markdown_table
from components.evaluation.harness import evaluate_predictor, flat_metrics, with_split_columns
from components.evaluation.plots import write_plots
from components.evaluation.published import Published


class ScaledPredictor:
    """Predicts 1.1 x the measured value (10% error everywhere); records what it was asked."""

    family = "stub"

    def __init__(
        self,
        trained_on: set[str],
        targets: tuple[str, ...] = ("duration_us", "l2_hit_rate", "roofline_class"),
    ) -> None:
        self._trained_on = frozenset(trained_on)
        self._targets = targets
        self.asked: set[str] = set()

    @property
    def targets(self) -> tuple[str, ...]:
        return self._targets

    @property
    def trained_on(self) -> frozenset[str]:
        return self._trained_on

    def fit(self, features: pd.DataFrame) -> ScaledPredictor:
        return self

    def predict(self, features: pd.DataFrame) -> pd.DataFrame:
        self.asked |= set(features["measurement_id"])
        out = pd.DataFrame(index=features.index)
        out["pred_duration_us"] = features["duration_us"] * 1.1
        out["pred_duration_us_lo"] = features["duration_us"] * 0.5
        out["pred_duration_us_hi"] = features["duration_us"] * 2.0
        out["pred_l2_hit_rate"] = features["l2_hit_rate"]
        out["pred_roofline_class"] = pd.Series("compute", index=features.index, dtype="string")
        return out

    def save(self, directory: Path) -> None:  # pragma: no cover - protocol completeness
        raise NotImplementedError


def _table(n: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "measurement_id": [f"m{i}" for i in range(n)],
            "kernel_id": [f"k{i // 2}" for i in range(n)],
            "device_id": ["h100" if i % 2 else "a100" for i in range(n)],
            "source": "neusight",
            "family": ["bmm", "linear", "elementwise", "conv"] * (n // 4),
            "duration_us": rng.uniform(5, 500, n),
            "achieved_gbps": np.nan,  # not measured by this source: must be left out, never filled
            "l2_hit_rate": np.where(np.arange(n) < n // 2, rng.uniform(0.2, 0.9, n), np.nan),
            "roofline_class": ["compute" if i % 4 else "bandwidth" for i in range(n)],
        }
    )


def test_report_shape_and_fractions() -> None:
    table = _table()
    evaluation = evaluate_predictor(ScaledPredictor(set()), table, None, model="stub")
    report = evaluation.report
    assert set(report) >= {"model", "split", "n", "excluded_seen", "targets", "per_device", "roofline"}
    assert report["split"] == "all" and report["n"] == 40 and report["excluded_seen"] == 0
    assert set(report["targets"]) == {"duration_us", "l2_hit_rate"}  # achieved_gbps not measured
    duration = report["targets"]["duration_us"]
    assert set(duration) == {"mape", "median_ape", "within_10", "n", "n_asked", "n_predicted", "coverage"}
    assert duration["mape"] == pytest.approx(0.1) and duration["n"] == 40
    assert duration["n_asked"] == duration["n_predicted"] == 40 and duration["coverage"] == 1.0
    assert report["n_asked"] == report["n_predicted"] == 40 and report["coverage"] == 1.0
    assert report["targets"]["l2_hit_rate"]["n"] == 20
    assert set(report["per_device"]) == {"a100", "h100"}
    assert report["per_device"]["h100"]["duration_us"]["n"] == 20
    assert report["roofline"]["accuracy"] == pytest.approx(0.75)
    assert report["roofline"]["balanced_accuracy"] == pytest.approx(0.5)
    assert report["intervals"]["duration_us"]["coverage"] == 1.0
    for figures in report["targets"].values():
        for key in ("mape", "median_ape", "within_10", "coverage"):
            assert 0.0 <= figures[key] <= 1.0
    json.dumps(report, allow_nan=False)  # strict JSON: no NaN anywhere


def test_rows_the_model_trained_on_are_excluded_and_counted() -> None:
    table = _table()
    seen = {f"m{i}" for i in range(0, 40, 3)}
    predictor = ScaledPredictor(seen)
    report = evaluate_predictor(predictor, table, None, model="stub").report
    assert report["excluded_seen"] == len(seen)
    assert report["n"] == 40 - len(seen)
    assert not (predictor.asked & seen), "seen rows must not even be predicted"


def test_split_test_side_and_canonical_join(tmp_path: Path) -> None:
    table = _table()
    canonical = tmp_path / "canonical"
    canonical.mkdir()
    pd.DataFrame(
        {
            "measurement_id": table["measurement_id"],
            "upstream_row": range(40),
            "roofline_class_published": "compute",
        }
    ).to_parquet(canonical / "measurements.parquet")
    pd.DataFrame({"kernel_id": table["kernel_id"].unique(), "program": "p"}).to_parquet(
        canonical / "kernels.parquet"
    )
    joined = with_split_columns(table, canonical)
    assert joined["program"].eq("p").all() and joined["upstream_row"].tolist() == list(range(40))
    report = evaluate_predictor(ScaledPredictor(set()), joined, "unseen-kernel", model="stub").report
    assert report["split"] == "unseen-kernel" and 0 < report["n"] < 40


def test_flat_metrics_use_the_promotion_names() -> None:
    report = evaluate_predictor(ScaledPredictor(set()), _table(), None, model="stub").report
    metrics = flat_metrics(report)
    assert metrics["runtime_mape"] == pytest.approx(0.1)
    assert {"within_10", "roofline_balanced_accuracy", "duration_us_interval_coverage"} <= set(metrics)


def test_bench_rows_carry_published_figures_per_op_family() -> None:
    frame = evaluate_predictor(ScaledPredictor(set()), _table(), None, model="stub").frame
    published = [
        Published("neusight", "family=bmm", "duration_us", "mape", 0.138, "NeuSight"),
        Published("neusight", "device=l4", "duration_us", "mape", 0.2, "x"),
    ]
    rows = rows_for(frame, "neusight", "tabular", ("duration_us", "roofline_class"), published)
    bmm = next(r for r in rows if r["target"] == "duration_us[family=bmm]" and r["metric"] == "mape")
    assert bmm["ours"] == pytest.approx(0.1) and bmm["published"] == 0.138 and bmm["n"] == 10
    missing = next(r for r in rows if r["target"] == "duration_us[device=l4]")
    assert missing["ours"] is None and missing["n"] == 0  # a published figure we could not score
    table = markdown_table(rows)
    assert "duration_us[family=bmm]" in table and "13.8%" in table


def test_plots_are_written(tmp_path: Path) -> None:
    frame = evaluate_predictor(ScaledPredictor(set()), _table(), None, model="stub").frame
    written = write_plots(frame, tmp_path)
    names = {p.name for p in written}
    assert {
        "pred_vs_measured_duration_us.png",
        "error_cdf_duration_us.png",
        "error_by_gpu_duration_us.png",
    } <= names
    assert all(p.stat().st_size > 1000 for p in written if p.suffix == ".png")
    by_gpu = pd.read_csv(tmp_path / "error_by_gpu_duration_us.csv")
    assert list(by_gpu.columns) == ["device_id", "n", "mape", "median_ape", "within_10"]
    assert by_gpu["n"].sum() == frame["pred_duration_us"].notna().sum()
    assert by_gpu["mape"].is_monotonic_decreasing  # worst GPU first


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["evaluate", "--model", "x", "--out", "r.txt"], "--out must be a .json"),
        (["evaluate", "--model", "x", "--out", "r.json", "--source", "neusight"], "--source and --from"),
        (["evaluate", "--model", "x", "--out", "r.json", "--split", "nope"], "unknown split"),
        (
            ["evaluate", "--model", "/no/such/dir", "--out", "r.json", "--features", "/no/such.parquet"],
            "not found",
        ),
        # A --from folder that is not the source's upstream layout (here: empty).
        (
            ["evaluate", "--model", "roofline", "--out", "r.json", "--source", "pipeweave", "--from", "."],
            "source directory not found",
        ),
        (["train", "--family", "gpt"], "--family must be one of"),
        (["train", "--split", "nope"], "unknown split"),
        (["bench", "accuracy", "--split", "nope"], "unknown split"),
        (["bench", "accuracy", "--family", "gpt"], "unknown or unavailable family"),
    ],
)
def test_cli_argument_errors_are_one_line(
    args: list[str], fragment: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelcast.cli import app

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and fragment in lines[0], result.output


class SourceReadingPredictor(ScaledPredictor):
    """Asks the harness for kernel source (as the llm family does) and records what it got."""

    kernel_columns = ("source_text",)

    def predict(self, features: pd.DataFrame) -> pd.DataFrame:
        self.seen_sources = dict(zip(features["kernel_id"], features["source_text"], strict=True))
        return super().predict(features)


def test_kernel_source_is_joined_only_for_predictors_that_read_it(tmp_path: Path) -> None:
    from components.evaluation.harness import attach_canonical_columns

    table = _table(8)
    canonical = tmp_path / "canonical"
    canonical.mkdir()
    kernels = pd.DataFrame(
        {
            "kernel_id": ["k0", "k1", "k2", "k9"],
            "source_text": ["__global__ void a() {}", None, "__global__ void c() {}", "x"],
        }
    )
    kernels.to_parquet(canonical / "kernels.parquet")

    reader = SourceReadingPredictor(set())
    evaluation = evaluate_predictor(reader, table, None, model="stub", canonical_dir=canonical)
    assert reader.seen_sources["k0"] == "__global__ void a() {}" and reader.seen_sources["k2"].endswith(
        "c() {}"
    )
    assert pd.isna(reader.seen_sources["k1"]) and pd.isna(reader.seen_sources["k3"])  # no text / not in table
    assert "source_text" not in evaluation.frame.columns  # the report frame stays light

    # No canonical table: the column exists, all-NA, so the predictor falls back to op + shapes.
    bare = attach_canonical_columns(table, tmp_path / "missing", kernels=("source_text",))
    assert bare["source_text"].isna().all() and len(bare) == len(table)
    # A frame that already carries the column is left as it is.
    carried = table.assign(source_text="mine")
    assert (
        attach_canonical_columns(carried, canonical, kernels=("source_text",))["source_text"].eq("mine").all()
    )

    # Measurement columns (per-launch parameters) join by measurement_id.
    pd.DataFrame({"measurement_id": ["m1", "m5"], "params_json": ['{"M": 64}', '{"M": 128}']}).to_parquet(
        canonical / "measurements.parquet"
    )
    joined = attach_canonical_columns(table, canonical, measurements=("params_json",))
    assert joined.set_index("measurement_id").loc[["m1", "m5"], "params_json"].tolist() == [
        '{"M": 64}',
        '{"M": 128}',
    ]
    assert joined["params_json"].isna().sum() == len(table) - 2


def test_capped_rows_are_the_same_whatever_the_row_order() -> None:
    from components.evaluation.harness import capped_rows

    table = _table(40)
    capped = capped_rows(table.index, table, 10)
    assert len(capped) == 10 and capped.is_monotonic_increasing
    shuffled = table.sample(frac=1.0, random_state=3)
    again = capped_rows(shuffled.index, shuffled, 10)
    assert set(table.loc[capped, "measurement_id"]) == set(shuffled.loc[again, "measurement_id"])
    assert capped_rows(table.index, table, None).equals(table.index)
    assert capped_rows(table.index, table, 100).equals(table.index)


def test_bench_reports_progress_after_every_split_and_family() -> None:
    """A late failure must not lose what an hour of fitting measured: each (split, family) is handed
    to ``on_progress`` before the next starts."""
    from components.evaluation.bench import run_accuracy_bench

    table = _table(40).assign(upstream_file="x", program="p")
    seen: list[int] = []

    def factory(family: str, train: pd.DataFrame, split: str):
        if split == "random" and family == "second":
            raise RuntimeError("late failure")
        return ScaledPredictor(set(train["measurement_id"])), 0.0

    with pytest.raises(RuntimeError, match="late failure"):
        run_accuracy_bench(
            table,
            ["first", "second"],
            ["unseen-kernel", "random"],
            factory,
            [],
            on_progress=lambda result: seen.append(len(result.rows)),
            max_test_rows=5,
        )
    assert (
        len(seen) == 3 and seen[0] > 0 and seen == sorted(seen)
    )  # 2 families x split 1, then split 2's first


def test_gate_report_scores_every_split_and_a_split_that_cannot_be_built_makes_it_partial() -> None:
    """The promotion gate's report: the artifact where it is honest (its own split, or nothing it
    trained on), and a split the table lacks (no NeuSight rows here) recorded as an error -- a
    partial report, which never promotes."""
    from components.evaluation.report import gate_report, split_mode
    from components.registry.gate import EvaluationCaps

    table = _table(40).assign(upstream_file="x", program="p")
    caps = EvaluationCaps(max_train_rows=None, max_test_rows=6, max_gpu_folds=1, min_gpu_rows=1)
    trained = ScaledPredictor({"m0", "m1"})
    assert split_mode(trained, "unseen-kernel", "unseen-kernel") == "artifact"
    assert split_mode(trained, "random", "unseen-kernel") is None  # stub family: no refit recipe
    assert split_mode(ScaledPredictor(set()), "unseen-gpu", "unseen-kernel") == "artifact"  # training-free

    lines: list[str] = []
    report = gate_report(
        ScaledPredictor(set()),
        table,
        ("unseen-kernel", "unseen-gpu", "neusight"),
        caps,
        model="stub",
        trained_split="unseen-kernel",
        identity={"model_version": "7"},
        progress=lines.append,
    )
    assert report["kind"] == "kernelcast-gate-report" and report["model_version"] == "7"
    assert report["complete"] is False and len(lines) == 3
    uk, gpu, neusight = (report["splits"][s] for s in ("unseen-kernel", "unseen-gpu", "neusight"))
    assert uk["status"] == "ok" and uk["mode"] == "artifact" and uk["n"] <= 6  # capped test side
    assert uk["metrics"]["runtime_mape"] == pytest.approx(0.1)
    assert (
        gpu["status"] == "ok"
        and len(gpu["folds"]) == 1
        and gpu["metrics"]["worst_gpu_runtime_mape"] == pytest.approx(0.1)
    )
    assert neusight["status"] == "error" and "no test rows" in neusight["note"]
    json.dumps(report, allow_nan=False)

    skipped = gate_report(trained, table, ("random",), caps, model="stub", trained_split="unseen-kernel")
    assert skipped["complete"] is False and skipped["splits"]["random"]["status"] == "skipped"
