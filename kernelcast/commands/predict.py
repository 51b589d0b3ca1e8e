"""`kernelcast predict`: how fast will this kernel run on that GPU? (no GPU needed)

kernelcast predict --op gemm --shape M=4096,N=4096,K=4096 --dtype bf16 --device H100 --device MI300X
kernelcast predict saxpy.cu --launch 4096/256 --device all
kernelcast predict model.py --device H100                 # a KernelBench-style PyTorch module
kernelcast predict --batch questions.csv --device H100 --json
kernelcast predict --llm Llama-3.1-70B --isl 2048 --osl 256 --concurrency 32 --tp 4 --device H100
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from kernelcast.commands._common import UserError, clean_errors, dtype_help, prepared_settings

DEFAULT_MODEL = "models:/kernelcast@champion"


def gather_questions(
    file: Path | None,
    op: str | None,
    shape: str | None,
    dtype: str | None,
    launch: str | None,
    kernel: str | None,
    define: list[str],
    batch: Path | None,
    device: list[str],
    *,
    allow_count: bool,
    row_errors: list[Any] | None = None,
    arg: list[str] | None = None,
    train: bool = False,
) -> Any:
    """Rows from exactly one of: --op/--shape, a source/module FILE, or --batch."""
    from components.serving.batch import expand, kernel_from_file, read_batch
    from components.serving.query import parse_shape

    forms = [
        name for name, given in (("--op/--shape", op or shape), ("FILE", file), ("--batch", batch)) if given
    ]
    if len(forms) != 1:
        raise UserError(
            "give exactly one of --op with --shape, a .cu/.hip/.py FILE, or --batch FILE"
            + (f" (got {' and '.join(forms)})" if forms else "")
        )
    if batch is not None:
        if dtype or launch or kernel or define or arg or train:
            raise UserError(
                "--dtype/--launch/--kernel/--define/--arg/--train do not apply to --batch "
                "(put them in the file)"
            )
        records = read_batch(batch, allow_count=allow_count, row_errors=row_errors)
    elif file is not None:
        record = kernel_from_file(file, launch, kernel, define, arg)
        if train:
            if "module" not in record:
                raise UserError(f"--train applies to a PyTorch module (.py), not the source {file.name}")
            record["train"] = True
        if dtype:
            record["dtype"] = dtype
        records = [(file.name, record)]
    else:
        if not (op and shape):
            raise UserError("--op and --shape go together, e.g. --op gemm --shape M=4096,N=4096,K=4096")
        if launch or kernel or define or arg or train:
            raise UserError("--launch/--kernel/--define/--arg/--train apply to a FILE, not to --op")
        records = [("--op/--shape", {"op": op, "shape": parse_shape(shape), "dtype": dtype or "fp32"})]
    return expand(records, device, row_errors)


def answer(rows: Any, model: str, allow_modules: bool = True) -> tuple[list[dict[str, Any]], str]:
    from components.serving.batch import restate
    from components.serving.models import load_model
    from components.serving.query import QueryError
    from components.serving.question_forms import parse_questions
    from components.serving.questions import answer_questions

    try:
        questions = parse_questions(rows.rows)
    except QueryError as exc:
        raise UserError(restate(str(exc), rows.origins)) from None
    loaded = load_model(model)
    try:
        answers = answer_questions(
            loaded.predictor, questions, model_version=loaded.version, allow_modules=allow_modules
        )
    except QueryError as exc:
        raise UserError(restate(str(exc), rows.origins)) from None
    return answers, loaded.version


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def render_table(
    answers: list[dict[str, Any]], labels: list[str] | None, kernel_of_row: list[int]
) -> list[str]:
    """A readable table: runtime with its interval, bound, headroom; then per-op breakdowns and notes."""
    many = labels is not None and len(set(kernel_of_row)) > 1
    header = (["kernel"] if many else []) + [
        "device",
        "runtime_us",
        "interval_us",
        "class",
        "bound",
        "headroom",
        "GFLOP/s",
        "GB/s",
    ]
    body = []
    for row, a in enumerate(answers):
        interval = (
            f"{_fmt(a.get('duration_us_lo'))} - {_fmt(a.get('duration_us_hi'))}"
            if a.get("duration_us_lo") is not None
            else "-"
        )
        cells = ([labels[kernel_of_row[row]]] if many and labels else []) + [
            a["device"],
            _fmt(a.get("duration_us")),
            interval,
            _fmt(a.get("roofline_class")),
            _fmt(a.get("bound_pipe")),
            _fmt(a.get("headroom"), 3),
            _fmt(a.get("gflops")),
            _fmt(a.get("achieved_gbps")),
        ]
        body.append(cells)
    widths = [max(len(str(r[i])) for r in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(
            str(c).ljust(w) if i < (2 if many else 1) else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in [header, *body]
    ]
    for a in answers:
        ops = a.get("breakdown") or []
        if isinstance(ops, list) and ops:
            lines.append(f"top ops on {a['device']}:")
            for item in ops:
                lines.append(
                    f"  {item.get('op', '?'):<32} x{_fmt(item.get('count'))}  "
                    f"{_fmt(item.get('duration_us'))} us  {_fmt(item.get('bound'))}"
                )
    for a in answers:
        if a.get("ood"):
            unseen = a.get("unseen") or "the shape"
            lines.append(
                f"note: {a['device']}: outside what this model has measured or was trained on ({unseen}); "
                "the interval is the wider out-of-range one"
            )
        if a.get("note"):
            lines.append(f"note: {a['device']}: {a['note']}")
    return lines


def _line_number(origin: str) -> int:
    """``questions.csv line 12`` -> 12 (the order errors are listed in)."""
    tail = origin.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


@clean_errors
def predict_command(
    file: Annotated[
        Path | None, typer.Argument(help="a .cu/.hip kernel source or a .py PyTorch module")
    ] = None,
    op: Annotated[
        str | None, typer.Option(help="op: gemm, linear, bmm, add, mul, gelu, silu, softmax, layernorm, ...")
    ] = None,
    shape: Annotated[
        str | None, typer.Option(help="sizes, e.g. M=4096,N=4096,K=4096 (bmm adds B; rows ops use B,H)")
    ] = None,
    device: Annotated[
        list[str] | None,
        typer.Option(help="GPU name/alias, a spec file (.yaml/.json), or 'all' (repeatable)"),
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            help=dtype_help(
                "op default fp32; --llm: the weights', default the checkpoint's fp8/nvfp4, else bf16"
            )
        ),
    ] = None,
    launch: Annotated[
        str | None, typer.Option(help="a source's launch: GRID/BLOCK (4096/256, 64,64/16,16) or JSON")
    ] = None,
    kernel: Annotated[
        str | None, typer.Option(help="the __global__ function of the source to predict")
    ] = None,
    define: Annotated[
        list[str] | None, typer.Option(help="-D macro for the source, NAME=VALUE (repeatable)")
    ] = None,
    train: Annotated[
        bool,
        typer.Option("--train", help="a module's training step: forward + backward + Adam, memory checked"),
    ] = False,
    arg: Annotated[
        list[str] | None,
        typer.Option(help="kernel argument NAME=NUMBER or STRUCT.FIELD=NUMBER (repeatable): counts loops"),
    ] = None,
    batch: Annotated[
        Path | None,
        typer.Option(help="CSV or JSONL file of questions (columns: device, dtype, op, shape, ...)"),
    ] = None,
    model: Annotated[
        str, typer.Option(help="models:/kernelcast@champion, a predictor dir, or 'roofline'")
    ] = DEFAULT_MODEL,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    llm: Annotated[
        str | None, typer.Option(help="deployment: an LLM's HF config.json (path, JSON text or bundled name)")
    ] = None,
    isl: Annotated[int | None, typer.Option(help="--llm: input tokens per request")] = None,
    osl: Annotated[int | None, typer.Option(help="--llm: output tokens per request")] = None,
    concurrency: Annotated[int, typer.Option(help="--llm: concurrent requests")] = 1,
    tp: Annotated[int, typer.Option(help="--llm: tensor-parallel GPUs")] = 1,
    pp: Annotated[int, typer.Option(help="--llm: pipeline stages")] = 1,
    ep: Annotated[int, typer.Option(help="--llm: expert-parallel GPUs (MoE)")] = 1,
    dp: Annotated[int, typer.Option(help="--llm: attention data-parallel ranks of tp GPUs (MoE)")] = 1,
    kv_dtype: Annotated[str | None, typer.Option(help="--llm: KV-cache dtype (default from --dtype)")] = None,
    mode: Annotated[str, typer.Option(help="--llm: agg | disagg (separate prefill/decode workers)")] = "agg",
    prefill_gpus: Annotated[
        int | None,
        typer.Option(help="--llm --mode disagg: GPUs of the prefill workers (default: one worker, tp x pp)"),
    ] = None,
    decode_gpus: Annotated[
        int | None,
        typer.Option(help="--llm --mode disagg: GPUs of the decode workers (default: one worker, tp x pp)"),
    ] = None,
    workload: Annotated[
        str, typer.Option(help="--llm: steady (requests keep arriving) | batch (all at once)")
    ] = "steady",
    framework: Annotated[
        str, typer.Option(help="--llm: the serving engine simulated: vllm | sglang | trtllm")
    ] = "vllm",
) -> None:
    """Predict runtime (with its interval), roofline class, bound pipe and headroom on one or more GPUs;
    with --llm, a deployment's TTFT, TPOT, throughput and memory."""
    if device and llm is None:
        # A --device the catalog lacks fails here, before settings, numpy, pandas and the model load (the same
        # check, and message, the question rows get below): an error costs the catalog, not the engine.
        from components.serving.rank import resolve_devices

        resolve_devices(list(device), "--device", allow_files=True)
    prepared_settings()
    if batch is not None and llm is None:
        from kernelcast.commands.deployment import carried_parts, is_deployment_batch, predict_llm_batch

        if is_deployment_batch(batch):  # rows with an `llm` column: deployments, not kernels
            predict_llm_batch(batch, as_json, carried_parts(model, DEFAULT_MODEL))
            return
    if llm is not None:
        from kernelcast.commands.deployment import carried_parts, llm_params, predict_llm

        if file or op or shape or batch or launch or kernel or define or arg or train:
            raise UserError("--llm is a question of its own: drop FILE/--op/--shape/--batch/--launch")
        predict_llm(
            llm,
            device,
            llm_params(
                isl,
                osl,
                concurrency,
                tp,
                pp,
                ep,
                dtype,
                kv_dtype,
                mode,
                workload,
                prefill_gpus,
                decode_gpus,
                framework,
                dp,
            ),
            as_json,
            carried_parts(model, DEFAULT_MODEL),
        )
        return
    if prefill_gpus is not None or decode_gpus is not None:
        raise UserError("--prefill-gpus/--decode-gpus apply to an --llm deployment with --mode disagg")
    errors: list[Any] = []  # batch rows not answered, each with its error (the others are)
    rows = gather_questions(
        file,
        op,
        shape,
        dtype,
        launch,
        kernel,
        define or [],
        batch,
        device or [],
        allow_count=False,
        row_errors=errors,
        arg=arg or [],
        train=train,
    )
    if batch is None:
        answers, version = answer(rows, model)
    else:  # a bad row costs that row: the rest are answered, the bad ones listed with their error
        from components.serving.batch import answer_rows
        from components.serving.models import load_model

        loaded = load_model(model)
        answers, failed_rows = (
            answer_rows(loaded.predictor, rows, model_version=loaded.version) if rows.rows else ([], [])
        )
        errors = sorted(errors + failed_rows, key=lambda e: _line_number(e.row))
        version = loaded.version
    n_rows = len(rows.kernel_labels) + len({e.row for e in errors} - set(rows.kernel_labels))
    failed = (
        None
        if not errors
        else (
            f"all {n_rows} rows failed"
            if len(errors) == n_rows
            else f"{len(errors)} of {n_rows} rows failed; the other rows are answered"
        )
    )
    if as_json:
        for a in answers:
            a["kernel"] = rows.kernel_of_row[a["question"]]
            if batch is not None:
                a["row"] = rows.origins[a["question"]]  # the file line, as the errors name theirs
        report: dict[str, Any] = {"model_version": version, "predictions": answers}
        if batch is not None:
            report["errors"] = [{"row": e.row, "error": e.error} for e in errors]
        typer.echo(json.dumps(report, indent=2))
    else:
        if answers:
            for line in render_table(
                answers, rows.kernel_labels, [rows.kernel_of_row[a["question"]] for a in answers]
            ):
                typer.echo(line)
        typer.echo(f"model: {version}")
    for e in errors:
        typer.echo(f"error: {e.error}", err=True)
    if failed:
        typer.echo(f"error: {failed}", err=True)
        raise typer.Exit(1)
