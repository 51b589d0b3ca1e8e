"""`kernelcast rank`: which GPU runs this kernel -- or this workload -- fastest, or cheapest?

    kernelcast rank --op gemm --shape M=8192,N=8192,K=8192 --dtype bf16            # every catalog GPU
    kernelcast rank --batch workload.csv --device H100 --device MI300X --device L40S \
        --price H100=2.5 --price MI300X=2.1 --price L40S=1.0                        # cost per run
    kernelcast rank --llm Llama-3.1-70B --isl 2048 --osl 256 --concurrency 32 --by cost --price H100=2.5
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from kernelcast.commands._common import UserError, clean_errors, dtype_help, prepared_settings
from kernelcast.commands.predict import DEFAULT_MODEL


def read_prices(items: list[str], file: Path | None) -> dict[str, float]:
    """``--price NAME=USD_PER_HOUR`` (repeatable) and/or a JSON/YAML ``--prices`` file (GPU -> USD/hour)."""
    prices: dict[str, Any] = {}
    if file is not None:
        if not file.is_file():
            raise UserError(f"--prices {file}: no such file")
        import yaml

        try:
            data = yaml.safe_load(file.read_text())
        except yaml.YAMLError as exc:
            raise UserError(f"--prices {file}: not valid YAML/JSON ({str(exc).splitlines()[0]})") from None
        if not isinstance(data, dict):
            raise UserError(f"--prices {file}: expected a mapping of GPU name -> USD per hour")
        prices.update({str(k): v for k, v in data.items()})
    for item in items:
        name, sep, value = item.partition("=")
        try:
            prices[name.strip()] = float(value)
        except ValueError:
            raise UserError(f"--price {item!r}: expected NAME=USD_PER_HOUR, e.g. H100=2.5") from None
        if not sep or not name.strip():
            raise UserError(f"--price {item!r}: expected NAME=USD_PER_HOUR, e.g. H100=2.5")
    return prices


@clean_errors
def rank_command(
    file: Annotated[
        Path | None, typer.Argument(help="a .cu/.hip kernel source or a .py PyTorch module")
    ] = None,
    op: Annotated[
        str | None, typer.Option(help="op: gemm, linear, bmm, add, gelu, softmax, layernorm, ...")
    ] = None,
    shape: Annotated[str | None, typer.Option(help="sizes, e.g. M=4096,N=4096,K=4096")] = None,
    dtype: Annotated[
        str | None,
        typer.Option(help=dtype_help("op default fp32; --llm: the checkpoint's fp8/nvfp4, else bf16")),
    ] = None,
    launch: Annotated[
        str | None, typer.Option(help="a source's launch: GRID/BLOCK (4096/256) or JSON")
    ] = None,
    kernel: Annotated[str | None, typer.Option(help="the __global__ function of the source")] = None,
    define: Annotated[list[str] | None, typer.Option(help="-D macro for the source, NAME=VALUE")] = None,
    batch: Annotated[
        Path | None, typer.Option(help="workload: CSV/JSONL of kernels (question columns + count)")
    ] = None,
    device: Annotated[
        list[str] | None, typer.Option(help="GPUs to rank (repeatable; default: the whole catalog)")
    ] = None,
    price: Annotated[
        list[str] | None, typer.Option(help="USD per hour of a GPU, NAME=PRICE (repeatable)")
    ] = None,
    prices: Annotated[Path | None, typer.Option(help="JSON/YAML file: GPU name -> USD per hour")] = None,
    top: Annotated[int, typer.Option(help="show the best N (0 = all)", min=0)] = 0,
    model: Annotated[
        str, typer.Option(help="models:/kernelcast@champion, a predictor dir, or 'roofline'")
    ] = DEFAULT_MODEL,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    llm: Annotated[
        str | None,
        typer.Option(help="rank GPU x TP deployments of an LLM (HF config path/text/bundled name)"),
    ] = None,
    isl: Annotated[int | None, typer.Option(help="--llm: input tokens per request")] = None,
    osl: Annotated[int | None, typer.Option(help="--llm: output tokens per request")] = None,
    concurrency: Annotated[int, typer.Option(help="--llm: concurrent requests")] = 1,
    tp: Annotated[
        list[int] | None, typer.Option(help="--llm: TP options (repeatable; default 1, 2, 4, 8)")
    ] = None,
    kv_dtype: Annotated[str | None, typer.Option(help="--llm: KV-cache dtype")] = None,
    mode: Annotated[str, typer.Option(help="--llm: agg | disagg")] = "agg",
    workload: Annotated[str, typer.Option(help="--llm: steady | batch")] = "steady",
    framework: Annotated[
        str, typer.Option(help="--llm: serving engine(s): vllm | sglang | trtllm, a comma list, or all")
    ] = "vllm",
    by: Annotated[
        str, typer.Option(help="--llm: rank by tpot | ttft | cost (cost per million output tokens)")
    ] = "tpot",
) -> None:
    """Rank GPUs by the predicted time of a kernel or workload (by cost per run when prices are given);
    with --llm, GPU x TP deployments that fit, by TPOT, TTFT or cost per million tokens."""
    prepared_settings()
    if llm is not None:
        from kernelcast.commands.deployment import carried_parts, llm_params, rank_llm

        if file or op or shape or batch:
            raise UserError("--llm is a question of its own: drop FILE/--op/--shape/--batch")
        params = llm_params(
            isl, osl, concurrency, 1, 1, 1, dtype, kv_dtype, mode, workload, framework=framework
        )
        prices_read = read_prices(price or [], prices)
        carried = carried_parts(model, DEFAULT_MODEL)
        rank_llm(llm, device, params, prices_read, by, tp, top, as_json, carried)
        return
    from components.serving.batch import restate
    from components.serving.models import load_model
    from components.serving.query import QueryError
    from components.serving.rank import rank, rank_note, resolve_devices

    price_table = read_prices(price or [], prices)
    specs = resolve_devices(list(device) if device else "all", "--device", allow_files=True)
    from components.serving.batch import kernel_from_file, read_batch
    from components.serving.query import parse_shape

    # Kernels without devices: rank() asks each on every GPU.
    forms = [
        name for name, given in (("--op/--shape", op or shape), ("FILE", file), ("--batch", batch)) if given
    ]
    if len(forms) > 1:
        raise UserError(
            f"give one of --op with --shape, a .cu/.hip/.py FILE, or --batch FILE (got {' and '.join(forms)})"
        )
    if batch is not None:
        records = read_batch(batch, allow_count=True)
    elif file is not None:
        records = [
            (
                file.name,
                {
                    **kernel_from_file(file, launch, kernel, define or []),
                    **({"dtype": dtype} if dtype else {}),
                },
            )
        ]
    elif op and shape:
        records = [("--op/--shape", {"op": op, "shape": parse_shape(shape), "dtype": dtype or "fp32"})]
    else:
        raise UserError("give one of --op with --shape, a .cu/.hip/.py FILE, or --batch FILE")
    kernels, counts, origins = [], [], []
    for origin, record in records:
        if record.get("device") or record.get("device_spec"):
            raise UserError(f"{origin}: a workload row names no device (the GPUs come from --device)")
        try:
            counts.append(int(record.pop("count", 1)))
        except (TypeError, ValueError):
            raise UserError(f"{origin}: count is not an integer") from None
        kernels.append(record)
        origins.append(origin)
    loaded = load_model(model)
    try:
        ranking, ranked_by = rank(
            loaded.predictor,
            kernels,
            counts,
            specs,
            price_table,
            model_version=loaded.version,
            allow_modules=True,
        )
    except QueryError as exc:
        row_origins = [origins[i // len(specs)] for i in range(len(kernels) * len(specs))]
        raise UserError(restate(str(exc), row_origins)) from None
    shown = ranking[:top] if top else ranking
    note = rank_note(kernels, specs, price_table)
    if as_json:
        typer.echo(
            json.dumps(
                {"model_version": loaded.version, "ranked_by": ranked_by, "ranking": shown, "note": note},
                indent=2,
            )
        )
        return
    priced = ranked_by == "cost"
    header = ["rank", "device", "total_us", "interval_us"] + (["usd/hour", "usd/run"] if priced else [])
    body = []
    for entry in shown:
        interval = (
            f"{entry['total_us_lo']:.4g} - {entry['total_us_hi']:.4g}"
            if entry.get("total_us_lo") is not None and entry.get("total_us_hi") is not None
            else "-"
        )
        cells = [
            str(entry["rank"]),
            entry["device"],
            "-" if entry["total_us"] is None else f"{entry['total_us']:.4g}",
            interval,
        ]
        if priced:
            cells += [
                "-" if entry.get("usd_per_hour") is None else f"{entry['usd_per_hour']:.3g}",
                "-" if entry.get("usd_per_run") is None else f"{entry['usd_per_run']:.3g}",
            ]
        body.append(cells)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    for r in [header, *body]:
        typer.echo(
            "  ".join(
                c.ljust(w) if i == 1 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    unpriced = (
        "; GPUs without a price after the priced ones, by predicted time"
        if ranked_by == "cost" and any(e.get("usd_per_hour") is None for e in ranking)
        else ""
    )
    typer.echo(
        f"ranked by {'cost per run' if ranked_by == 'cost' else 'predicted time'}{unpriced}; "
        f"model: {loaded.version}"
    )
    if note:
        typer.echo(f"note: {note}")
