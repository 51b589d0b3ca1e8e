"""`kernelcast calibrate`: fit a new GPU's runtime correction from its calibration-suite rows.

Reads a profiled run folder (``kernelcast profile --suite calibration`` output, the layout
``kernelcast ingest --source kernelcast --from DIR`` reads) or, with ``--source csv``, a team's timings
CSV, predicts its rows with the model, fits
the correction (components/models/calibration.py) and stores it under KERNELCAST_HOME/calibration/
<device>.json, where ``components.models.calibration.apply_corrections`` finds it at serving time.
Exit codes: 0 stored; 2 bad input (unknown device, no rows of it, unknown method or model).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings

DEFAULT_MODEL = "models:/kernelcast@champion"


@clean_errors
def calibrate_command(
    device: Annotated[str, typer.Option("--device", help="the GPU to calibrate (catalog name or alias)")],
    from_dir: Annotated[
        Path,
        typer.Option(
            "--from", help="profiled run folder holding its calibration rows (with --source csv: a CSV)"
        ),
    ],
    model: Annotated[
        str, typer.Option("--model", help="models:/kernelcast@champion, a predictor dir, or 'roofline'")
    ] = DEFAULT_MODEL,
    method: Annotated[
        str, typer.Option("--method", help="global | group | residual (see bench --calibration-rows)")
    ] = "group",
    source: Annotated[
        str, typer.Option("--source", help="kernelcast (a profiled run folder) or csv (a team's timings CSV)")
    ] = "kernelcast",
) -> None:
    """Fit and store a per-GPU runtime correction from that GPU's calibration rows."""
    from components.evaluation.calibrate_stage import calibrate_stage
    from components.platform.config import load_params
    from components.registry.loading import load_any_predictor

    settings = prepared_settings()
    if source not in ("kernelcast", "csv"):
        raise UserError(
            f"--source {source!r}: calibrate reads kernelcast (a run folder) or csv (a timings CSV)"
        )
    if not (from_dir.is_dir() or (source == "csv" and from_dir.is_file())):
        raise UserError(
            f"--from {from_dir}: not a {'CSV file or folder' if source == 'csv' else 'directory'}"
        )
    predictor = load_any_predictor(model, settings.tracking_uri())
    result = calibrate_stage(
        device,
        from_dir,
        predictor,
        settings.state_dir,
        load_params(settings.params_file),
        method=method,
        source=source,
    )
    typer.echo(
        f"{result.device_id}: {result.method} correction from {result.n_rows} rows; on those rows "
        f"(in-sample) median error {100 * result.median_ape_before:.1f}% -> "
        f"{100 * result.median_ape_after:.1f}%, MAPE {100 * result.mape_before:.1f}% -> "
        f"{100 * result.mape_after:.1f}%"
    )
    typer.echo(f"wrote {result.path}")
