"""The HTTP prediction service (FastAPI): versioned ``/v1`` API, safe to expose.

    POST /v1/predict {"kernels": [K, ...], "devices": ["H100", {full spec}, ...]}
    POST /v1/rank    {"kernels": [K, ...] | "workload": [{"kernel": K, "count": n}], "devices": [...] | "all",
                      "prices": {"H100": 2.5}}
    POST /v1/predict {"deployment": D, "devices": [...]}         an LLM deployment: TTFT, TPOT, memory
    POST /v1/rank    {"deployment": D, "devices": "all", "prices": {...}}   GPU x TP options that fit
    GET  /v1/devices, /healthz, /readyz (503 until a model is loaded), /openapi.json, /docs

K = {"dtype": ..., and one kernel form: "op" + "shape" | "source" + "language" + "launch" | "module"}.
D = {"model": bundled name | HF config.json object | its JSON text, "isl", "osl", "concurrency", "tp", "pp",
     "ep", "dtype", "kv_dtype", "mode": agg|disagg, "workload": steady|batch, "framework": vllm|sglang|trtllm;
     rank adds "tps", "by"}.
Contract: /tmp/team/interfaces.md (the VS Code extension is built against it).

Safety: the request body is capped (413) before it is read in full; kernels, devices and
kernels x devices are capped (422); each request has a time limit (504) and the number in flight
is capped (429); an optional API key (401); module questions (which trace user code in a sandbox)
are refused unless the operator allows them; every error is ``{"error": {"code", "message",
"field"}}`` -- never a stack trace -- and the server keeps serving. The champion is re-resolved
every ``poll_s`` seconds (a cheap registry query) and a new version swapped in without a restart.
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations, and the
# names they use (Request, the body models) are imported inside create_app, not at module level.
import asyncio
import hmac
import logging
import threading
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from components.serving.query import DTYPES
from components.serving.question_forms import MAX_MODULE_CHARS, MAX_SOURCE_CHARS

log = logging.getLogger("kernelcast.serve")


@dataclass(frozen=True)
class ServerLimits:
    max_body_bytes: int = 1 << 20  # 1 MiB: a few kernel sources and device specs
    max_kernels: int = 256
    max_devices: int = 128  # the whole catalog (96 GPUs) fits: rank "all"
    max_questions: int = 4096  # kernels x distinct devices
    request_timeout_s: float = 20.0  # source compilation included
    max_in_flight: int = 32
    poll_s: float = 5.0


# ------------------------------------------------------------------------------------------ schema


def Whole(low: int, high: int, what: str = "value") -> Any:
    """An int in [low, high] whose error names the limit in the words of the CLI and batch files
    (``query.whole_number``): pydantic's own for 1e30 is "Unable to parse input string as an integer"."""
    from components.serving.query import QueryError, whole_number

    def check(value: Any) -> int:
        try:
            return whole_number(value, "@", low, high, what)
        except QueryError as exc:
            raise ValueError(str(exc).removeprefix("@: ")) from None

    return Annotated[int, BeforeValidator(check), Field(ge=low, le=high)]


# A shape's sizes are checked by the question parser (query.MAX_DIM, the CLI's limit): any number here.
Dim = Annotated[int | float, Field(description="a size (a whole number from 1 to 2**36)")]


class Launch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    grid: list[Whole(1, 2**31 - 1)] = Field(min_length=1, max_length=3, description="[gx, gy, gz]")
    block: list[Whole(1, 1024)] = Field(min_length=1, max_length=3, description="[bx, by, bz]")
    kernel: str | None = Field(
        default=None,
        max_length=256,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="the __global__ function to analyse (default: the only one)",
    )
    defines: dict[Annotated[str, Field(max_length=64)], str | int | float] | None = Field(
        default=None, max_length=64, description='-D macros, e.g. {"N": "1024"}'
    )
    shared_bytes: Whole(0, 1 << 20) | None = Field(default=None, description="dynamic shared memory")


class Kernel(BaseModel):
    """One kernel: a dtype and exactly one form (op + shape | source + language + launch | module)."""

    model_config = ConfigDict(extra="forbid")

    dtype: str | None = Field(default=None, max_length=32, description=" | ".join(DTYPES))
    op: str | None = Field(
        default=None, max_length=32, description="gemm, linear, bmm, add, gelu, softmax, ..."
    )
    shape: (
        Annotated[dict[Annotated[str, Field(max_length=16)], Dim], Field(max_length=8)]
        | Annotated[str, Field(max_length=256)]
        | None
    ) = Field(
        default=None, description='sizes, e.g. {"M": 4096, "N": 4096, "K": 4096} or "M=4096,N=4096,K=4096"'
    )
    source: str | None = Field(default=None, max_length=MAX_SOURCE_CHARS, description="CUDA/HIP kernel text")
    language: Literal["cuda", "hip"] | None = None
    launch: Launch | None = None
    module: str | None = Field(
        default=None,
        max_length=MAX_MODULE_CHARS,
        description="text of a KernelBench-style PyTorch module (when the server allows it)",
    )

    def fields(self) -> dict[str, Any]:
        data = self.model_dump(exclude_none=True)
        if "launch" in data:
            data["launch"] = self.launch.model_dump(exclude_none=True) if self.launch else None
        return data


Device = str | dict[str, Any]
# Deployment answers come from the composition (components.deployments), not from the served model.
DEPLOYMENT_VERSION = "deployment-composition"


class DeploymentForm(BaseModel):
    """An LLM deployment question (components.deployments): a model and a serving workload."""

    model_config = ConfigDict(extra="forbid")

    model: Annotated[str, Field(max_length=64 * 1024)] | dict[str, Any] = Field(
        description="a bundled model name, an HF config.json object, or its JSON text (no server paths)"
    )
    isl: Whole(1, 1 << 20)
    osl: Whole(1, 1 << 20)
    concurrency: Whole(1, 1 << 16) = 1
    tp: Whole(1, 1024) = 1
    pp: Whole(1, 1024) = 1
    ep: Whole(1, 1024) = 1
    dp: Whole(1, 1024) = Field(default=1, description="attention data-parallel ranks (MoE)")
    dtype: str = Field(default="bf16", max_length=16)
    kv_dtype: str | None = Field(default=None, max_length=16)
    mode: Literal["agg", "disagg"] = "agg"
    framework: Literal["vllm", "sglang", "trtllm"] = Field(default="vllm", description="the serving engine")
    prefill_gpus: Whole(1, 1 << 16) | None = Field(
        default=None, description="disagg: GPUs of the prefill workers (default: one worker, tp x pp GPUs)"
    )
    decode_gpus: Whole(1, 1 << 16) | None = Field(
        default=None, description="disagg: GPUs of the decode workers (default: one worker, tp x pp GPUs)"
    )
    workload: Literal["steady", "batch"] = "steady"
    tps: list[Whole(1, 1024)] | None = Field(default=None, max_length=16, description="rank: TP options")
    by: Literal["tpot", "ttft", "cost"] = "tpot"

    def params(self) -> dict[str, Any]:
        return self.model_dump(exclude={"model", "tps", "by"}, exclude_none=True)


class PredictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kernels: list[Kernel] | None = Field(default=None, min_length=1)
    deployment: DeploymentForm | None = None
    devices: list[Annotated[str, Field(max_length=128)] | dict[str, Any]] | Literal["all"] = Field(
        min_length=1,
        description='catalog names/aliases or full device specs, or "all" (the catalog), as in /v1/rank',
    )
    model: str | None = Field(
        default=None,
        max_length=256,
        description="omit for the served model; 'roofline' for the training-free baseline",
    )


class WorkloadItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kernel: Kernel
    count: Whole(1, 10**12) = 1


class RankRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kernels: list[Kernel] | None = Field(default=None, min_length=1)
    workload: list[WorkloadItem] | None = Field(default=None, min_length=1)
    deployment: DeploymentForm | None = None
    devices: list[Annotated[str, Field(max_length=128)] | dict[str, Any]] | Literal["all"] = "all"
    prices: dict[Annotated[str, Field(max_length=128)], Annotated[float, Field(gt=0, lt=1e6)]] | None = None
    model: str | None = Field(default=None, max_length=256)


class BreakdownItem(BaseModel):
    model_config = ConfigDict(extra="allow")

    op: str
    count: int
    duration_us: float | None = None
    bound: str | None = None


class Answer(BaseModel):
    model_config = ConfigDict(extra="allow")

    kernel: int
    device: str
    device_name: str
    kind: str
    duration_us: float | None = None
    duration_us_lo: float | None = None
    duration_us_hi: float | None = None
    achieved_gbps: float | None = None
    gflops: float | None = None
    l1_hit_rate: float | None = None
    l2_hit_rate: float | None = None
    arith_intensity: float | None = None
    roofline_class: str | None = None
    bound_pipe: str | None = None
    roofline_us: float | None = None
    headroom: float | None = None
    ood: bool | None = None
    unseen: str | None = Field(
        default=None,
        description="what the answer had no measurement of: the shape, the GPU, or the dtype too",
    )
    note: str | None = None
    model_version: str
    breakdown: list[BreakdownItem] | None = Field(
        default=None, description="module/source answers: the top ops (or kernels) by predicted time"
    )


class PredictResponse(BaseModel):
    model_version: str
    predictions: list[Answer] = []
    deployments: list[dict[str, Any]] | None = None  # the deployment form's answers (one per device)


class RankEntry(BaseModel):
    model_config = ConfigDict(extra="allow")

    device: str
    device_name: str
    total_us: float | None
    total_us_lo: float | None
    total_us_hi: float | None
    usd_per_hour: float | None = None
    usd_per_run: float | None = None
    rank: int


class RankResponse(BaseModel):
    model_version: str
    ranked_by: Literal["time", "cost", "tpot", "ttft"]
    ranking: list[RankEntry] = []
    deployment_ranking: list[dict[str, Any]] | None = None  # the deployment form: GPU x TP options that fit
    options_not_fitting: int | None = None
    note: str | None = Field(
        default=None, description="e.g. prices given for GPUs not being ranked (ignored)"
    )


class ErrorBody(BaseModel):
    code: str
    message: str
    field: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


# ------------------------------------------------------------------------------------------ app


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field


class BodyLimit:
    """ASGI middleware: 413 once a request body passes ``limit`` bytes (declared or streamed)."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _send_error(send, 413, "body_too_large", f"request body over {self.limit:,} bytes")
            return
        seen = 0

        async def limited() -> dict:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge()
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await _send_error(send, 413, "body_too_large", f"request body over {self.limit:,} bytes")


class _TooLarge(Exception):
    pass


async def _send_error(send: Any, status: int, code: str, message: str) -> None:
    import json

    body = json.dumps({"error": {"code": code, "message": message, "field": None}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _first_field(errors: list[dict[str, Any]]) -> tuple[str | None, str]:
    """('kernels[0].shape.K', 'kernels[0].shape.K: Input should be ...; ...') from pydantic errors."""

    def path(loc: tuple) -> str:
        text = ""
        for part in loc:
            if part in ("body",):
                continue
            text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
        return text or "body"

    described = []
    for error in errors[:5]:
        loc = tuple(
            p
            for p in error.get("loc", ())
            if not (isinstance(p, str) and ("[" in p or p in ("str", "dict[str,any]", "list[...]")))
        )
        # a Whole() check's own words, without pydantic's "Value error, " in front
        described.append(f"{path(loc)}: {str(error.get('msg', 'invalid')).removeprefix('Value error, ')}")
    first = errors[0] if errors else {}
    loc = tuple(p for p in first.get("loc", ()) if not (isinstance(p, str) and "[" in p))
    return (path(loc) if errors else None), "; ".join(described) + (" ..." if len(errors) > 5 else "")


def create_app(
    model: str = "models:/kernelcast@champion",
    *,
    api_key: str | None = None,
    allow_modules: bool = False,
    limits: ServerLimits | None = None,
    tracking_uri: str | None = None,
    poll: bool = True,
) -> Any:
    from fastapi import Depends, FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from components.serving.models import ModelHolder
    from components.serving.query import QueryError

    limits = limits or ServerLimits()
    holder = ModelHolder(model, tracking_uri)
    stop = threading.Event()
    in_flight = asyncio.Semaphore(limits.max_in_flight)
    roofline_holder: dict[str, Any] = {}

    async def lifespan(app: Any) -> Any:
        await asyncio.to_thread(holder.refresh)
        if holder.model is None:
            log.warning("no model loaded yet (%s); /readyz answers 503 until one is", holder.error)
        thread = threading.Thread(
            target=holder.poll, args=(limits.poll_s, stop), daemon=True, name="kernelcast-model-poll"
        )
        if poll:
            thread.start()
        yield
        stop.set()

    app = FastAPI(
        title="kernelcast",
        version="1",
        description="Predict GPU kernel runtime, bandwidth, GFLOP/s, cache hit rates, roofline class and "
        "bound pipe from op + shapes, CUDA/HIP source, or a PyTorch module, on any GPU spec.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        responses={
            400: {"model": ErrorResponse},
            401: {"model": ErrorResponse},
            413: {"model": ErrorResponse},
            422: {"model": ErrorResponse},
            429: {"model": ErrorResponse},
            503: {"model": ErrorResponse},
            504: {"model": ErrorResponse},
        },
    )
    app.state.holder = holder
    app.state.limits = limits
    _self_hosted_docs(app)

    def error(status: int, code: str, message: str, field: str | None = None) -> JSONResponse:
        return JSONResponse({"error": {"code": code, "message": message, "field": field}}, status_code=status)

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error(exc.status, exc.code, exc.message, exc.field)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            detail = next(e for e in errors if e.get("type") == "json_invalid")
            return error(
                400,
                "malformed_json",
                f"request body is not valid JSON: {detail.get('ctx', {}).get('error', detail.get('msg'))}",
            )
        field, message = _first_field(errors)
        return error(422, "invalid_request", message, field)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error answering a request")
        return error(500, "internal", "internal error answering this request; the server log has the details")

    def authorised(request: Request) -> None:
        if api_key is None:
            return
        header = request.headers.get("authorization", "")
        given = (
            header[7:].strip()
            if header.lower().startswith("bearer ")
            else request.headers.get("x-api-key", "")
        )
        if not given or not hmac.compare_digest(given.encode(), api_key.encode()):
            raise ApiError(401, "unauthorized", "missing or wrong API key (Authorization: Bearer <key>)")

    def predictor_for(requested: str | None) -> tuple[Any, str]:
        loaded = holder.model
        if requested in (None, "", model) or (loaded is not None and requested == loaded.version):
            if loaded is None:
                raise ApiError(503, "not_ready", f"no model loaded yet: {holder.error or 'loading'}")
            return loaded.predictor, loaded.version
        if requested == "roofline":
            if "roofline" not in roofline_holder:
                from components.models.roofline import RooflinePredictor

                roofline_holder["roofline"] = RooflinePredictor()
            return roofline_holder["roofline"], "roofline"
        raise ApiError(
            400,
            "unknown_model",
            f"model {requested!r}: this server serves {model!r} "
            "(or 'roofline'); omit model for the served one",
            "model",
        )

    def check_batch(n_kernels: int, specs: list[Any]) -> None:
        if n_kernels > limits.max_kernels:
            raise ApiError(
                422,
                "too_many_kernels",
                f"{n_kernels} kernels; at most {limits.max_kernels} per request",
                "kernels",
            )
        if len(specs) > limits.max_devices:
            raise ApiError(
                422,
                "too_many_devices",
                f"{len(specs)} distinct devices; at most {limits.max_devices}",
                "devices",
            )
        if n_kernels * len(specs) > limits.max_questions:
            raise ApiError(
                422,
                "batch_too_large",
                f"{n_kernels} kernels x {len(specs)} devices = "
                f"{n_kernels * len(specs)} predictions; at most {limits.max_questions} per request",
                "kernels",
            )

    def check_kernels(kernels: list[Kernel], prefix: str) -> list[dict[str, Any]]:
        fields = []
        for i, kernel in enumerate(kernels):
            data = kernel.fields()
            if "module" in data:
                if not allow_modules:
                    raise ApiError(
                        422,
                        "modules_disabled",
                        "module questions are disabled on this server (they "
                        "trace user code; the operator enables them with --allow-modules)",
                        f"{prefix}[{i}].module",
                    )
                if "\n" not in data["module"] and data["module"].strip().endswith(".py"):
                    raise ApiError(
                        422,
                        "invalid_request",
                        "module: send the module's text, not a path (the "
                        "server never reads its own files for a request)",
                        f"{prefix}[{i}].module",
                    )
            fields.append(data)
        return fields

    def devices_of(devices: Any) -> list[Any]:
        from components.serving.rank import UnknownDevice, resolve_devices

        try:
            return resolve_devices(devices)
        except QueryError as exc:
            message = str(exc)
            field = message.split(":", 1)[0] if message.startswith("devices") else "devices"
            code = "unknown_device" if isinstance(exc, UnknownDevice) else "invalid_device"
            raise ApiError(422, code, message, field) from None

    async def run(work: Any) -> Any:
        if in_flight.locked():
            raise ApiError(429, "busy", f"{limits.max_in_flight} requests in flight; retry shortly")
        from components.serving.deadline import Deadline, DeadlineExceeded, bound

        async with in_flight:
            # The deadline travels into the worker thread (to_thread copies the context): on timeout it is
            # cancelled, and the answering loops stop at their next step instead of working on for nobody.
            deadline = Deadline.after(limits.request_timeout_s)
            try:
                with bound(deadline):
                    return await asyncio.wait_for(asyncio.to_thread(work), timeout=limits.request_timeout_s)
            except (TimeoutError, DeadlineExceeded):
                deadline.cancel()
                raise ApiError(
                    504,
                    "timeout",
                    f"request took over {limits.request_timeout_s:g} s; send fewer kernels or devices",
                ) from None

    def query_error(exc: QueryError, n_devices: int, prefix: str) -> ApiError:
        from components.serving.question_forms import kernel_error

        message, field = kernel_error(str(exc), n_devices, prefix, ".kernel" if prefix == "workload" else "")
        return ApiError(422, "invalid_kernel", message, field)

    async def deployment_answer(form: DeploymentForm, devices: Any) -> dict[str, Any]:
        from components.deployments.config import DeploymentError
        from components.serving.disagg import predict_split_deployment

        specs = devices_of(devices)
        check_batch(1, specs)

        def work() -> list[dict[str, Any]]:
            try:
                return predict_split_deployment(
                    form.model, specs, form.params(), allow_paths=False, where="deployment."
                )
            except DeploymentError as exc:
                raise ApiError(422, "invalid_deployment", str(exc), "deployment") from None

        return {"model_version": DEPLOYMENT_VERSION, "predictions": [], "deployments": await run(work)}

    async def deployment_rank(form: DeploymentForm, devices: Any, prices: dict[str, float]) -> dict[str, Any]:
        from components.deployments.config import DeploymentError
        from components.deployments.service import rank_deployments
        from components.serving.rank import prices_for

        if form.prefill_gpus is not None or form.decode_gpus is not None:
            message = "deployment.prefill_gpus/decode_gpus: a split is asked of /v1/predict (rank tries TPs)"
            raise ApiError(422, "invalid_deployment", message, "deployment")
        specs = devices_of(devices)
        check_batch(1, specs)
        priced = prices_for(
            prices, specs
        )  # the kernel rank's rule: unknown or unasked GPUs named in the note

        def work() -> tuple[list[dict[str, Any]], int]:
            try:
                return rank_deployments(
                    form.model,
                    specs,
                    form.params(),
                    priced.table,
                    by=form.by,
                    tps=form.tps,
                    allow_paths=False,
                )
            except DeploymentError as exc:
                raise ApiError(422, "invalid_deployment", str(exc), "deployment") from None

        ranking, skipped = await run(work)
        return {
            "model_version": DEPLOYMENT_VERSION,
            "ranked_by": "cost" if form.by == "cost" else form.by,
            "ranking": [],
            "deployment_ranking": ranking,
            "options_not_fitting": skipped,
            "note": priced.note(),
        }

    @app.get("/healthz", tags=["service"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["service"], responses={503: {"model": ErrorResponse}})
    def readyz() -> Any:
        loaded = holder.model
        if loaded is None:
            return JSONResponse(
                {
                    "status": "not_ready",
                    "model_version": None,
                    "error": {"code": "not_ready", "message": holder.error or "loading", "field": None},
                },
                status_code=503,
            )
        return {"status": "ready", "model_version": loaded.version}

    @app.get("/v1/devices", tags=["v1"], dependencies=[Depends(authorised)])
    def devices() -> dict[str, Any]:
        from components.devices import load_catalog

        return {
            "devices": [
                {
                    "id": s.id,
                    "name": s.name,
                    "vendor": s.vendor,
                    "arch": s.architecture,
                    "compute_capability": s.compute_capability,
                    "sms": s.sms,
                    "memory_gb": s.memory_gb,
                    "dram_gbps": s.dram_gbps,
                    "l2_mb": s.l2_mb,
                    "aliases": list(s.aliases),
                    "peak_tflops": s.peak_tflops.model_dump(exclude_none=True),
                }
                for s in load_catalog().all()
            ]
        }

    @app.post("/v1/predict", tags=["v1"], response_model=PredictResponse, dependencies=[Depends(authorised)])
    async def predict(body: PredictRequest) -> Any:
        from components.serving.question_forms import parse_questions
        from components.serving.questions import answer_questions

        if (body.kernels is None) == (body.deployment is None):
            raise ApiError(422, "invalid_request", "give exactly one of kernels or deployment", "kernels")
        if body.deployment is not None:
            return await deployment_answer(body.deployment, body.devices)
        predictor, version = predictor_for(body.model)
        kernels = check_kernels(body.kernels, "kernels")
        specs = devices_of(body.devices)
        check_batch(len(kernels), specs)

        def work() -> list[dict[str, Any]]:
            rows = [{**kernel, "device": spec} for kernel in kernels for spec in specs]
            try:
                answers = answer_questions(
                    predictor, parse_questions(rows), model_version=version, allow_modules=allow_modules
                )
            except QueryError as exc:
                raise query_error(exc, len(specs), "kernels") from None
            for answer in answers:
                answer["kernel"] = answer.pop("question") // len(specs)
            return answers

        return {"model_version": version, "predictions": await run(work)}

    @app.post("/v1/rank", tags=["v1"], response_model=RankResponse, dependencies=[Depends(authorised)])
    async def rank(body: RankRequest) -> Any:
        from components.serving.rank import rank as rank_devices

        if body.deployment is not None:
            if body.kernels is not None or body.workload is not None:
                raise ApiError(
                    422,
                    "invalid_request",
                    "give exactly one of kernels, workload or deployment",
                    "deployment",
                )
            return await deployment_rank(body.deployment, body.devices, body.prices or {})
        if (body.kernels is None) == (body.workload is None):
            raise ApiError(422, "invalid_request", "give exactly one of kernels or workload", "kernels")
        prefix = "kernels" if body.kernels is not None else "workload"
        items = body.kernels or [w.kernel for w in body.workload or []]
        counts = [1] * len(items) if body.kernels is not None else [w.count for w in body.workload or []]
        predictor, version = predictor_for(body.model)
        kernels = check_kernels(items, prefix)
        specs = devices_of(body.devices)
        check_batch(len(kernels), specs)

        def work() -> tuple[list[dict[str, Any]], str]:
            try:
                return rank_devices(
                    predictor,
                    kernels,
                    counts,
                    specs,
                    body.prices,
                    model_version=version,
                    allow_modules=allow_modules,
                )
            except QueryError as exc:
                if str(exc).startswith("prices"):
                    raise ApiError(
                        422, "invalid_price", str(exc), str(exc).split(" ", 1)[0].rstrip(":")
                    ) from None
                raise query_error(exc, len(specs), prefix) from None

        ranking, ranked_by = await run(work)
        from components.serving.rank import rank_note

        note = await asyncio.to_thread(rank_note, kernels, specs, body.prices)
        return {"model_version": version, "ranked_by": ranked_by, "ranking": ranking, "note": note}

    return _wrap(app, limits)


DOCS_ASSETS = "/docs/assets"


def _self_hosted_docs(app: Any) -> None:
    """/docs (Swagger UI) with its script, style and icon served by this app from the pinned
    ``swagger-ui-bundle`` package. Why: FastAPI's default page loads them from a CDN, which leaves
    /docs blank on a machine without internet (clusters, air-gapped labs)."""
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.staticfiles import StaticFiles
    from swagger_ui_bundle import swagger_ui_path

    app.mount(DOCS_ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> Any:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url,
            title=f"{app.title} API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
        )


def _wrap(app: Any, limits: ServerLimits) -> Any:
    """The FastAPI app with the body-size middleware outermost (so 413 comes before parsing)."""
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)
    return app


def run_server(config_json: str) -> None:
    """Serve with uvicorn in this process (``kernelcast serve`` runs it as a child process group).

    ``config_json``: {"host", "port", "model", "api_key_env", "allow_modules", "limits": {...}}. The
    API key itself travels in the environment variable it names, never on a command line.
    """
    import json
    import os

    import uvicorn

    config = json.loads(config_json)
    api_key_env = config.get("api_key_env")
    api_key = os.environ.get(api_key_env, "") if api_key_env else None
    if api_key_env and not api_key:
        raise SystemExit(f"error: --api-key-env {api_key_env}: the variable is unset or empty")
    app = create_app(
        config.get("model") or "models:/kernelcast@champion",
        api_key=api_key,
        allow_modules=bool(config.get("allow_modules")),
        limits=ServerLimits(**config.get("limits", {})),
    )
    uvicorn.run(
        app,
        host=config.get("host", "127.0.0.1"),
        port=int(config.get("port", 8000)),
        log_level=config.get("log_level", "info"),
        timeout_graceful_shutdown=5,
    )
