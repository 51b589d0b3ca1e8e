"""``POST /v1/rank``: devices ranked for kernels or a weighted workload (time or cost), or the GPU x TP
options of an LLM deployment that fit."""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations.
import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends

from components.serving.routes.schema import DEPLOYMENT_VERSION, DeploymentForm, RankRequest, RankResponse
from components.serving.routes.service import ApiError, Service, authorised, service

router = APIRouter(prefix="/v1", tags=["v1"], dependencies=[Depends(authorised)])


@router.post("/rank", response_model=RankResponse)
async def rank(body: RankRequest, svc: Annotated[Service, Depends(service)]) -> Any:
    from components.serving.query import QueryError
    from components.serving.rank import rank as rank_devices
    from components.serving.rank import rank_note

    if body.deployment is not None:
        if body.kernels is not None or body.workload is not None:
            raise ApiError(
                422,
                "invalid_request",
                "give exactly one of kernels, workload or deployment",
                "deployment",
            )
        return await deployment_rank(svc, body.deployment, body.devices, body.prices or {})
    if (body.kernels is None) == (body.workload is None):
        raise ApiError(422, "invalid_request", "give exactly one of kernels or workload", "kernels")
    prefix = "kernels" if body.kernels is not None else "workload"
    items = body.kernels or [w.kernel for w in body.workload or []]
    counts = [1] * len(items) if body.kernels is not None else [w.count for w in body.workload or []]
    predictor, version = svc.predictor_for(body.model)
    kernels = svc.check_kernels(items, prefix)
    specs = svc.devices_of(body.devices)
    svc.check_batch(len(kernels), specs)

    def work() -> tuple[list[dict[str, Any]], str]:
        try:
            return rank_devices(
                predictor,
                kernels,
                counts,
                specs,
                body.prices,
                model_version=version,
                allow_modules=svc.allow_modules,
            )
        except QueryError as exc:
            if str(exc).startswith("prices"):
                raise ApiError(
                    422, "invalid_price", str(exc), str(exc).split(" ", 1)[0].rstrip(":")
                ) from None
            raise svc.query_error(exc, len(specs), prefix) from None

    ranking, ranked_by = await svc.run(work)
    note = await asyncio.to_thread(rank_note, kernels, specs, body.prices)
    return {"model_version": version, "ranked_by": ranked_by, "ranking": ranking, "note": note}


async def deployment_rank(
    svc: Service, form: DeploymentForm, devices: Any, prices: dict[str, float]
) -> dict[str, Any]:
    from components.deployments.config import DeploymentError
    from components.deployments.service import rank_deployments
    from components.serving.rank import prices_for

    if form.prefill_gpus is not None or form.decode_gpus is not None:
        message = "deployment.prefill_gpus/decode_gpus: a split is asked of /v1/predict (rank tries TPs)"
        raise ApiError(422, "invalid_deployment", message, "deployment")
    specs = svc.devices_of(devices)
    svc.check_batch(1, specs)
    priced = prices_for(prices, specs)  # the kernel rank's rule: unknown or unasked GPUs named in the note

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

    ranking, skipped = await svc.run(work)
    return {
        "model_version": DEPLOYMENT_VERSION,
        "ranked_by": "cost" if form.by == "cost" else form.by,
        "ranking": [],
        "deployment_ranking": ranking,
        "options_not_fitting": skipped,
        "note": priced.note(),
    }
