"""What every route of the HTTP API shares: the served model, the limits, the operator's switches, the cap
on requests in flight, and the checks every question passes before any work (``ApiError`` on failure: the
app turns it into ``{"error": {"code", "message", "field"}}``)."""

# No ``from __future__ import annotations``: FastAPI reads the dependencies' annotations (Request).
import asyncio
import hmac
from typing import Any

from fastapi import Request

from components.serving.routes.schema import Kernel


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field


class Service:
    """The state and checks of one app (``create_app`` builds it; routes reach it by ``service``)."""

    def __init__(
        self, model: str, holder: Any, limits: Any, api_key: str | None, allow_modules: bool
    ) -> None:
        self.model, self.holder, self.limits = model, holder, limits
        self.api_key, self.allow_modules = api_key, allow_modules
        self.in_flight = asyncio.Semaphore(limits.max_in_flight)
        self.roofline: Any = None  # the training-free predictor, built on first use

    def authorise(self, request: Request) -> None:
        if self.api_key is None:
            return
        header = request.headers.get("authorization", "")
        given = (
            header[7:].strip()
            if header.lower().startswith("bearer ")
            else request.headers.get("x-api-key", "")
        )
        if not given or not hmac.compare_digest(given.encode(), self.api_key.encode()):
            raise ApiError(401, "unauthorized", "missing or wrong API key (Authorization: Bearer <key>)")

    def predictor_for(self, requested: str | None) -> tuple[Any, str]:
        loaded = self.holder.model
        if requested in (None, "", self.model) or (loaded is not None and requested == loaded.version):
            if loaded is None:
                raise ApiError(503, "not_ready", f"no model loaded yet: {self.holder.error or 'loading'}")
            return loaded.predictor, loaded.version
        if requested == "roofline":
            if self.roofline is None:
                from components.models.roofline import RooflinePredictor

                self.roofline = RooflinePredictor()
            return self.roofline, "roofline"
        raise ApiError(
            400,
            "unknown_model",
            f"model {requested!r}: this server serves {self.model!r} "
            "(or 'roofline'); omit model for the served one",
            "model",
        )

    def check_batch(self, n_kernels: int, specs: list[Any]) -> None:
        limits = self.limits
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

    def check_kernels(self, kernels: list[Kernel], prefix: str) -> list[dict[str, Any]]:
        fields = []
        for i, kernel in enumerate(kernels):
            data = kernel.fields()
            if "module" in data:
                if not self.allow_modules:
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

    @staticmethod
    def devices_of(devices: Any) -> list[Any]:
        from components.serving.query import QueryError
        from components.serving.rank import UnknownDevice, resolve_devices

        try:
            return resolve_devices(devices)
        except QueryError as exc:
            message = str(exc)
            field = message.split(":", 1)[0] if message.startswith("devices") else "devices"
            code = "unknown_device" if isinstance(exc, UnknownDevice) else "invalid_device"
            raise ApiError(422, code, message, field) from None

    async def run(self, work: Any) -> Any:
        limits = self.limits
        if self.in_flight.locked():
            raise ApiError(429, "busy", f"{limits.max_in_flight} requests in flight; retry shortly")
        from components.serving.deadline import Deadline, DeadlineExceeded, bound

        async with self.in_flight:
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

    @staticmethod
    def query_error(exc: Exception, n_devices: int, prefix: str) -> ApiError:
        from components.serving.question_forms import kernel_error

        message, field = kernel_error(str(exc), n_devices, prefix, ".kernel" if prefix == "workload" else "")
        return ApiError(422, "invalid_kernel", message, field)


def service(request: Request) -> Service:
    """The route dependency: this app's ``Service``."""
    return request.app.state.service


def authorised(request: Request) -> None:
    """The ``/v1`` routers' dependency: 401 unless the request carries the API key (when one is set)."""
    service(request).authorise(request)
