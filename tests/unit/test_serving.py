"""The /v1 HTTP API in-process (FastAPI's test client) on the training-free roofline predictor.

The same app on a real registered model, in a real uvicorn process, is in
tests/integration/test_serving_server.py.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from components.serving.app import ServerLimits, create_app

GEMM = {"op": "gemm", "shape": {"M": 4096, "N": 4096, "K": 4096}, "dtype": "bf16"}


@pytest.fixture(scope="module")
def client():
    app = create_app(
        "roofline", limits=ServerLimits(max_body_bytes=64 * 1024, max_kernels=8, max_questions=64), poll=False
    )
    with TestClient(app) as test_client:
        yield test_client


def _error(response, status: int, field: str | None = None) -> dict:
    assert response.status_code == status, response.text
    body = response.json()["error"]
    assert set(body) == {"code", "message", "field"} and "Traceback" not in body["message"]
    if field is not None:
        assert body["field"] == field, body
    return body


def test_health_readiness_devices_and_openapi(client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready", "model_version": "roofline"}
    devices = client.get("/v1/devices").json()["devices"]
    h100 = next(d for d in devices if d["id"] == "h100-sxm")
    assert {"id", "name", "vendor", "arch"} <= set(h100) and h100["vendor"] == "nvidia"
    spec = client.get("/openapi.json").json()
    assert {"/v1/predict", "/v1/rank", "/v1/devices", "/healthz", "/readyz"} <= set(spec["paths"])
    assert client.get("/docs").status_code == 200


def test_predict_answers_kernel_by_distinct_device(client) -> None:
    body = {
        "kernels": [GEMM, {"op": "add", "shape": {"N": 1 << 20}}],
        "devices": ["H100", "T4", "h100", "H100 SXM"],
    }
    response = client.post("/v1/predict", json=body)
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["model_version"] == "roofline"
    predictions = data["predictions"]
    assert [(p["kernel"], p["device"]) for p in predictions] == [
        (0, "h100-sxm"),
        (0, "t4"),
        (1, "h100-sxm"),
        (1, "t4"),
    ]
    gemm_h100 = predictions[0]
    assert gemm_h100["roofline_class"] == "compute" and gemm_h100["bound_pipe"] == "tensor"
    assert gemm_h100["duration_us"] == pytest.approx(2 * 4096**3 / 989.4e12 * 1e6, rel=0.02)
    assert gemm_h100["headroom"] == pytest.approx(1.0) and gemm_h100["model_version"] == "roofline"
    assert predictions[3]["roofline_class"] == "bandwidth" and predictions[3]["bound_pipe"] == "dram"


def test_a_full_device_spec_is_a_device(client) -> None:
    spec = client.get("/v1/devices").json()["devices"]  # catalog entry -> a spec under another id
    from components.devices import load_catalog

    custom = load_catalog().resolve("H100").model_dump()
    custom.update(id="lab-h100", name="Lab H100", aliases=[])
    response = client.post("/v1/predict", json={"kernels": [GEMM], "devices": [custom, "H100"]})
    assert response.status_code == 200, response.text
    first, second = response.json()["predictions"]
    assert first["device"] == "lab-h100" and first["duration_us"] == pytest.approx(second["duration_us"])
    assert spec  # the catalog listing above is unaffected by the request's own spec
    bad = dict(custom, dram_gbps=-1)
    _error(client.post("/v1/predict", json={"kernels": [GEMM], "devices": [bad]}), 422)


@pytest.mark.parametrize(
    ("kernel", "field", "fragment"),
    [
        ({"op": "gemm", "shape": {"M": 64, "N": 64}}, "kernels[0].shape", "missing K"),
        ({"op": "gemm", "shape": {"M": 64, "N": 64, "K": 64, "Q": 1}}, "kernels[0].shape", "unknown Q"),
        ({"op": "gemm", "shape": {"M": 64, "N": 64, "K": 64}, "dtype": "banana"}, "kernels[0].dtype", "fp32"),
        ({"op": "gemm", "shape": {"M": 10**9, "N": 1, "K": 1}}, "kernels[0].shape.M", "16777216"),
        (
            {"op": "gemm", "shape": {"M": 2**24, "N": 2**24, "K": 2**24}},
            "kernels[0].shape",
            "2**36 per tensor",
        ),
        (
            {"op": "gemm", "shape": {"M": -4, "N": 1, "K": 1}},
            "kernels[0].shape.M",
            "greater than or equal to 1",
        ),
        ({"op": "conv9", "shape": {"M": 1}}, "kernels[0].op", "conv9"),
        (
            {"op": "gemm", "shape": {"M": 1, "N": 1, "K": 1}, "colour": "red"},
            "kernels[0].colour",
            "Extra inputs",
        ),
        ({"dtype": "fp16"}, "kernels[0]", "exactly one kernel form"),
        ({"source": "__global__ void k(){}", "language": "cuda"}, "kernels[0].launch", "missing"),
        (
            {"source": "__global__ void k(){}", "language": "cobol", "launch": {"grid": [1], "block": [1]}},
            "kernels[0].language",
            "cuda",
        ),
        (
            {"source": "__global__ void k(){}", "language": "cuda", "launch": {"grid": [1], "block": [2048]}},
            "kernels[0].launch.block[0]",
            "1024",
        ),
        ({"module": "class Model: pass"}, "kernels[0].module", "--allow-modules"),
    ],
)
def test_malformed_kernels_are_422_naming_the_field(client, kernel: dict, field: str, fragment: str) -> None:
    body = _error(
        client.post("/v1/predict", json={"kernels": [GEMM, kernel][1:], "devices": ["H100"]}), 422, field
    )
    assert fragment in body["message"], body


def test_transport_and_limit_errors_and_the_server_keeps_serving(client) -> None:
    assert (
        _error(
            client.post("/v1/predict", content=b"{not json", headers={"content-type": "application/json"}),
            400,
        )["code"]
        == "malformed_json"
    )
    assert (
        _error(client.post("/v1/predict", json={"kernels": [GEMM], "devices": ["H999"]}), 422, "devices[0]")[
            "code"
        ]
        == "unknown_device"
    )
    assert (
        _error(
            client.post(
                "/v1/predict", content=b"x" * (65 * 1024), headers={"content-type": "application/json"}
            ),
            413,
        )["code"]
        == "body_too_large"
    )
    assert _error(
        client.post("/v1/predict", json={"kernels": [GEMM], "devices": ["H100"], "pad": "x" * (65 * 1024)}),
        413,
    )
    big_source = {"source": "x" * 300_000, "language": "cuda", "launch": {"grid": [1], "block": [1]}}
    assert _error(
        client.post(
            "/v1/predict",
            content=json.dumps({"kernels": [big_source], "devices": ["H100"]}),
            headers={"content-type": "application/json"},
        ),
        413,
    )
    _error(client.post("/v1/predict", json={"kernels": [GEMM] * 9, "devices": ["H100"]}), 422, "kernels")
    _error(
        client.post(
            "/v1/predict",
            json={
                "kernels": [GEMM] * 8,
                "devices": ["H100", "A100", "T4", "L4", "V100", "MI300X", "H200", "L40S", "A10"],
            },
        ),
        422,
        "kernels",
    )
    # 10,000 copies of one device collapse to one: answered (once), not a 10,000-row cross join.
    flood = client.post("/v1/predict", json={"kernels": [GEMM], "devices": ["H100"] * 5000})
    assert flood.status_code == 200 and len(flood.json()["predictions"]) == 1
    _error(
        client.post("/v1/predict", json={"kernels": [GEMM], "devices": ["H100"], "model": "/etc/passwd"}),
        400,
        "model",
    )
    _error(client.post("/v1/predict", json={"kernels": [], "devices": ["H100"]}), 422, "kernels")
    _error(client.get("/v1/nothing"), 404)
    assert client.post("/v1/predict", json={"kernels": [GEMM], "devices": ["H100"]}).status_code == 200


def test_rank_by_time_and_by_cost(client) -> None:
    workload = [
        {"kernel": GEMM, "count": 10},
        {"kernel": {"op": "add", "shape": {"N": 1 << 24}}, "count": 100},
    ]
    by_time = client.post("/v1/rank", json={"workload": workload, "devices": ["H100", "A100", "T4"]}).json()
    assert by_time["ranked_by"] == "time" and by_time["ranking"][0]["device"] == "h100-sxm"
    assert [e["rank"] for e in by_time["ranking"]] == [1, 2, 3]
    totals = [e["total_us"] for e in by_time["ranking"]]
    assert totals == sorted(totals)
    by_cost = client.post(
        "/v1/rank",
        json={
            "workload": workload,
            "devices": ["H100", "A100", "T4"],
            "prices": {"H100": 100.0, "A100": 1.0, "T4": 0.3},
        },
    ).json()
    assert by_cost["ranked_by"] == "cost"
    costs = [e["usd_per_run"] for e in by_cost["ranking"]]
    assert costs == sorted(costs) and by_cost["ranking"][-1]["device"] == "h100-sxm"
    entry = by_cost["ranking"][0]
    assert entry["usd_per_run"] == pytest.approx(entry["total_us"] * 1e-6 / 3600 * entry["usd_per_hour"])
    everything = client.post("/v1/rank", json={"kernels": [GEMM], "devices": "all"})
    assert everything.status_code == 422  # 96 GPUs x 1 kernel is over this client's max_questions (64)
    _error(
        client.post("/v1/rank", json={"kernels": [GEMM], "devices": ["H100"], "prices": {"X999": 1.0}}), 422
    )
    _error(client.post("/v1/rank", json={"devices": ["H100"]}), 422)
    _error(
        client.post("/v1/rank", json={"workload": [{"kernel": GEMM, "count": 0}], "devices": ["H100"]}),
        422,
        "workload[0].count",
    )


def test_api_key_is_required_when_configured() -> None:
    app = create_app("roofline", api_key="s3cret", poll=False)
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200  # liveness stays open for orchestrators
        _error(client.post("/v1/predict", json={"kernels": [GEMM], "devices": ["H100"]}), 401)
        _error(
            client.post(
                "/v1/predict",
                json={"kernels": [GEMM], "devices": ["H100"]},
                headers={"Authorization": "Bearer wrong"},
            ),
            401,
        )
        ok = client.post(
            "/v1/predict",
            json={"kernels": [GEMM], "devices": ["H100"]},
            headers={"Authorization": "Bearer s3cret"},
        )
        assert ok.status_code == 200


def test_not_ready_without_a_model(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'none.db'}")
    app = create_app("models:/kernelcast@champion", poll=False)
    with TestClient(app) as client:
        response = client.get("/readyz")
        assert response.status_code == 503 and response.json()["status"] == "not_ready"
        _error(client.post("/v1/predict", json={"kernels": [GEMM], "devices": ["H100"]}), 503)
        # The training-free baseline still answers when asked for by name.
        assert (
            client.post(
                "/v1/predict", json={"kernels": [GEMM], "devices": ["H100"], "model": "roofline"}
            ).status_code
            == 200
        )
