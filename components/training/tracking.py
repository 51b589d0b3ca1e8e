"""What each model component of a trained predictor logs on its own nested MLflow run.

The train stage's run holds the registered model; under it one run per component that answers questions
(``components.registry.tracking.component_run``): the tabular family, the op engine (measured store, spec /
transfer model, calibrations), the deployment engine's constants and the program model. Each logs what a
reviewer would ask of it: its parameters, its own fit figures and the files it is made of.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def log_op_engine(engine_dir: Path | None) -> None:
    """The op engine in ``engine_dir``: measured-store tables and rows, spec-model rows per family, the GPUs
    it was fitted on, calibrated GPUs, the interval table; its JSON files as artifacts."""
    import mlflow
    from components.registry.tracking import log_files, log_numbers

    if engine_dir is None or not Path(engine_dir).is_dir():
        mlflow.set_tag("kc.note", "op engine not trained (no measured store in this state folder)")
        return
    engine_dir = Path(engine_dir)
    info_files = sorted(engine_dir.glob("*.json"))
    meta: dict[str, Any] = {}
    for path in info_files:
        try:
            content = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(content, dict) and "meta" in content:
            meta = content["meta"] or {}
        if path.name == "calibrations.json" and isinstance(content, dict):
            log_numbers({"calibrated_gpus": len(content)})
            mlflow.set_tag("calibrated_gpus", ",".join(sorted(content)) or "none")
    store = engine_dir / "store"
    tables = sorted(store.glob("*.parquet")) if store.is_dir() else []
    if tables:
        import pyarrow.parquet as pq

        log_numbers({f"store_rows/{t.stem}": pq.read_metadata(t).num_rows for t in tables})
    log_numbers({"spec_rows": meta.get("spec_rows", {}), "spec_gpus": len(meta.get("devices", []))})
    mlflow.log_params({"store_families": ",".join(t.stem for t in tables) or "none"})
    if meta.get("devices"):
        mlflow.set_tag("spec_gpus", ",".join(meta["devices"]))
    log_files(info_files, "opmodel")


def log_deployment_constants(engine_trained: bool) -> None:
    """The serving engines' constants deployment answers use (fitted offline, kept as data with provenance in
    ``components/deployments/engines/constants.json``): the file as an artifact, each engine's step-cost
    coefficients as params, their fit errors as metrics, the provenance as tags."""
    import mlflow
    from components.deployments.engines.base import CONSTANTS_FILE
    from components.registry.tracking import log_numbers

    data = json.loads(CONSTANTS_FILE.read_text())
    framework_set = "engine" if engine_trained else "roofline"  # the offline-batch cost the answers use
    params: dict[str, str] = {"framework_set": framework_set}
    errors: dict[str, float] = {}
    for name, engine in sorted(data.get("engines", {}).items()):
        params.update({f"{name}.{k}": json.dumps(v) for k, v in engine.get("cost", {}).items()})
        provenance = engine.get("provenance", {})
        errors.update(
            {f"{name}.lopo_{k}": v for k, v in provenance.get("leave_one_gpu_out_mape", {}).items()}
        )
        mlflow.set_tag(f"{name}.fitted_on", str(provenance.get("fitted_on")))
    framework = data.get("framework", {}).get(framework_set, {})
    errors.update({f"framework.{k}": v for k, v in framework.get("train_mape", {}).items()})
    mlflow.log_params(params)
    log_numbers(errors)
    mlflow.log_dict(data, "deployments/constants.json")


def log_program_model(paths: list[Path]) -> None:
    """The program model files the train stage fitted (none: the tag says why answers fall back)."""
    import mlflow
    from components.registry.tracking import log_files, log_numbers

    log_numbers({"files": len(paths)})
    if not paths:
        mlflow.set_tag("kc.note", "program model not fitted (no KernelBench rows on the train side)")
    log_files(list(paths), "programs")
