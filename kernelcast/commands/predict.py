"""`kernelcast predict`: how fast will this op run on that GPU? (no GPU needed)

    kernelcast predict --op gemm --shape M=4096,N=4096,K=4096 --dtype bf16 --device H100 --device MI300X
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings

@clean_errors
def predict_command(
    op: Annotated[str, typer.Option(help="op: gemm, bmm, linear, add, mul, gelu, relu, tanh, softmax, layernorm")],
    shape: Annotated[str, typer.Option(help="sizes, e.g. M=4096,N=4096,K=4096 (bmm adds B; rows ops use B,H)")],
    device: Annotated[list[str], typer.Option(help="GPU name or alias, or a spec file (.yaml/.json) for a GPU the catalog lacks (repeatable), e.g. H100, MI300X")],
    dtype: Annotated[str, typer.Option(help="fp32 | fp16 | bf16 | fp8")] = "fp32",
    model: Annotated[str, typer.Option(help="models:/kernelcast@champion, a predictor dir, or 'roofline'")] = (
        "models:/kernelcast@champion"),
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """Predict runtime, GFLOP/s, bandwidth and roofline class of an op on one or more GPUs."""
    prepared_settings()
    from components.serving.query import QueryError, load_any_predictor, parse_shape, score

    try:
        results = score(load_any_predictor(model), op, parse_shape(shape), dtype, device)
    except QueryError as exc:
        raise UserError(str(exc)) from exc
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
            f"{c:>18}" if isinstance(c, str) else f"{'-':>18}" if c is None else f"{c:>18.4g}" for c in cells))
    # What the numbers cannot claim: a query outside the training data, a dtype the GPU emulates.
    for r in results:
        if r.get("ood"):
            typer.echo(f"note: {r['device']}: the query lies outside the shapes this model was trained on; "
                       "the interval is the wider out-of-range one")
        if r.get("note"):
            typer.echo(f"note: {r['device']}: {r['note']}")
