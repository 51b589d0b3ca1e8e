"""Rows of one source directory for the evaluate stage: the ingest, validate and features stages' cores
run in memory (``source_frames``), and where every row the model did not answer went, by device."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class SourceFrames:
    """One source directory after the ingest, validate and features stages' cores, in memory."""

    table: pd.DataFrame  # feature table (plus the columns the splits and source-reading predictors need)
    quarantined: int  # rows quarantined by validation
    measurements: pd.DataFrame  # the validated canonical measurements (what the program bench reads)
    kernels: pd.DataFrame  # their canonical kernels
    rows_in: int = 0  # upstream rows the adapter read
    rejected: dict[str, int] | None = None  # rows the ingest rejected, by reason

    def accounting(self) -> dict[str, Any]:
        """Where every upstream row went: rejected at ingest (by reason), quarantined, or in the table."""
        return {
            "rows_in": self.rows_in,
            "rejected_at_ingest": dict(self.rejected or {}),
            "quarantined_by_validation": self.quarantined,
            "rows_validated": len(self.measurements),
        }


def source_frames(
    source: str, root: Path, params: dict[str, Any], static_file: Path | None = None, catalog: Any = None
) -> SourceFrames:
    """One source directory through the ingest, validate and features stages' cores, in memory."""
    import pandas as pd

    from components.devices import load_catalog
    from components.features.stage import features_from_tables
    from components.ingest.stage import ingest_tables
    from components.validation.run import validate_measurements

    if not (Path(root).is_dir() or (source == "csv" and Path(root).is_file())):
        raise ValueError(f"--from {root}: not a {'CSV file or folder' if source == 'csv' else 'directory'}")
    catalog = catalog if catalog is not None else load_catalog()
    output = ingest_tables([source], {source: Path(root)}, catalog)
    if output.devices:  # GPUs the source's own spec sheets describe (validated by the adapter)
        catalog = catalog.with_devices(output.devices)
    validation = validate_measurements(output.measurements, catalog, params, kernels=output.kernels)
    static = pd.read_parquet(static_file) if static_file is not None and Path(static_file).is_file() else None
    table = features_from_tables(validation.valid, output.kernels, catalog, static)
    # The bolet split reads these canonical columns, which the feature table does not carry.
    extra = validation.valid[["measurement_id", "upstream_row", "roofline_class_published"]]
    table = table.merge(extra.drop_duplicates("measurement_id"), on="measurement_id", how="left")
    # program for the bolet split; source_text for predictors that read source (llm): this table is
    # one directory's rows in memory, never written, so carrying the text per row is fine here.
    kernel_extra = [c for c in ("program", "source_text") if c in output.kernels.columns]
    table = table.merge(
        output.kernels[["kernel_id", *kernel_extra]].drop_duplicates("kernel_id"), on="kernel_id", how="left"
    )
    table.attrs["quarantined_by_device"] = merge_reasons(
        quarantine_reasons(validation.quarantine), ingest_reject_reasons(output.rejects)
    )
    table.attrs["extra_devices"] = [spec.id for spec in output.devices]
    reasons = output.rejects["reason"].astype(str) if "reason" in output.rejects.columns else []
    rejected = Counter(reasons)
    return SourceFrames(
        table,
        len(validation.quarantine),
        validation.valid,
        output.kernels,
        rows_in=sum(output.rows_in.values()),
        rejected=dict(rejected.most_common()),
    )


def features_from_source(
    source: str, root: Path, params: dict[str, Any], static_file: Path | None = None, catalog: Any = None
) -> tuple[pd.DataFrame, int]:
    """(feature table, rows quarantined by validation) of one source directory (``source_frames``)."""
    frames = source_frames(source, root, params, static_file, catalog)
    return frames.table, frames.quarantined


def quarantine_reasons(quarantine: pd.DataFrame) -> dict[str, dict[str, int]]:
    """{device: {"quarantined: <failed expectations>": rows}} of validation's quarantine table."""
    if quarantine.empty:
        return {}
    reasons = "quarantined: " + quarantine["failed_expectations"].astype(str)
    counts = reasons.groupby(quarantine["device_id"].astype(str)).value_counts()
    out: dict[str, dict[str, int]] = {}
    for (device, reason), n in counts.items():
        out.setdefault(str(device), {})[str(reason)] = int(n)
    return out


def ingest_reject_reasons(rejects: pd.DataFrame) -> dict[str, dict[str, int]]:
    """{device: {"rejected at ingest: <reason>": rows}}: a GPU neither the catalog nor the source describes
    is keyed by the name the source gives it; other rejects (no device to blame) under "(ingest)"."""
    import re

    out: dict[str, dict[str, int]] = {}
    for reason, n in rejects["reason"].astype(str).value_counts().items():
        match = re.fullmatch(r"unknown device '(.*)'", str(reason))
        device = match.group(1) if match else "(ingest)"
        why = "unknown device (not in the catalog, no spec sheet)" if match else str(reason)
        key = "rejected at ingest: " + why
        out.setdefault(device, {})[key] = out.get(device, {}).get(key, 0) + int(n)
    return out


def merge_reasons(*parts: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for part in parts:
        for device, reasons in part.items():
            for reason, n in reasons.items():
                out.setdefault(device, {})[reason] = out.get(device, {}).get(reason, 0) + n
    return out


def unanswered_by_device(
    frame: pd.DataFrame, targets: tuple[str, ...], quarantined: dict[str, dict[str, int]] | None = None
) -> dict[str, dict[str, Any]]:
    """Per device: rows asked, rows answered (a finite prediction of some target) and, for the rest, why --
    the row's feature note where it has one, else that the model gave no value -- plus the rows validation
    quarantined before the model saw them."""
    import numpy as np

    claimed = [f"pred_{t}" for t in targets if f"pred_{t}" in frame.columns]
    answered = np.zeros(len(frame), dtype=bool)
    for column in claimed:
        values = frame[column]
        numeric = pd_numeric(values)
        answered |= np.isfinite(numeric) if numeric is not None else values.notna().to_numpy()
    note = frame["feature_note"] if "feature_note" in frame.columns else None
    out: dict[str, dict[str, Any]] = {}
    devices = frame["device_id"].astype(str).to_numpy()
    for device in sorted(set(devices) | set(quarantined or {})):
        mine = devices == device
        missed = mine & ~answered
        reasons: dict[str, int] = dict((quarantined or {}).get(device, {}))
        if missed.any():
            why = (
                note[missed].astype(object).where(note[missed].notna(), "no prediction from the model")
                if note is not None
                else None
            )
            counted = (
                why.value_counts() if why is not None else {"no prediction from the model": int(missed.sum())}
            )
            for reason, n in dict(counted).items():
                reasons[str(reason)] = reasons.get(str(reason), 0) + int(n)
        held_back = sum((quarantined or {}).get(device, {}).values())
        out[device] = {
            "n_asked": int(mine.sum()) + held_back,
            "n_answered": int((mine & answered).sum()),
            "not_answered": reasons,
        }
    return out


def pd_numeric(values: pd.Series) -> Any:
    """Float view of a prediction column (None for a non-numeric one, e.g. a predicted class)."""
    import pandas as pd

    if pd.api.types.is_numeric_dtype(values.dtype):
        return pd.to_numeric(values, errors="coerce").to_numpy("float64")
    return None
