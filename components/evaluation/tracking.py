"""The evaluate stage's MLflow record: the gate report's run (its dataset, per-split metrics, report, plots
and error-by-GPU tables) and the report attached to the version's training run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from components.evaluation.gate_stage import Candidate


def split_plotter(plots_dir: Path) -> Callable[[str, pd.DataFrame], None]:
    """Each scored split's plots (predicted vs measured, error CDF, error by GPU) in ``plots_dir/<split>``."""

    def plot(split: str, frame: pd.DataFrame) -> None:
        from components.evaluation.plots import write_plots

        write_plots(frame, Path(plots_dir) / split)

    return plot


def log_gate_run(report: dict[str, Any], path: Path, plots_dir: Path, features: Path) -> None:
    """On the evaluate stage's run: the features it read (a dataset input), every split's metrics as
    ``<split>/<metric>``, the report and the per-split plots and tables."""
    from components.registry.tracking import log_dataset, log_files, log_numbers

    log_dataset(features, "evaluation", name="features")
    log_numbers({split: entry.get("metrics", {}) for split, entry in (report.get("splits") or {}).items()})
    log_files([path], "evaluation")
    if Path(plots_dir).is_dir():
        log_files(sorted(p for p in Path(plots_dir).iterdir() if p.is_dir()), "evaluation/plots")


def attach_gate_report(path: Path, candidate: Candidate, tracking_uri: str) -> str:
    """Log the report into the version's training run and point the version's ``eval_report`` tag at
    it (the lineage a downstream service reads); returns the artifact URI."""
    from components.registry.mlflow_registry import mlflow_client

    client = mlflow_client(tracking_uri)
    assert candidate.run_id is not None and candidate.version is not None and candidate.model_name is not None
    client.log_artifact(candidate.run_id, str(path), "evaluation")
    artifact = f"runs:/{candidate.run_id}/evaluation/{Path(path).name}"
    client.set_model_version_tag(candidate.model_name, candidate.version, "eval_report", artifact)
    report = json.loads(Path(path).read_text())
    client.set_model_version_tag(
        candidate.model_name, candidate.version, "eval_complete", str(bool(report.get("complete"))).lower()
    )
    return artifact
