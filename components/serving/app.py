"""FastAPI app: the prediction service downstream tools (editor extension, planners) call.

    POST /predict {"op": "gemm", "shape": {"M": 4096, "N": 4096, "K": 4096}, "dtype": "bf16",
                   "devices": ["H100", "MI300X"]}
    GET  /devices      the catalog ids
    GET  /health       liveness + which model is loaded

The predictor is loaded once at start-up (``create_app(predictor_uri)``), not per request.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class PredictRequest(BaseModel):
    op: str = Field(description="gemm, bmm, linear, add, mul, gelu, relu, tanh, softmax, layernorm")
    shape: dict[str, int] = Field(description='sizes, e.g. {"M": 4096, "N": 4096, "K": 4096}')
    dtype: str = "fp32"
    devices: list[str] = Field(min_length=1, description="GPU names or aliases from the catalog")


def create_app(model_uri: str) -> Any:
    from fastapi import FastAPI, HTTPException

    from components.devices import load_catalog
    from components.serving.query import QueryError, load_any_predictor, score

    predictor = load_any_predictor(model_uri)
    app = FastAPI(title="kernelcast", description="GPU kernel performance prediction")

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok", "model": model_uri}

    @app.get("/devices")
    def devices() -> list[str]:
        return load_catalog().ids()

    @app.post("/predict")
    def predict(request: PredictRequest) -> dict[str, Any]:
        if any(value <= 0 for value in request.shape.values()):
            raise HTTPException(status_code=422, detail=f"shape sizes must be positive: {request.shape}")
        try:
            results = score(predictor, request.op, request.shape, request.dtype, request.devices)
        except QueryError as exc:
            raise HTTPException(status_code=422, detail=str(exc)) from exc
        return {"model": model_uri, "predictions": results}

    return app
