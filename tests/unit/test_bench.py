"""Accuracy bench: leave-one-GPU-out fold selection, coverage accounting, README section writing.

Frames are shaped like the feature table (measurement/kernel/device ids, source, op family,
upstream file, measured targets) with the sources' real spellings; predictors are small real
classes, not mocks: they predict from the rows they are given.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from components.evaluation.bench import BenchResult, rows_for, run_accuracy_bench
from components.evaluation.bench_markdown import (
    MARKER_END,
    MARKER_START,
    check_markdown_target,
    markdown_table,
    readme_markdown,
    write_markdown,
)
from components.evaluation.folds import select_folds
from components.evaluation.harness import evaluate_predictor
from components.evaluation.splits import unseen_gpu_devices, unseen_gpu_split

# (source, device, rows): t4 (999) is one row short of a fold; a100's fold holds it out of two
# sources; h100-pcie is the only GPU of its source (held out all the same: unseen GPU and source).
LAYOUT: tuple[tuple[str, str, int], ...] = (
    ("neusight", "a100-pcie-40gb", 800),
    ("neusight", "h100-sxm5", 1200),
    ("neusight", "t4", 999),
    ("benchmark_hub", "a100-pcie-40gb", 300),
    ("benchmark_hub", "rtx-3080", 700),
    ("gpuflopbench", "rtx-3080", 500),
    ("kernelcast", "h100-pcie", 1500),
)
FAMILIES = {
    "neusight": ("bmm", "linear", "elementwise"),
    "benchmark_hub": ("gemm", "convolution"),
    "gpuflopbench": ("program",),
    "kernelcast": ("softmax",),
}


def feature_table(layout: tuple[tuple[str, str, int], ...] = LAYOUT, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    parts = []
    for source, device, n in layout:
        families = FAMILIES[source]
        parts.append(
            pd.DataFrame(
                {
                    "measurement_id": [f"{source}:{device}:{i}" for i in range(n)],
                    "kernel_id": [f"{source}:k{i % 97}" for i in range(n)],
                    "device_id": device,
                    "source": source,
                    "family": [families[i % len(families)] for i in range(n)],
                    "upstream_file": f"{source}/data.csv",
                    "duration_us": rng.uniform(5, 5000, n),
                    "achieved_gbps": rng.uniform(10, 2000, n) if source == "gpuflopbench" else np.nan,
                    "roofline_class": np.where(rng.uniform(size=n) < 0.5, "compute", "bandwidth"),
                    "f_flops": rng.uniform(1e6, 1e12, n),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


class DeviceErrorPredictor:
    """Predicts ``duration_us * (1 + error[device])``; rows of ``missing`` devices get no prediction
    (NaN), rows of ``dropped`` sources are not returned at all; remembers its training devices."""

    family = "stub"

    def __init__(
        self,
        train: pd.DataFrame,
        error: dict[str, float],
        missing: frozenset[str] = frozenset(),
        dropped: frozenset[str] = frozenset(),
    ) -> None:
        self._trained_on = frozenset(train["measurement_id"].astype(str))
        self.train_devices = frozenset(train["device_id"])
        self.error, self.missing, self.dropped = error, missing, dropped

    @property
    def targets(self) -> tuple[str, ...]:
        return ("duration_us", "roofline_class")

    @property
    def trained_on(self) -> frozenset[str]:
        return self._trained_on

    def fit(self, features: pd.DataFrame) -> DeviceErrorPredictor:
        return self

    def predict(self, features: pd.DataFrame) -> pd.DataFrame:
        rows = features[~features["source"].isin(self.dropped)]
        factor = 1.0 + rows["device_id"].map(self.error).fillna(0.0)
        duration = (rows["duration_us"] * factor).where(~rows["device_id"].isin(self.missing))
        return pd.DataFrame(
            {
                "pred_duration_us": duration,
                "pred_roofline_class": pd.Series("compute", index=rows.index, dtype="string"),
            }
        )

    def save(self, directory: Path) -> None:  # pragma: no cover - protocol completeness
        raise NotImplementedError


# ---------------------------------------------------------------------- fold selection


def test_every_gpu_with_at_least_1000_rows_gets_a_fold_held_out_of_every_source() -> None:
    table = feature_table()
    counts = unseen_gpu_devices(table, min_devices_per_source=1).set_index("device_id")
    assert counts.loc["a100-pcie-40gb", "rows"] == 1100  # 800 neusight + 300 benchmark_hub
    assert counts.loc["a100-pcie-40gb", "rows_benchmark_hub"] == 300
    assert counts.loc["rtx-3080", "rows"] == 1200 and counts.loc["rtx-3080", "rows_gpuflopbench"] == 500
    assert counts.loc["h100-pcie", "rows"] == 1500
    # The split's own default keeps GPUs of multi-GPU sources only; the bench holds out every GPU.
    assert "h100-pcie" not in {f.name.split(":")[1] for f in unseen_gpu_split(table)}

    folds = select_folds(table, "unseen-gpu", 1000)
    assert [f.name for f in folds] == [
        "unseen-gpu:a100-pcie-40gb",
        "unseen-gpu:h100-pcie",
        "unseen-gpu:h100-sxm5",
        "unseen-gpu:rtx-3080",
    ]
    for fold in folds:
        device = fold.name.split(":", 1)[1]
        assert set(table.loc[fold.test, "device_id"]) == {device}
        assert len(fold.test) == counts.loc[device, "rows"]  # every source's rows of that GPU
        assert device not in set(table.loc[fold.train, "device_id"])
        assert len(fold.train) + len(fold.test) == len(table)
    # One row more qualifies t4; the rule is ">=", not ">".
    assert "unseen-gpu:t4" in [f.name for f in select_folds(table, "unseen-gpu", 999)]


def test_chosen_gpus_run_whatever_their_size_and_unknown_ones_are_named() -> None:
    table = feature_table()
    assert [f.name for f in unseen_gpu_split(table, devices=("t4",))] == ["unseen-gpu:t4"]
    with pytest.raises(
        ValueError, match=r"p4.*GPUs there: a100-pcie-40gb, h100-pcie, h100-sxm5, rtx-3080, t4"
    ):
        select_folds(table, "unseen-gpu", 1000, devices=["p4"])
    largest = r"\(largest: h100-pcie 1500, h100-sxm5 1200, rtx-3080 1200\)"  # ties by name
    with pytest.raises(ValueError, match=r"no GPU has at least 5000 rows " + largest):
        select_folds(table, "unseen-gpu", 5000)


def test_bench_reports_every_gpu_per_source_overall_and_the_median() -> None:
    table = feature_table()
    error = {"a100-pcie-40gb": 0.10, "h100-sxm5": 0.30, "rtx-3080": 0.20, "h100-pcie": 0.22, "t4": 0.9}
    trained: dict[str, frozenset[str]] = {}

    def factory(family: str, train: pd.DataFrame, split: str):
        predictor = DeviceErrorPredictor(train, error)
        held_out = sorted(set(table["device_id"]) - predictor.train_devices)
        trained[",".join(held_out)] = predictor.train_devices
        return predictor, 0.0

    result = run_accuracy_bench(table, ["tabular"], ["unseen-gpu"], factory, [], min_gpu_rows=1000)
    assert set(trained) == {"a100-pcie-40gb", "h100-pcie", "h100-sxm5", "rtx-3080"}  # one GPU out per fold
    by_target = {(r["target"], r["metric"]): r for r in result.rows}
    a100_hub = by_target[("duration_us[device=a100-pcie-40gb,source=benchmark_hub]", "mape")]
    assert a100_hub["ours"] == pytest.approx(0.10) and a100_hub["n"] == 300 and a100_hub["coverage"] == 1.0
    assert by_target[("duration_us[device=rtx-3080,source=gpuflopbench]", "mape")]["n"] == 500
    assert by_target[("duration_us[device=h100-sxm5]", "mape")]["ours"] == pytest.approx(0.30)
    assert by_target[("duration_us[family=program]", "mape")]["n"] == 500  # op family, pooled over the folds
    median = by_target[("duration_us[median GPU]", "mape")]
    assert median["ours"] == pytest.approx(0.21) and median["n"] == 4 and median["coverage"] == 1.0
    worst = by_target[("duration_us[worst GPU=h100-sxm5]", "mape")]
    assert worst["ours"] == pytest.approx(0.30)
    assert not any("t4" in r["target"] for r in result.rows)  # below the rule: no fold
    note = next(n for n in result.notes if n.startswith("unseen-gpu:"))
    assert "4 leave-one-GPU-out folds" in note and "a100-pcie-40gb (benchmark_hub 300, neusight 800);" in note
    assert "h100-pcie (kernelcast 1500) [only GPU of kernelcast: that source is unseen too]" in note
    assert "not held out: t4 999" in note
    assert [t["fold"] for t in result.timings] == [
        f"unseen-gpu:{d}" for d in ("a100-pcie-40gb", "h100-pcie", "h100-sxm5", "rtx-3080")
    ]


def test_parallel_fold_executor_is_used_for_the_families_that_fit() -> None:
    """A fold executor gets the jobs of the parallel families only; the others run here."""
    from components.evaluation.folds import serial_fold_executor

    table = feature_table()
    calls: list[tuple[str, int]] = []

    def factory(family: str, train: pd.DataFrame, split: str):
        return DeviceErrorPredictor(train, {}), 0.0

    def executor(frame, jobs, on_done):
        calls.append((jobs[0].family, len(jobs)))
        return serial_fold_executor(factory)(frame, jobs, on_done)

    serial = run_accuracy_bench(
        table, ["roofline", "tabular"], ["unseen-gpu"], factory, [], min_gpu_rows=1000
    )
    parallel = run_accuracy_bench(
        table, ["roofline", "tabular"], ["unseen-gpu"], factory, [], min_gpu_rows=1000, fold_executor=executor
    )
    assert calls == [("tabular", 4)]
    assert parallel.rows == serial.rows


def test_a_fold_whose_test_side_holds_no_program_fits_no_class_model() -> None:
    """Only the fold holding out rtx-3080 (gpuFLOPBench's programs) is asked a program row; every other
    fold's train side is marked so the tabular fit skips its roofline-class model (it would answer
    nothing there), and the class model itself honours the mark."""
    from components.evaluation.folds import FoldJob, run_fold, select_folds
    from components.models.roofline_class import NO_PROGRAMS_ASKED, fit_for_tabular

    table = feature_table()
    marked: dict[str, bool] = {}

    def factory(family: str, train: pd.DataFrame, split: str):
        marked[str(sorted(set(table["device_id"]) - set(train["device_id"])))] = bool(
            train.attrs.get(NO_PROGRAMS_ASKED)
        )
        return DeviceErrorPredictor(train, {}), 0.0

    folds = select_folds(table, "unseen-gpu", 1000)
    for fold in folds:
        run_fold(table, FoldJob("unseen-gpu", "stub", fold), factory)
    assert marked == {
        "['a100-pcie-40gb']": True,
        "['h100-pcie']": True,
        "['h100-sxm5']": True,
        "['rtx-3080']": False,
    }
    programs = table[table["source"] == "gpuflopbench"].copy()
    programs.attrs[NO_PROGRAMS_ASKED] = True
    assert fit_for_tabular(programs, "roofline_class") is None


# ---------------------------------------------------------------------- coverage


def test_rows_without_a_prediction_are_counted_not_dropped() -> None:
    table = feature_table(
        (("neusight", "t4", 40), ("benchmark_hub", "t4", 20), ("neusight", "a100-pcie-40gb", 40))
    )
    # a100 rows get NaN predictions, benchmark_hub rows are not returned by the predictor at all.
    predictor = DeviceErrorPredictor(
        table.iloc[:0],
        {"t4": 0.1},
        missing=frozenset({"a100-pcie-40gb"}),
        dropped=frozenset({"benchmark_hub"}),
    )
    evaluation = evaluate_predictor(predictor, table, None, model="stub")
    report = evaluation.report
    duration = report["targets"]["duration_us"]
    assert (duration["n_asked"], duration["n_predicted"], duration["n"]) == (100, 40, 40)
    assert duration["coverage"] == pytest.approx(0.4) and duration["mape"] == pytest.approx(0.1)
    assert report["per_device"]["a100-pcie-40gb"]["duration_us"] == {
        "mape": None,
        "median_ape": None,
        "within_10": None,
        "n": 0,
        "n_asked": 40,
        "n_predicted": 0,
        "coverage": 0.0,
    }
    assert report["per_device"]["t4"]["duration_us"]["coverage"] == pytest.approx(40 / 60)
    assert (report["n_asked"], report["n_predicted"]) == (100, 80)  # a100 rows still get a class
    assert report["roofline"]["n_asked"] == 100 and report["roofline"]["coverage"] == pytest.approx(0.8)
    assert "achieved_gbps" not in report["targets"]  # no row measures it: left out, not a 0% coverage
    json.dumps(report, allow_nan=False)

    rows = rows_for(evaluation.frame, "unseen-gpu", "tabular", predictor.targets, [])
    by_target = {(r["target"], r["metric"]): r for r in rows}
    assert by_target[("duration_us", "mape")]["coverage"] == pytest.approx(0.4)
    hub = by_target[("duration_us[device=t4,source=benchmark_hub]", "mape")]
    assert hub["ours"] is None and hub["n"] == 0 and hub["n_asked"] == 20 and hub["coverage"] == 0.0
    median = by_target[("duration_us[median GPU]", "mape")]
    # The GPU without any prediction is not a 0% error: it lowers the median row's coverage (in GPUs).
    assert median["n"] == 1 and median["n_asked"] == 2 and median["coverage"] == 0.5
    table_md = markdown_table(rows)
    header = table_md.splitlines()[0]
    assert "coverage" in header
    line = next(x for x in table_md.splitlines() if x.startswith("| unseen-gpu | duration_us | mape |"))
    assert "| 40.0% |" in line


def test_markdown_coverage_names_each_family_when_they_differ() -> None:
    row = {
        "split": "unseen-kernel",
        "target": "duration_us",
        "scope": "",
        "metric": "mape",
        "n": 10,
        "n_asked": 10,
        "published": None,
        "published_by": None,
    }
    rows = [
        dict(row, family="roofline", ours=0.5, coverage=1.0),
        dict(row, family="tabular", ours=0.1, coverage=0.9),
    ]
    line = markdown_table(rows).splitlines()[2]
    assert "roofline 100.0% / tabular 90.0%" in line and "| 50.0% | 10.0% |" in line


# ---------------------------------------------------------------------- README section


def _bench_result() -> BenchResult:
    table = feature_table()

    def factory(family: str, train: pd.DataFrame, split: str):
        return DeviceErrorPredictor(
            train, {"a100-pcie-40gb": 0.05, "h100-sxm5": 0.5, "rtx-3080": 0.15, "h100-pcie": 0.25}
        ), 0.0

    return run_accuracy_bench(table, ["roofline", "tabular"], ["unseen-gpu"], factory, [], min_gpu_rows=1000)


def test_readme_section_has_headline_per_gpu_and_every_figure() -> None:
    section = readme_markdown(_bench_result(), "kernelcast bench accuracy --split unseen-gpu")
    assert section.startswith("Generated by `kernelcast bench accuracy --split unseen-gpu`")
    lines = section.splitlines()
    assert any(x.startswith("| leave-one-GPU-out | median GPU | mape | 20.0% | 20.0% | 4 |") for x in lines)
    assert any(x.startswith("| leave-one-GPU-out | worst GPU=h100-sxm5 | mape | 50.0% |") for x in lines)
    gpu = next(x for x in lines if x.startswith("| a100-pcie-40gb |"))
    assert gpu.startswith("| a100-pcie-40gb | 1100 | 5.0% | 5.0% |") and gpu.endswith("| 100.0% |")
    assert any(x.startswith("| rtx-3080, gpuflopbench | 500 |") for x in lines)
    assert "<details><summary>every figure</summary>" in section
    assert "- unseen-gpu: 4 leave-one-GPU-out folds" in section


def test_write_markdown_replaces_only_the_marked_section(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    before, after = "# kernelcast\n\n## How good is it\n\n", "\n\n## Next\ntext\n"
    readme.write_text(f"{before}{MARKER_START}\nold table\n{MARKER_END}{after}")
    write_markdown(readme, "| a | b |\n|---|---|\n")
    text = readme.read_text()
    assert text == f"{before}{MARKER_START}\n| a | b |\n|---|---|\n{MARKER_END}{after}"
    write_markdown(readme, "| a | b |\n|---|---|\n")
    assert readme.read_text() == text  # idempotent: regenerating changes nothing

    fresh = tmp_path / "out" / "bench.md"
    write_markdown(fresh, "table")
    assert fresh.read_text() == f"{MARKER_START}\ntable\n{MARKER_END}\n"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("# no markers here\n", "has no single <!-- bench:start --> ... <!-- bench:end --> section"),
        (f"{MARKER_END}\nx\n{MARKER_START}\n", "has no"),
        (f"{MARKER_START}\n{MARKER_END}\n{MARKER_START}\n{MARKER_END}\n", "more than one"),
    ],
)
def test_markdown_target_without_one_marked_section_is_refused_untouched(
    tmp_path: Path, content: str, fragment: str
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(content)
    with pytest.raises(ValueError, match=r"README\.md") as caught:
        check_markdown_target(readme)
    assert fragment in str(caught.value)
    with pytest.raises(ValueError):
        write_markdown(readme, "table")
    assert readme.read_text() == content


def test_cli_checks_the_markdown_target_and_devices_before_fitting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from kernelcast.cli import app

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    features = tmp_path / "features.parquet"
    feature_table().to_parquet(features)
    cases = [
        (["--markdown", str(readme)], "add both markers"),
        (
            ["--split", "neusight", "--device", "t4"],
            "--device chooses leave-one-GPU-out folds: add --split unseen-gpu",
        ),
        (["--split", "unseen-gpu", "--device", "no-such-gpu", "--features", str(features)], "--device"),
        (
            ["--split", "unseen-gpu", "--device", "Tesla P4", "--features", str(features)],
            "--device Tesla P4: no rows in this feature table",
        ),
    ]
    for args, fragment in cases:
        result = CliRunner().invoke(app, ["bench", "accuracy", *args])
        lines = [x for x in result.output.strip().splitlines() if x.strip()]
        assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), result.output
        assert fragment in lines[0], result.output
    assert readme.read_text() == "# no markers\n"


# ---------------------------------------------------------------------- bolet split on a pipeline table


def _gpuflopbench_tables(tmp_path: Path) -> tuple[pd.DataFrame, Path]:
    """A feature table as `features build` writes it (no label, program or upstream_row columns)
    and the canonical tables it was built from."""
    n_programs, per_program = 120, 4
    rows = []
    for p in range(n_programs):
        for k in range(per_program):
            for launch, file in (
                (0, "cuda-profiling/profiling-data.csv"),
                (1, "cuda-profiling/profiling-data.csv"),
                (0, "_history/b05059d9/cuda-profiling/profiling-data.csv"),
            ):
                rows.append(
                    {
                        "measurement_id": f"g{p}-{k}-{launch}-{file[0]}",
                        "kernel_id": f"gpuflopbench:p{p}:k{k}",
                        "device_id": "rtx-3080",
                        "source": "gpuflopbench",
                        "family": "program",
                        "upstream_file": file,
                        "upstream_row": len(rows),
                        "roofline_class_published": "compute" if (p + k) % 3 == 0 else "bandwidth",
                        "duration_us": 10.0 + len(rows),
                    }
                )
    full = pd.DataFrame(rows)
    canonical = tmp_path / "data" / "canonical"
    canonical.mkdir(parents=True)
    full[["measurement_id", "upstream_row", "roofline_class_published"]].to_parquet(
        canonical / "measurements.parquet"
    )
    kernels = (
        full[["kernel_id"]].drop_duplicates().assign(program=lambda f: f["kernel_id"].str.split(":").str[1])
    )
    kernels.to_parquet(canonical / "kernels.parquet")
    features = full.drop(columns=["upstream_row", "roofline_class_published"])
    features_dir = tmp_path / "data" / "features"
    features_dir.mkdir()
    features.to_parquet(features_dir / "features.parquet")
    return features, features_dir / "features.parquet"


def test_bolet_split_runs_on_a_pipeline_table_and_says_why_when_it_cannot(tmp_path: Path) -> None:
    from components.evaluation.harness import read_feature_table
    from kernelcast.commands.bench import _canonical_beside

    _, features_path = _gpuflopbench_tables(tmp_path)
    canonical = _canonical_beside(features_path, tmp_path / "elsewhere")
    assert canonical == (tmp_path / "data" / "canonical").resolve()
    table = read_feature_table(features_path, canonical)
    (fold,) = select_folds(table, "bolet-roofline")
    test = table.loc[fold.test]
    assert len(test) > 0 and not test["upstream_file"].str.contains("_history/").any()
    assert test["kernel_id"].is_unique  # one row per kernel: its first launch
    assert set(table.loc[fold.train, "program"]).isdisjoint(set(test["program"]))

    bare = read_feature_table(features_path, tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="no test rows") as caught:
        select_folds(bare, "bolet-roofline")
    message = str(caught.value)
    assert "none of the 960 gpuflopbench HEAD rows has a roofline_class_published" in message
    assert f"measurements.parquet, kernels.parquet not found in {tmp_path / 'elsewhere'}" in message
    # The bench notes the skip with that reason and goes on.
    result = run_accuracy_bench(bare, ["roofline"], ["bolet-roofline"], lambda *a: None, [])  # type: ignore[arg-type]
    assert result.rows == [] and result.notes[0].startswith("bolet-roofline: skipped")
    assert "not found in" in result.notes[0]


def test_bench_markdown_rewrites_the_readme_section_from_a_saved_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from kernelcast.cli import app

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    result = _bench_result()
    saved = tmp_path / "bench.json"
    saved.write_text(
        json.dumps({"command": "kernelcast bench accuracy --split unseen-gpu", **result.to_json()})
    )
    readme = tmp_path / "README.md"
    readme.write_text(f"# kernelcast\n\n{MARKER_START}\nold\n{MARKER_END}\n\nrest\n")
    run = CliRunner().invoke(app, ["bench", "markdown", "--from", str(saved), "--out", str(readme)])
    assert run.exit_code == 0, run.output
    expected = readme_markdown(result, "kernelcast bench accuracy --split unseen-gpu")
    assert readme.read_text() == f"# kernelcast\n\n{MARKER_START}\n{expected}\n{MARKER_END}\n\nrest\n"

    saved.write_text('{"rows": [{"split": "x"}]}')
    bad = CliRunner().invoke(app, ["bench", "markdown", "--from", str(saved), "--out", str(readme)])
    assert bad.exit_code == 2 and "not a `bench accuracy --json` file" in bad.output
    missing = CliRunner().invoke(
        app, ["bench", "markdown", "--from", str(tmp_path / "no.json"), "--out", str(readme)]
    )
    assert missing.exit_code == 2 and "file not found" in missing.output
    assert expected in readme.read_text()  # refused runs leave the README as it was
