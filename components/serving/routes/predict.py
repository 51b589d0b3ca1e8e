"""``POST /v1/predict``: kernels (op + shape, source, module) on devices, or an LLM deployment on devices."""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations.
from typing import Annotated, Any

from fastapi import APIRouter, Depends

from components.serving.routes.schema import (
    DEPLOYMENT_VERSION,
    DeploymentForm,
    PredictRequest,
    PredictResponse,
)
from components.serving.routes.service import ApiError, Service, authorised, service

router = APIRouter(prefix="/v1", tags=["v1"], dependencies=[Depends(authorised)])


@router.post("/predict", response_model=PredictResponse)
async def predict(body: PredictRequest, svc: Annotated[Service, Depends(service)]) -> Any:
    from components.serving.query import QueryError
    from components.serving.question_forms import parse_questions
    from components.serving.questions import answer_questions

    if (body.kernels is None) == (body.deployment is None):
        raise ApiError(422, "invalid_request", "give exactly one of kernels or deployment", "kernels")
    if body.deployment is not None:
        return await deployment_answer(svc, body.deployment, body.devices)
    predictor, version = svc.predictor_for(body.model)
    kernels = svc.check_kernels(body.kernels, "kernels")
    specs = svc.devices_of(body.devices)
    svc.check_batch(len(kernels), specs)

    def work() -> list[dict[str, Any]]:
        rows = [{**kernel, "device": spec} for kernel in kernels for spec in specs]
        try:
            answers = answer_questions(
                predictor, parse_questions(rows), model_version=version, allow_modules=svc.allow_modules
            )
        except QueryError as exc:
            raise svc.query_error(exc, len(specs), "kernels") from None
        for answer in answers:
            answer["kernel"] = answer.pop("question") // len(specs)
        return answers

    return {"model_version": version, "predictions": await svc.run(work)}


async def deployment_answer(svc: Service, form: DeploymentForm, devices: Any) -> dict[str, Any]:
    from components.deployments.config import DeploymentError
    from components.serving.deployment_questions import model_parts
    from components.serving.disagg import predict_split_deployment

    specs = svc.devices_of(devices)
    svc.check_batch(1, specs)
    loaded = (
        svc.holder.model
    )  # the served model's op engine and engines' constants (none loaded: the package's)

    def work() -> list[dict[str, Any]]:
        carried = model_parts(loaded.predictor) if loaded is not None else None
        try:
            return predict_split_deployment(
                form.model, specs, form.params(), allow_paths=False, where="deployment.", carried=carried
            )
        except DeploymentError as exc:
            raise ApiError(422, "invalid_deployment", str(exc), "deployment") from None

    return {"model_version": DEPLOYMENT_VERSION, "predictions": [], "deployments": await svc.run(work)}
