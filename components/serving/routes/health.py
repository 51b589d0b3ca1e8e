"""Liveness and readiness: ``/healthz`` (the process answers), ``/readyz`` (503 until a model is loaded)."""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations.
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from components.serving.routes.schema import ErrorResponse
from components.serving.routes.service import Service, service

router = APIRouter(tags=["service"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"model": ErrorResponse}})
def readyz(svc: Annotated[Service, Depends(service)]) -> Any:
    loaded = svc.holder.model
    if loaded is None:
        return JSONResponse(
            {
                "status": "not_ready",
                "model_version": None,
                "error": {"code": "not_ready", "message": svc.holder.error or "loading", "field": None},
            },
            status_code=503,
        )
    return {"status": "ready", "model_version": loaded.version}
