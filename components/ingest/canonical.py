"""Reading the canonical tables back: the columns a feature row leaves out, joined by id.

Below the models and the evaluation (both join source text and launch dimensions onto feature rows:
the roofline-class model's inputs, the llm family's prompts), beside the ingest that writes them.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def attach_canonical_columns(
    frame: pd.DataFrame,
    canonical_dir: Path | None,
    *,
    kernels: tuple[str, ...] = (),
    measurements: tuple[str, ...] = (),
) -> pd.DataFrame:
    """``frame`` plus the canonical ``kernels``/``measurements`` columns it lacks, for its rows only.

    The feature table leaves out what only a reader of the raw kernel needs (source text would
    repeat a program's text on every launch row; shapes and launch parameters live in JSON). A
    predictor that reads them (the llm family) names them in ``kernel_columns`` and
    ``measurement_columns``. Without canonical tables the columns are all-NA and the predictor
    falls back to what the feature row carries.
    """
    out = frame
    for file, key, wanted in (
        ("kernels.parquet", "kernel_id", kernels),
        ("measurements.parquet", "measurement_id", measurements),
    ):
        missing = [c for c in wanted if c not in out.columns]
        if not missing or out.empty:
            continue
        out = out.copy() if out is frame else out
        path = Path(canonical_dir) / file if canonical_dir is not None else None
        if path is None or not path.is_file():
            for column in missing:
                out[column] = pd.Series(pd.NA, index=out.index, dtype="object")
            continue
        ids = sorted(set(out[key].dropna().astype(str)))
        extra = pd.read_parquet(path, columns=[key, *missing], filters=[(key, "in", ids)])
        joined = out[[key]].merge(extra.drop_duplicates(key), on=key, how="left")
        for column in missing:
            out[column] = joined[column].to_numpy()
    return out
