"""`kernelcast predict --llm` and `kernelcast rank --llm`: deployment questions (TTFT, TPOT, cost).

kernelcast predict --llm Llama-3.1-70B --isl 2048 --osl 256 --concurrency 32 --tp 4 --dtype fp8 --device H100
kernelcast rank --llm Llama-3.1-70B --isl 2048 --osl 256 --concurrency 32 --price H100=2.5 --by cost
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from kernelcast.commands._common import UserError


def llm_params(
    isl: int | None,
    osl: int | None,
    concurrency: int,
    tp: int,
    pp: int,
    ep: int,
    dtype: str | None,
    kv_dtype: str | None,
    mode: str,
    workload: str,
    prefill_gpus: int | None = None,
    decode_gpus: int | None = None,
    framework: str = "vllm",
    dp: int = 1,
) -> dict[str, Any]:
    if isl is None or osl is None:
        raise UserError("--llm needs --isl and --osl (input and output tokens per request)")
    return {
        "isl": isl,
        "osl": osl,
        "concurrency": concurrency,
        "tp": tp,
        "pp": pp,
        "ep": ep,
        "dp": dp,
        "dtype": dtype,  # None: the checkpoint's own (service.default_weight_dtype)
        "kv_dtype": kv_dtype,
        "mode": mode,
        "workload": workload,
        **({"prefill_gpus": prefill_gpus} if prefill_gpus is not None else {}),
        **({"decode_gpus": decode_gpus} if decode_gpus is not None else {}),
        "framework": framework,
    }


def _specs(device: list[str] | None, default_all: bool) -> list[Any]:
    from components.serving.rank import resolve_devices

    if not device and not default_all:
        raise UserError("--llm needs --device (a catalog name, a spec file, or 'all')")
    return resolve_devices(list(device) if device else "all", "--device", allow_files=True)


def carried_parts(model: str, default_model: str) -> Any:
    """What ``--model`` answers deployments with: the op engine and engine constants it carries
    (``deployment_questions.model_parts``), so the champion answers with no state folder beside it. The
    default champion not there yet (no pipeline run): None, the state folder's and the package's."""
    from components.serving.deployment_questions import model_parts
    from components.serving.models import load_model
    from components.serving.query import QueryError

    try:
        loaded = load_model(model)
    except QueryError as exc:
        if model == default_model:
            return None
        raise UserError(str(exc)) from None
    return model_parts(loaded.predictor)


def predict_llm(
    config: str, device: list[str] | None, params: dict[str, Any], as_json: bool, carried: Any = None
) -> None:
    from components.deployments.config import DeploymentError
    from components.serving.disagg import predict_split_deployment

    specs = _specs(device, default_all=False)
    try:
        answers = predict_split_deployment(config, specs, params, carried=carried)
    except DeploymentError as exc:
        raise UserError(str(exc)) from None
    if as_json:
        typer.echo(json.dumps({"deployments": answers}, indent=2))
        return
    for a in answers:
        for line in render_answer(a):
            typer.echo(line)


def is_deployment_batch(path: Path) -> bool:
    """A --batch file whose first row names an ``llm`` holds deployments."""
    if not path.is_file():
        return False
    with path.open(errors="replace") as handle:
        first = next((line for line in handle if line.strip()), "")
    if path.suffix.lower() in (".jsonl", ".json"):
        try:
            return "llm" in json.loads(first)
        except (json.JSONDecodeError, TypeError):
            return False
    return "llm" in [c.strip() for c in first.split(",")]


def predict_llm_batch(path: Path, as_json: bool, carried: Any = None) -> None:
    from components.deployments.config import DeploymentError
    from components.deployments.service import predict_batch, read_deployment_batch
    from components.devices import load_catalog

    catalog = load_catalog()
    try:
        answers = predict_batch(
            read_deployment_batch(path),
            catalog.resolve,
            carried.op_time if carried is not None else None,
            carried.constants if carried is not None else None,
        )
    except DeploymentError as exc:
        raise UserError(str(exc)) from None
    if as_json:
        typer.echo(json.dumps({"deployments": answers}, indent=2))
        return
    for a in answers:
        typer.echo(f"[{a['row']}]")
        for line in render_answer(a):
            typer.echo(line)


def render_answer(a: dict[str, Any]) -> list[str]:
    from components.serving.disagg import split_line

    d = a["deployment"]
    if "refused" in a:
        return [f"{d['model']} on {d['gpu']}: {a['refused']}"]
    ttft, tpot, mem = a["interval"]["ttft_ms"], a["interval"]["tpot_ms"], a["memory"]
    head = (
        f"{d['model']} ({d['parameters_b']}B, {d['dtype']}, kv {d['kv_dtype']}) on {d['gpu']} "
        f"x{d['tp'] * d['pp'] * d.get('dp', 1)} (tp={d['tp']}, pp={d['pp']}, ep={d['ep']}, "
        f"dp={d.get('dp', 1)}, {d['mode']}); "
        f"isl {d['isl']}, osl {d['osl']}, concurrency {d['concurrency']}"
    )
    engine = d.get("engine")
    served_by = (
        f"  served by {engine['name']}: {engine['policy']} scheduling, {engine['max_num_batched_tokens']} "
        f"tokens/step, <= {engine['max_num_seqs']} running, KV blocks of {engine['block_size']}, memory "
        f"fraction {engine['memory_fraction']:g}"
        if engine
        else f"  served by {d.get('framework', 'vllm')}"
    )
    memory = (
        f"  memory per GPU: weights {mem['weights_gb']:.3g} GB + KV {mem['kv_cache_gb']:.3g} GB + "
        f"activations {mem['activations_gb']:.3g} GB = {mem['total_gb']:.3g} of "
        f"{mem['budget_gb']:.3g} GB usable"
    )
    lines = [
        head,
        served_by,
        f"  TTFT {a['ttft_ms']:.4g} ms  [{ttft[0]:.4g} - {ttft[1]:.4g}]",
        f"  TPOT {a['tpot_ms']:.4g} ms  [{tpot[0]:.4g} - {tpot[1]:.4g}]",
        f"  e2e {a['e2e_ms']:.5g} ms per request; {a['tokens_per_s']:.4g} output tokens/s per GPU",
        memory,
    ]
    split = split_line(d)
    if split:
        lines.insert(1, f"  {split}")
    for phase in ("prefill", "decode"):
        parts = ", ".join(
            f"{k} {v['share']:.0%}" + (f" ({v['tier']})" if v.get("tier") else "")
            for k, v in a["breakdown"][phase].items()
            if v["share"] >= 0.01
        )
        lines.append(f"  {phase} kernels: {parts}")
    tiers = sorted(set(a["tiers"].values()))
    lines.append(f"  op tiers: {', '.join(tiers)}")
    lines += [f"  note: {n}" for n in a["notes"]]
    return lines


def rank_llm(
    config: str,
    device: list[str] | None,
    params: dict[str, Any],
    prices: dict[str, float],
    by: str,
    tps: list[int] | None,
    top: int,
    as_json: bool,
    carried: Any = None,
) -> None:
    from components.deployments.config import DeploymentError
    from components.deployments.service import rank_deployments
    from components.serving.rank import prices_for

    specs = _specs(device, default_all=True)
    priced = prices_for(prices, specs)  # the kernel rank's rule: unknown or unasked GPUs named, not priced
    try:
        ranking, skipped = rank_deployments(
            config,
            specs,
            params,
            priced.table,
            by=by,
            tps=tps or None,
            op_time=carried.op_time if carried is not None else None,
            constants=carried.constants if carried is not None else None,
        )
    except DeploymentError as exc:
        raise UserError(str(exc)) from None
    shown = ranking[:top] if top else ranking
    note = priced.note()
    if as_json:
        typer.echo(
            json.dumps(
                {"ranked_by": by, "ranking": shown, "options_not_fitting": skipped, "note": note}, indent=2
            )
        )
        return
    header = ["rank", "device", "engine", "tp", "ttft_ms", "tpot_ms", "tok/s/gpu", "mem_gb/gpu"] + (
        ["usd/hour", "usd/Mtok"] if priced.table else []
    )
    body = []
    for r in shown:
        cells = [
            str(r["rank"]),
            r["device"],
            r["engine"],
            str(r["tp"]),
            f"{r['ttft_ms']:.4g}",
            f"{r['tpot_ms']:.4g}",
            f"{r['tokens_per_s_per_gpu']:.4g}",
            f"{r['memory_gb_per_gpu']:.3g}",
        ]
        if priced.table:
            cells += [
                "-" if r["usd_per_hour"] is None else f"{r['usd_per_hour']:.3g}",
                "-" if r["usd_per_mtok"] is None else f"{r['usd_per_mtok']:.3g}",
            ]
        body.append(cells)
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    for row in [header, *body]:
        typer.echo(
            "  ".join(
                c.ljust(w) if i in (1, 2) else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    typer.echo(
        f"ranked by {by}; {len(ranking)} GPU x TP x engine options fit, {skipped} do not "
        "(memory, or TP vs heads)"
    )
    if note:
        typer.echo(f"note: {note}")
