"""A new user's first hour, second pass (issue 34), over HTTP: the real app with the roofline predictor."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from components.serving.app import create_app

GEMM = {"op": "gemm", "shape": {"M": 1, "N": 4096, "K": 4096}, "dtype": "bf16"}
DEPLOYMENT = {"model": "Qwen2.5-14B", "isl": 1024, "osl": 128, "concurrency": 4}


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app("roofline", poll=False)) as test_client:
        yield test_client


def _error(response) -> dict:
    assert response.status_code == 422, response.text
    return response.json()["error"]


def test_a_huge_number_is_refused_naming_the_field_and_the_limit(client) -> None:
    body = '{"kernels": [{"op": "gemm", "shape": {"M": 1e30, "N": 4096, "K": 4096}}], "devices": ["H100"]}'
    error = _error(client.post("/v1/predict", content=body, headers={"content-type": "application/json"}))
    assert error["field"] == "kernels[0].shape.M"
    assert error["message"] == (
        "kernels[0].shape.M: 1e+30 is above the largest size accepted (2**36 = 68,719,476,736)"
    )
    body = '{"deployment": {"model": "Qwen2.5-14B", "isl": 1e30, "osl": 128}, "devices": ["H100"]}'
    error = _error(client.post("/v1/predict", content=body, headers={"content-type": "application/json"}))
    assert error["message"] == "deployment.isl: 1e+30 is above the largest value accepted (2**20 = 1,048,576)"


def test_the_http_size_limit_is_the_cli_one(client) -> None:
    # 2**26 rows of an elementwise op: accepted by the CLI and batch files (2**36 per size), so over HTTP too
    add = {"op": "add", "shape": {"N": 2**26}, "dtype": "bf16"}
    response = client.post("/v1/predict", json={"kernels": [add], "devices": ["H100"]})
    assert response.status_code == 200, response.text


def test_http_takes_the_cli_shape_syntax_too(client) -> None:
    text = {**GEMM, "shape": "M=1,N=4096,K=4096"}
    both = client.post("/v1/predict", json={"kernels": [text, GEMM], "devices": ["H100"]})
    assert both.status_code == 200, both.text
    first, second = both.json()["predictions"]
    assert first["duration_us"] == second["duration_us"]


def test_rank_ignores_and_names_prices_the_catalog_does_not_know(client) -> None:
    prices = {"H100": 2.5, "TPU-v5e": 1.0, "L4": 0.5}
    kernels = client.post("/v1/rank", json={"kernels": [GEMM], "devices": ["H100", "A100"], "prices": prices})
    assert kernels.status_code == 200, kernels.text
    assert kernels.json()["ranked_by"] == "cost"
    note = kernels.json()["note"]
    assert (
        note == "prices of GPUs not ranked ignored: L4; prices of names not in the catalog ignored: TPU-v5e"
    )
    deployment = client.post(
        "/v1/rank",
        json={"deployment": {**DEPLOYMENT, "by": "cost"}, "devices": ["H100", "A100"], "prices": prices},
    )
    assert deployment.status_code == 200, deployment.text
    assert deployment.json()["note"] == note
    priced = [r for r in deployment.json()["deployment_ranking"] if r["usd_per_hour"] is not None]
    assert priced and {r["device"] for r in priced} == {"h100-sxm"}


def test_a_disagg_deployment_over_http_states_and_takes_the_split(client) -> None:
    form = {**DEPLOYMENT, "tp": 2, "mode": "disagg", "prefill_gpus": 4}
    response = client.post("/v1/predict", json={"deployment": form, "devices": ["H100"]})
    assert response.status_code == 200, response.text
    (answer,) = response.json()["deployments"]
    assert (
        answer["deployment"]["split"]["prefill_gpus"] == 4
        and answer["deployment"]["split"]["decode_gpus"] == 2
    )
    error = _error(
        client.post("/v1/predict", json={"deployment": {**form, "prefill_gpus": 3}, "devices": ["H100"]})
    )
    assert (
        error["message"] == "deployment.prefill_gpus 3: not a multiple of the 2 GPUs of one worker (tp x pp)"
    )


def test_serving_docs_name_every_request_field_of_the_api() -> None:
    from pathlib import Path

    from components.serving.routes.schema import DeploymentForm, PredictRequest, RankRequest, WorkloadItem

    text = (Path(__file__).resolve().parents[2] / "docs" / "serving.md").read_text()
    for model in (PredictRequest, RankRequest, WorkloadItem, DeploymentForm):
        missing = [name for name in model.model_fields if f"`{name}`" not in text]
        assert not missing, f"docs/serving.md does not mention {model.__name__} fields {missing}"
