"""The HTTP prediction service (FastAPI): versioned ``/v1`` API, safe to expose.

    POST /v1/predict {"kernels": [K, ...], "devices": ["H100", {full spec}, ...]}
    POST /v1/rank    {"kernels": [K, ...] | "workload": [{"kernel": K, "count": n}], "devices": [...] | "all",
                      "prices": {"H100": 2.5}}
    POST /v1/predict {"deployment": D, "devices": [...]}         an LLM deployment: TTFT, TPOT, memory
    POST /v1/rank    {"deployment": D, "devices": "all", "prices": {...}}   GPU x TP options that fit
    GET  /v1/devices, /healthz, /readyz (503 until a model is loaded), /openapi.json, /docs

K = {"dtype": ..., and one kernel form: "op" + "shape" | "source" + "language" + "launch" | "module"}.
D = {"model": bundled name | HF config.json object | its JSON text, "isl", "osl", "concurrency", "tp", "pp",
     "ep", "dtype", "kv_dtype", "mode": agg|disagg, "workload": steady|batch; rank adds "tps", "by"}.
Contract: the bodies in ``components/serving/routes/schema.py`` (``/openapi.json``; the VS Code extension in
``extensions/vscode`` is built against it); the routes: ``components/serving/routes/``.

Safety: the request body is capped (413) before it is read in full; kernels, devices and
kernels x devices are capped (422); each request has a time limit (504) and the number in flight
is capped (429); an optional API key (401); module questions (which trace user code in a sandbox)
are refused unless the operator allows them; every error is ``{"error": {"code", "message",
"field"}}`` -- never a stack trace -- and the server keeps serving. The champion is re-resolved
every ``poll_s`` seconds (a cheap registry query) and a new version swapped in without a restart.
"""

# No ``from __future__ import annotations``: FastAPI reads the exception handlers' annotations, and the
# names they use (Request, the responses) are imported inside create_app, not at module level.
import asyncio
import logging
import threading
from dataclasses import dataclass
from typing import Any

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
    """The app: the routers of ``components.serving.routes`` on one ``Service``, the error handlers that
    turn every failure into an error body, the self-hosted /docs, and the body-size cap outermost."""
    from fastapi import FastAPI

    from components.serving.models import ModelHolder
    from components.serving.routes import devices, health, predict, rank
    from components.serving.routes.schema import ErrorResponse
    from components.serving.routes.service import Service

    limits = limits or ServerLimits()
    holder = ModelHolder(model, tracking_uri)
    stop = threading.Event()

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
    app.state.service = Service(model, holder, limits, api_key, allow_modules)
    _self_hosted_docs(app)
    _error_handlers(app)
    for module in (health, devices, predict, rank):
        app.include_router(module.router)
    return _wrap(app, limits)


def _error_handlers(app: Any) -> None:
    """Every failure as ``{"error": {"code", "message", "field"}}``, never a stack trace."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from components.serving.routes.service import ApiError

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
