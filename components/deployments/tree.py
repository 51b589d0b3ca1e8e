"""Score the serving runs of one upstream tree (``kernelcast evaluate --source S --from DIR``).

- ``pipeweave``: ``DIR/e2e/real/*.jsonl`` (offline batches: prefill, decode step, total), model configs from
  ``DIR/config``, measured all-reduce tables from ``DIR/dataset/collective``.
- ``aiconfigurator``: ``DIR/aic-core/.../systems/silicon_sample.csv`` (steady serving: TTFT, TPOT), model
  configs from ``DIR/aic-core/.../model_configs``.

The composition answers with the production framework cost (``fitted.py``: fitted on the shared datasets'
runs -- a tree holding those same runs scores training data, and the report says so). Per device: MAPE of
each target, runs asked, answered and the coverage; every run not answered is listed with its reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from components.common.metrics import mape

SERVING_SOURCES = ("pipeweave", "aiconfigurator")
TARGETS = {"pipeweave": ("prefill_ms", "decode_ms", "total_ms"), "aiconfigurator": ("ttft_ms", "tpot_ms")}


def _pipeweave(
    root: Path, catalog: Any, fw: Any, ops: dict[str, Any]
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    from components.deployments.bench import predict_frames
    from components.deployments.bench_pipeweave import compose_pipeweave
    from components.deployments.data import read_allreduce_tables, read_pipeweave_tree

    runs = read_pipeweave_tree(root)
    if runs.empty:
        raise FileNotFoundError(f"--from {root}: no e2e/real/e2e_*.jsonl serving runs (PipeWeave's layout)")
    tables = read_allreduce_tables(root, tree=True)
    frames: dict[str, pd.DataFrame] = {}
    refused: list[dict[str, Any]] = []
    for source in sorted({fw.source_of(p) for p in ("prefill", "decode")}):
        refused = []
        frames[source] = compose_pipeweave(
            runs, catalog, root, ops[source], allreduce=tables, refused=refused
        )
    composed = next(iter(frames.values()))
    pred = predict_frames("pipeweave", frames, fw) if not composed.empty else composed
    return runs, pred, pd.DataFrame(refused, columns=["id", "device_id", "reason"])


def _silicon(
    root: Path, catalog: Any, fw: Any, ops: dict[str, Any]
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    from components.deployments.bench import predict_frames
    from components.deployments.bench_silicon import compose_silicon
    from components.deployments.data import read_silicon_tree

    runs = read_silicon_tree(root)
    frames: dict[str, pd.DataFrame] = {}
    for source in sorted({fw.source_of(p) for p in ("steady_ttft", "steady_tpot")}):
        frames[source], refused = compose_silicon(runs, catalog, root, ops[source])
    composed = next(iter(frames.values()))
    pred = predict_frames("silicon", frames, fw) if not composed.empty else composed
    if not pred.empty:
        pred = pred.rename(columns={"silicon_ttft_ms": "ttft_ms", "silicon_tpot_ms": "tpot_ms"})
    return runs, pred, refused.reindex(columns=["id", "device_id", "reason"])


def _rounded_mape(true: pd.Series, pred: pd.Series) -> float | None:
    """The report's MAPE (4 decimals); None where no row has a positive measured time."""
    value = mape(true.to_numpy(float), pred.to_numpy(float))
    return None if math.isnan(value) else round(value, 4)


def score_serving_tree(
    source: str, root: Path, catalog: Any, framework: Any = None, log: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """The serving section of an evaluation report for one tree (see the module docstring)."""
    from components.deployments.framework_cost import resolve_ops

    if source not in SERVING_SOURCES:
        raise ValueError(f"--source {source!r}: serving runs come from {' or '.join(SERVING_SOURCES)}")
    fw, ops = resolve_ops(framework, None)
    runs, pred, refused = (_pipeweave if source == "pipeweave" else _silicon)(Path(root), catalog, fw, ops)
    targets = TARGETS[source]
    devices = {}
    for device in sorted(runs["device_id"].astype(str).unique()):
        got = pred[pred["device_id"] == device] if not pred.empty else pred
        asked = int((runs["device_id"] == device).sum())
        entry: dict[str, Any] = {"n_asked": asked, "n": len(got), "coverage": round(len(got) / asked, 4)}
        for target in targets:
            entry[f"{target}_mape"] = (
                _rounded_mape(got[target], got[f"{target.removesuffix('_ms')}_pred_ms"]) if len(got) else None
            )
        reasons = refused[refused["device_id"] == device]["reason"].value_counts()
        entry["not_answered"] = {str(k): int(v) for k, v in reasons.items()}
        devices[device] = entry
        figures = " ".join(f"{t}={entry[f'{t}_mape']:.1%}" for t in targets if entry[f"{t}_mape"] is not None)
        log(f"serving {device:16s} {len(got)}/{asked} answered {figures}")
    overall = {
        f"{t}_mape": _rounded_mape(pred[t], pred[f"{t.removesuffix('_ms')}_pred_ms"]) if len(pred) else None
        for t in targets
    }
    return {
        "source": source,
        "from": str(root),
        "n_asked": len(runs),
        "n": len(pred),
        "coverage": round(len(pred) / len(runs), 4) if len(runs) else None,
        **overall,
        "by_device": devices,
        "unanswered": refused.astype({"id": str}).to_dict("records"),
        "framework": fw.source + "; steady: " + fw.steady_source,
        "note": "production framework cost (components/deployments/engines/constants.json), fitted on the "
        "shared datasets' runs: runs of those same trees are training runs for it",
    }
