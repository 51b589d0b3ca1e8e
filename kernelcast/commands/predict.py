"""`kernelcast predict`: how fast will this op run on that GPU? (no GPU needed)

    kernelcast predict --op gemm --shape M=4096,N=4096,K=4096 --dtype bf16 --device H100 --device MI300X

The query becomes a one-row canonical measurement (no metrics), goes through the same feature
builder as training data, and is scored by a predictor: the registry champion by default, a local
predictor directory, or ``roofline`` (no training).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings

FAMILY_OF_OP: dict[str, tuple[str, str]] = {
    # --op value -> (family, op) as the canonical kernels table names them
    "gemm": ("gemm", "matmul"), "matmul": ("gemm", "matmul"), "linear": ("linear", "linear"),
    "bmm": ("bmm", "bmm"), "add": ("elementwise", "add"), "mul": ("elementwise", "mul"),
    "gelu": ("elementwise", "gelu"), "relu": ("elementwise", "relu"), "tanh": ("elementwise", "tanh"),
    "softmax": ("softmax", "softmax"), "layernorm": ("layernorm", "layer_norm"), "rmsnorm": ("rmsnorm", "rmsnorm"),
}


def parse_shape(text: str) -> dict[str, int]:
    """``M=4096,N=4096,K=4096`` -> {"M": 4096, ...}; a clear error names the bad item."""
    shape: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip().isdigit() or int(value) <= 0:
            raise UserError(f"--shape item {item!r}: expected NAME=positive integer, e.g. M=4096")
        shape[name.strip()] = int(value)
    if not shape:
        raise UserError("--shape is empty; e.g. --shape M=4096,N=4096,K=4096")
    return shape


def query_frames(op: str, shape: dict[str, int], dtype: str, device_ids: list[str]):  # noqa: ANN201
    """One canonical (measurements, kernels) pair per device for the query."""
    import pandas as pd

    from components.ingest.schema import KERNEL_COLUMNS, MEASUREMENT_COLUMNS, canonical_json, conform, stable_id

    if op not in FAMILY_OF_OP:
        raise UserError(f"--op {op!r}: choose one of {', '.join(sorted(FAMILY_OF_OP))}")
    family, op_name = FAMILY_OF_OP[op]
    shape_json = canonical_json(shape)
    kernel_id = stable_id("query", family, op_name, dtype, shape_json)
    kernels = conform(pd.DataFrame([{"kernel_id": kernel_id, "source": "query", "family": family, "op": op_name,
                                     "name": f"{op_name}{shape}", "language": "op", "shape_json": shape_json,
                                     "dtype": dtype}]), KERNEL_COLUMNS)
    rows = [{"measurement_id": stable_id("query", kernel_id, d), "kernel_id": kernel_id, "device_id": d,
             "source": "query", "params_json": shape_json, "run_id": "query"} for d in device_ids]
    return conform(pd.DataFrame(rows), MEASUREMENT_COLUMNS), kernels


def load_any_predictor(model: str):  # noqa: ANN201
    """``roofline`` | a local predictor directory | an MLflow ``models:/`` URI (pyfunc)."""
    if model == "roofline":
        from components.models.roofline import RooflinePredictor

        return RooflinePredictor()
    if model.startswith("models:/") or model.startswith("runs:/"):
        import mlflow.pyfunc

        try:
            return mlflow.pyfunc.load_model(model)
        except Exception as exc:  # registry errors come in many types; the user needs one line
            raise UserError(f"--model {model}: cannot load from the MLflow registry ({exc})") from exc
    from components.models import load_predictor

    return load_predictor(Path(model))


@clean_errors
def predict_command(
    op: Annotated[str, typer.Option(help="op: gemm, bmm, linear, add, mul, gelu, relu, tanh, softmax, layernorm")],
    shape: Annotated[str, typer.Option(help="sizes, e.g. M=4096,N=4096,K=4096 (bmm adds B; rows ops use B,H)")],
    device: Annotated[list[str], typer.Option(help="GPU name or alias (repeatable), e.g. H100, MI300X")],
    dtype: Annotated[str, typer.Option(help="fp32 | fp16 | bf16 | fp8")] = "fp32",
    model: Annotated[str, typer.Option(help="models:/kernelcast@champion, a predictor dir, or 'roofline'")] = (
        "models:/kernelcast@champion"),
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """Predict runtime, GFLOP/s, bandwidth and roofline class of an op on one or more GPUs."""
    prepared_settings()
    from components.devices import load_catalog
    from components.features.build import build_feature_table

    catalog = load_catalog()
    specs = [catalog.resolve(name) for name in device]
    measurements, kernels = query_frames(op, parse_shape(shape), dtype, [s.id for s in specs])
    features = build_feature_table(measurements, kernels, catalog)
    predictions = load_any_predictor(model).predict(features)
    results = []
    for spec, (_, row) in zip(specs, predictions.reset_index(drop=True).iterrows()):
        result = {"device": spec.id, "device_name": spec.name}
        for column, value in row.items():
            if str(column).startswith("pred_"):
                result[str(column)[5:]] = value if isinstance(value, str) else (
                    None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value))
        results.append(result)
    if as_json:
        typer.echo(json.dumps({"op": op, "shape": shape, "dtype": dtype, "model": model, "predictions": results},
                              indent=2))
        return
    keys = [k for k in ("duration_us", "duration_us_lo", "duration_us_hi", "gflops", "achieved_gbps",
                        "arith_intensity", "roofline_class") if any(k in r for r in results)]
    typer.echo(f"{'device':<16}" + "".join(f"{k:>18}" for k in keys))
    for r in results:
        cells = [r.get(k) for k in keys]
        typer.echo(f"{r['device']:<16}" + "".join(
            f"{c:>18}" if isinstance(c, str) or c is None else f"{c:>18.4g}" for c in cells))
