"""``kernelcast calibrate``'s stage: a new GPU's runtime correction fitted on its calibration-suite rows
and stored where serving applies it (storing, loading and applying live in
``components.models.calibration``); the op engine's calibrated tier from the same rows."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from components.common.metrics import regression_report
from components.evaluation.calibration import CalibrationParams, measured_mask
from components.models.calibration import correction_path, fit_correction

SERVING_METHODS: tuple[str, ...] = ("global", "group", "residual")


@dataclass(frozen=True)
class CalibrateResult:
    device_id: str
    method: str
    n_rows: int
    path: Any  # Path of the stored correction
    mape_before: float  # on the calibration rows themselves (in-sample: a sanity figure, not accuracy)
    mape_after: float
    median_ape_before: float = math.nan
    median_ape_after: float = math.nan


def calibrate_stage(
    device: str,
    from_dir: Any,
    predictor: Any,
    home: Any,
    params: dict[str, Any],
    *,
    method: str = "group",
    source: str = "kernelcast",
    catalog: Any = None,
) -> CalibrateResult:
    """Fit ``method`` on the calibration rows of ``device`` in a profiled run folder (read through
    the ingest -> validate -> features cores) against ``predictor``, store it under ``home``.

    ValueError naming the input: unknown device, no rows of it in the folder, a method that cannot
    be stored (the refit is a training run: ``kernelcast train`` with the rows added).
    """
    from pathlib import Path

    from components.devices import load_catalog
    from components.evaluation.source_rows import features_from_source

    if method not in SERVING_METHODS:
        raise ValueError(f"--method {method!r}: a stored correction is one of {', '.join(SERVING_METHODS)}")
    catalog = catalog if catalog is not None else load_catalog()
    device_id = catalog.resolve(device).id
    table, _ = features_from_source(source, Path(from_dir), params, catalog=catalog)
    rows = table[table["device_id"].astype(str) == device_id]
    rows = rows[measured_mask(rows)] if len(rows) else rows
    if rows.empty:
        found = ", ".join(sorted(set(table["device_id"].astype(str)))) or "none"
        raise ValueError(f"--from {from_dir}: no measured rows of {device_id} (GPUs there: {found})")
    predictions = predictor.predict(rows)
    predicted = pd.to_numeric(predictions.get("pred_duration_us"), errors="coerce").to_numpy(dtype="float64")
    inputs = rows.join(predictions.drop(columns=["pred_duration_us"], errors="ignore"), rsuffix="_pred")
    correction = fit_correction(
        method, inputs, predicted, device_id=device_id, shrink=CalibrationParams.from_params(params).shrink
    )
    if correction.n_rows == 0:
        raise ValueError(
            f"the model predicts no runtime for the {len(rows)} rows of {device_id} in {from_dir}"
        )
    measured = pd.to_numeric(rows["duration_us"], errors="coerce").to_numpy(dtype="float64")
    path = correction_path(home, device_id)
    correction.save(path)
    corrected = correction.apply(inputs, predicted)
    # The op engine's calibrated tier (tensor GEMMs, attention) from the same rows, where the suite has any.
    from components.opmodel.calibrated import calibrate_engine
    from components.opmodel.loading import engine_for

    calibrate_engine(engine_for(predictor), rows, catalog.get(device_id), Path(home))
    before, after = regression_report(measured, predicted), regression_report(measured, corrected)
    return CalibrateResult(
        device_id,
        method,
        correction.n_rows,
        path,
        before["mape"],
        after["mape"],
        before["median_ape"],
        after["median_ape"],
    )
