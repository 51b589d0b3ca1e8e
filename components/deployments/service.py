"""Deployment questions as the CLI and the API ask them: answer one deployment on GPUs, rank GPUs x TP.

Thin: parse and validate here (one-line :class:`DeploymentError`), compose in ``compose``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from components.deployments.answer import answer_deployments
from components.deployments.compose import STEADY, WORKLOADS, DoesNotFit
from components.deployments.config import Deployment, DeploymentError, ModelShape, model_shape
from components.deployments.ops import OpTimeFn

RANK_KEYS = {"tpot": "tpot_ms", "ttft": "ttft_ms", "cost": "usd_per_mtok"}
DEFAULT_TPS = (1, 2, 4, 8)


def rank_tps(model: ModelShape, tps: Sequence[int] | None = None) -> list[int]:
    """The TP sizes a rank forms for ``model``: those of ``tps`` (default ``DEFAULT_TPS``) that divide its
    heads."""
    return [tp for tp in (tps or DEFAULT_TPS) if model.heads % tp == 0]


# Requests per client a rank simulates per option (measured, warm-up): the bench's 6 + 1, not aiperf's
# 20 + 2 -- the closed loop's steady state repeats, so the mean settles within a few requests per client and
# a whole-catalog rank runs a third of the scheduler steps (``predict --llm`` keeps aiperf's counts)
RANK_PER_CLIENT = (6, 1)
# A deployment question's fields beyond its model and GPU: ``deployment_from`` reads them, ``workload`` picks
# the answer (steady serving or a trace). The batch file and the API's deployment column take these.
DEPLOYMENT_PARAMS: tuple[str, ...] = (
    "isl",
    "osl",
    "concurrency",
    "tp",
    "pp",
    "ep",
    "dp",
    "dtype",
    "kv_dtype",
    "mode",
    "workload",
    "framework",
)


# Checkpoint dtypes a deployment is answered in when no dtype is asked; any other (bf16, fp16, fp32,
# compressed-tensors) is answered with bf16 weights, as an engine loads a 16-bit checkpoint. An mxfp4
# checkpoint (gpt-oss: 4-bit float experts, a scale per 32 weights) is answered as nvfp4, the 4-bit float
# form the engines' runs of it record (AIConfigurator's gpt-oss rows: gemm and moe quant nvfp4); on a GPU
# without an fp4 pipe its experts run weight-only from the measured MXFP4 kernels (``compose.gemm_dtype``).
# Served as bf16 it needed 4 H100s for weights that ship in 61 GB.
AS_SHIPPED = {
    "fp8": "fp8",
    "fp8_block": "fp8_block",
    "nvfp4": "nvfp4",
    "mixed (nvfp4 + fp8)": "nvfp4",
    "mxfp4": "nvfp4",
}


def default_weight_dtype(model: ModelShape) -> tuple[str, str | None]:
    """The weights' dtype when the question names none, and the note that says why: the checkpoint's own
    quantisation (an ``-FP8`` or ``-NVFP4`` checkpoint is served as it ships), else bf16."""
    shipped = model.checkpoint_dtype
    if shipped in AS_SHIPPED:
        asked = AS_SHIPPED[shipped]
        return asked, f"weights {asked}: the checkpoint ships {shipped} (--dtype to ask otherwise)"
    if shipped not in ("-", "bf16", "fp16", "fp32"):
        return "bf16", f"the checkpoint ships {shipped} weights, not modelled as such: bf16 asked (--dtype)"
    return "bf16", None


def deployment_from(model: ModelShape, spec: Any, params: dict[str, Any]) -> Deployment:
    """A :class:`Deployment` from plain parameters (isl, osl, concurrency, tp, pp, ep, dtype, kv_dtype,
    mode, framework)."""
    unknown = sorted(set(params) - set(DEPLOYMENT_PARAMS))
    if unknown:
        raise DeploymentError(
            f"deployment field {unknown[0]}: unknown; known: {', '.join(DEPLOYMENT_PARAMS)}"
        )
    for name in ("isl", "osl"):
        if params.get(name) is None:
            raise DeploymentError(f"{name}: required (input/output tokens per request)")
    ints = {}
    for name in ("isl", "osl", "concurrency", "tp", "pp", "ep", "dp"):
        value = params.get(name, 1)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        ints[name] = value
    dtype, why = (str(params["dtype"]), None) if params.get("dtype") else default_weight_dtype(model)
    return Deployment(
        model=model,
        gpu=spec,
        notes=(why,) if why else (),
        weight_dtype=dtype,
        kv_dtype=params.get("kv_dtype"),
        mode=str(params.get("mode") or "agg"),
        framework=str(params.get("framework") or "vllm"),
        **ints,
    )


def _workload(params: dict[str, Any]) -> str:
    workload = str(params.get("workload") or STEADY)
    if workload not in WORKLOADS:
        raise DeploymentError(f"workload {workload!r}: choose {' or '.join(WORKLOADS)}")
    return workload


def predict_deployment(
    config: Any,
    specs: Sequence[Any],
    params: dict[str, Any],
    op_time: OpTimeFn | None = None,
    allow_paths: bool = True,
    constants: Path | None = None,
) -> list[dict[str, Any]]:
    """One answer per GPU; a GPU the deployment does not fit on answers with ``refused`` (the reason).
    ``constants``: the engines' constants file a model carries (else the package's)."""
    model = model_shape(config, allow_paths=allow_paths)
    workload = _workload(params)
    deployments = [deployment_from(model, spec, params) for spec in specs]
    out = []
    answers = answer_deployments(deployments, op_time, workload=workload, constants=constants)
    for d, a in zip(deployments, answers, strict=True):
        if isinstance(a, DoesNotFit):
            out.append({"deployment": {"model": model.name, "gpu": d.gpu.id}, "refused": str(a)})
        elif isinstance(a, DeploymentError):
            raise a
        else:
            out.append(a.to_json())
    return out


def usd_per_mtok(usd_per_hour: float | None, tokens_per_s_per_gpu: float) -> float | None:
    """Cost per million output tokens of one GPU at its price."""
    if usd_per_hour is None or not tokens_per_s_per_gpu:
        return None
    return usd_per_hour / (tokens_per_s_per_gpu * 3600.0) * 1e6


def rank_frameworks(value: Any) -> list[str]:
    """The serving engines a rank compares: one name, a comma list, or ``all`` (every engine)."""
    from components.deployments.engines.registry import ENGINES, engine_name

    text = str(value or "").strip().lower()
    if text == "all":
        return list(ENGINES)
    names = [engine_name(part) for part in text.split(",")] if text else [engine_name(None)]
    return list(dict.fromkeys(names))


def rank_deployments(
    config: Any,
    specs: Sequence[Any],
    params: dict[str, Any],
    prices: dict[str, float],
    by: str = "tpot",
    tps: Sequence[int] | None = None,
    op_time: OpTimeFn | None = None,
    allow_paths: bool = True,
    constants: Path | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """Every GPU x TP (x serving engine: ``params["framework"]`` one, a comma list or ``all``) option that
    fits, best first by TPOT, TTFT or cost per million output tokens.

    Returns (ranking, options that did not fit or could not be formed). Cost needs a price for the GPU:
    options without one rank after those with one. ``op_time``/``constants``: a model's (else the state
    folder's and the package's).
    """
    if by not in RANK_KEYS:
        raise DeploymentError(f"--by {by!r}: choose {', '.join(RANK_KEYS)}")
    if by == "cost" and not prices:
        raise DeploymentError("--by cost needs prices (--price GPU=USD_PER_HOUR)")
    model = model_shape(config, allow_paths=allow_paths)
    workload = _workload(params)
    price_of = {str(k).lower(): float(v) for k, v in prices.items()}
    options = rank_tps(model, tps)
    frameworks = rank_frameworks(params.get("framework"))
    rows, skipped = [], 0
    formed: list[tuple[Deployment, float | None]] = []
    for spec in specs:
        price = next(
            (
                price_of[n]
                for n in (spec.id.lower(), spec.name.lower(), *(a.lower() for a in spec.aliases))
                if n in price_of
            ),
            None,
        )
        for tp in options:
            for framework in frameworks:
                try:
                    d = deployment_from(model, spec, {**params, "tp": tp, "framework": framework})
                except DeploymentError:
                    skipped += 1
                    continue
                formed.append((d, price))
    # every option composed at once: one op-engine call per kind of op and GPU (answer.answer_deployments);
    # the rows show no per-op breakdown, so none is composed
    answers = answer_deployments(
        [d for d, _ in formed],
        op_time,
        workload=workload,
        constants=constants,
        per_client=RANK_PER_CLIENT,
        detail=False,
    )
    for (d, price), a in zip(formed, answers, strict=True):
        if isinstance(a, DeploymentError):
            skipped += 1
            continue
        rows.append(
            {
                "device": d.gpu.id,
                "engine": d.framework,
                "tp": d.tp,
                "gpus": d.gpus,
                "ttft_ms": a.ttft_ms,
                "tpot_ms": a.tpot_ms,
                "e2e_ms": a.e2e_ms,
                "tokens_per_s_per_gpu": a.tokens_per_s,
                "memory_gb_per_gpu": a.memory["total_gb"],
                "usd_per_hour": None if price is None else price * d.gpus,
                "usd_per_mtok": usd_per_mtok(price, a.tokens_per_s),
            }
        )
    key = RANK_KEYS[by]
    rows.sort(key=lambda r: (r[key] is None, math.inf if r[key] is None else r[key]))
    for i, row in enumerate(rows, 1):
        row["rank"] = i
    return rows, skipped


BATCH_FIELDS = ("llm", "device", *DEPLOYMENT_PARAMS)


def read_deployment_batch(path: Any) -> list[tuple[str, dict[str, Any]]]:
    """Rows of a CSV or JSONL file of deployments: (``file:line``, fields); ``llm`` and ``device`` per row."""
    import json
    from pathlib import Path

    import pandas as pd

    path = Path(path)
    if path.suffix.lower() in (".jsonl", ".json"):
        rows = []
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append((f"{path.name}:{number}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise DeploymentError(f"{path.name}:{number}: not JSON ({exc.msg})") from None
    else:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        rows = [
            (f"{path.name}:{i + 2}", {k: v for k, v in r.items() if v != ""})
            for i, r in enumerate(frame.to_dict("records"))
        ]
    out = []
    for origin, row in rows:
        if not isinstance(row, dict):
            raise DeploymentError(f"{origin}: expected an object of deployment fields")
        unknown = sorted(set(row) - set(BATCH_FIELDS))
        if unknown:
            raise DeploymentError(f"{origin}: unknown field {unknown[0]}; fields: {', '.join(BATCH_FIELDS)}")
        for name in ("llm", "device", "isl", "osl"):
            if name not in row:
                raise DeploymentError(f"{origin}: {name} is missing")
        fields = dict(row)
        for name in ("isl", "osl", "concurrency", "tp", "pp", "ep", "dp"):
            if name in fields:
                try:
                    fields[name] = int(float(fields[name]))
                except (TypeError, ValueError):
                    raise DeploymentError(f"{origin}: {name} {fields[name]!r} is not an integer") from None
        out.append((origin, fields))
    return out


def predict_batch(
    rows: list[tuple[str, dict[str, Any]]],
    resolve: Any,
    op_time: OpTimeFn | None = None,
    constants: Path | None = None,
) -> list[dict[str, Any]]:
    """Answer every row of :func:`read_deployment_batch`; an error names the row (``file:line``)."""
    answers = []
    for origin, row in rows:
        params = {k: v for k, v in row.items() if k not in ("llm", "device")}
        try:
            spec = resolve(str(row["device"]))
            result = predict_deployment(str(row["llm"]), [spec], params, op_time, constants=constants)[0]
        except (DeploymentError, LookupError, ValueError) as exc:
            raise DeploymentError(f"{origin}: {exc}") from None
        answers.append({"row": origin, **result})
    return answers
