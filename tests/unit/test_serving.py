"""The HTTP service on the training-free roofline predictor (FastAPI's in-process test client)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from components.serving.app import create_app


def test_predict_devices_health_and_bad_input() -> None:
    client = TestClient(create_app("roofline"))
    assert client.get("/health").json()["status"] == "ok"
    assert "h100-sxm" in client.get("/devices").json()
    ok = client.post("/predict", json={"op": "add", "shape": {"B": 1024, "H": 1024}, "dtype": "fp32",
                                       "devices": ["H100", "T4"]})
    assert ok.status_code == 200
    rows = {r["device"]: r for r in ok.json()["predictions"]}
    assert rows["t4"]["roofline_class"] == "bandwidth"
    assert rows["t4"]["duration_us"] > rows["h100-sxm"]["duration_us"]  # 320 vs 3350 GB/s
    bad = client.post("/predict", json={"op": "add", "shape": {"B": 4}, "devices": ["H999"]})
    assert bad.status_code == 422 and "H999" in bad.json()["detail"]
    negative = client.post("/predict", json={"op": "add", "shape": {"B": -4}, "devices": ["H100"]})
    assert negative.status_code == 422
