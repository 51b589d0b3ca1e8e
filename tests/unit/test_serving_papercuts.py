"""Papercuts of a new user's first hour (issue 26), on the real app with the roofline predictor."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from components.serving.app import ServerLimits, create_app

GEMM = {"op": "gemm", "shape": {"M": 1024, "N": 1024, "K": 1024}, "dtype": "bf16"}


@pytest.fixture(scope="module")
def client():
    app = create_app("roofline", limits=ServerLimits(max_body_bytes=64 * 1024), poll=False)
    with TestClient(app) as test_client:
        yield test_client


def test_docs_page_loads_no_asset_from_another_host(client) -> None:
    page = client.get("/docs")
    assert page.status_code == 200
    urls = re.findall(r"""(?:src|href|url)\s*[=:]\s*['"]([^'"]+)['"]""", page.text)
    assert urls, page.text
    external = [u for u in urls if re.match(r"^(https?:)?//", u)]
    assert not external, external
    assets = [u for u in urls if u.endswith((".js", ".css"))]
    assert len(assets) >= 2, urls
    for url in assets + [u for u in urls if u.endswith(".png")]:
        response = client.get(url)
        assert response.status_code == 200 and len(response.content) > 500, url


def test_predict_accepts_devices_all_like_rank(client) -> None:
    response = client.post("/v1/predict", json={"kernels": [GEMM], "devices": "all"})
    assert response.status_code == 200, response.text
    from components.devices import load_catalog

    assert {p["device"] for p in response.json()["predictions"]} == {s.id for s in load_catalog().all()}


MODULE = """
import torch
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(256, 256)
    def forward(self, x):
        return torch.relu(self.fc(x))
def get_inputs():
    return [torch.randn(64, 256)]
def get_init_inputs():
    return []
"""


def test_breakdown_is_nested_json_not_a_string() -> None:
    app = create_app("roofline", allow_modules=True, poll=False)
    with TestClient(app) as test_client:
        response = test_client.post(
            "/v1/predict", json={"kernels": [{"module": MODULE}], "devices": ["H100"]}
        )
    assert response.status_code == 200, response.text
    breakdown = response.json()["predictions"][0]["breakdown"]
    assert (
        isinstance(breakdown, list)
        and breakdown
        and {"op", "count", "duration_us", "bound"} <= set(breakdown[0])
    )
