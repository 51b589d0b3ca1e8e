"""The prediction server as a real uvicorn process on a real registered model (sqlite MLflow store).

The model is a small tabular one trained here on our own H100 measurements (profiled-data/),
logged, registered and promoted to ``champion``; the server follows the alias, so promoting a
second version swaps it in without a restart. Bad requests of every kind get their status and
the server keeps serving; a flood of concurrent requests is answered or refused (429), never
crashes it. The request schema is fuzzed from the OpenAPI spec with schemathesis (bounded).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.platform.config import PROJECT_ROOT

pytestmark = pytest.mark.slow
NAME = "kernelcast-serving-test"
GEMM = {"op": "gemm", "shape": {"M": 4096, "N": 4096, "K": 4096}, "dtype": "bf16"}
SAXPY = """extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}"""


@dataclass
class Registry:
    uri: str
    model_uri: str


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A sqlite store holding a real tabular model as ``<NAME>@champion`` (version 1)."""
    from tests.integration.registered import register_champion, train_small_tabular

    root = tmp_path_factory.mktemp("serving")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    patch = pytest.MonkeyPatch()
    patch.setenv("KERNELCAST_HOME", str(root / "home"))
    patch.setenv("MLFLOW_TRACKING_URI", uri)
    patch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    try:
        train_small_tabular(root / "tabular")
        model_uri = register_champion(root / "tabular", uri, NAME, "serving-test", root / "artifacts")
        yield Registry(uri, model_uri)
    finally:
        patch.undo()


def _post(
    port: int, path: str, body: bytes | dict, headers: dict[str, str] | None = None
) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data, {"content-type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _get(port: int, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@pytest.fixture(scope="module")
def server(registry: Registry) -> Iterator[int]:
    from components.serving.bench import _free_port, start_server, stop_server

    port = _free_port()
    env = {
        "KERNELCAST_HOME": os.environ.get("KERNELCAST_HOME", ""),
        "MLFLOW_TRACKING_URI": registry.uri,
        "KC_TEST_KEY": "k3y",
    }
    process = start_server(
        f"models:/{NAME}@champion",
        port,
        env=env,
        api_key_env="KC_TEST_KEY",
        limits={"max_body_bytes": 256 * 1024, "poll_s": 1.0, "max_in_flight": 4},
    )
    try:
        yield port
    finally:
        stop_server(process)
        assert process.poll() is not None


AUTH = {"Authorization": "Bearer k3y"}


def test_answers_on_the_registered_model(server: int) -> None:
    status, ready = _get(server, "/readyz")
    assert status == 200 and ready["model_version"] == f"models:/{NAME}/1"
    status, data = _post(
        server,
        "/v1/predict",
        {"kernels": [GEMM, {"op": "add", "shape": {"N": 1 << 24}}], "devices": ["H100", "MI300X", "H100"]},
        AUTH,
    )
    assert status == 200, data
    assert data["model_version"] == f"models:/{NAME}/1" and len(data["predictions"]) == 4
    for answer in data["predictions"]:
        assert answer["duration_us_lo"] <= answer["duration_us"] <= answer["duration_us_hi"]
        assert answer["roofline_us"] > 0 and answer["headroom"] > 0 and answer["bound_pipe"]
    assert _post(server, "/v1/predict", {"kernels": [GEMM], "devices": ["H100"]})[0] == 401


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        (b"{not json", 400, None),
        ({"kernels": [GEMM], "devices": ["H999"]}, 422, "devices[0]"),
        (
            {"kernels": [{"op": "gemm", "shape": {"M": 64, "N": 64}}], "devices": ["H100"]},
            422,
            "kernels[0].shape",
        ),
        ({"kernels": [{**GEMM, "dtype": "banana"}], "devices": ["H100"]}, 422, "kernels[0].dtype"),
        (
            {"kernels": [{"op": "gemm", "shape": {"M": 10**9, "N": 10**9, "K": 10**9}}], "devices": ["H100"]},
            422,
            "kernels[0].shape",  # each size is within 2**36 (the CLI's limit too): the tensors are not
        ),
        (
            {
                "kernels": [
                    {"source": "x" * 300_000, "language": "cuda", "launch": {"grid": [1], "block": [1]}}
                ],
                "devices": ["H100"],
            },
            413,
            None,
        ),
        ({"kernels": [GEMM], "devices": ["H100"], "padding": "y" * 300_000}, 413, None),
        (
            {
                "kernels": [
                    {
                        "source": "__global__ void broken( {",
                        "language": "cuda",
                        "launch": {"grid": [1], "block": [32]},
                    }
                ],
                "devices": ["H100"],
            },
            422,
            "kernels[0]",
        ),
        (
            {"kernels": [{"module": "import os\nclass Model: pass"}], "devices": ["H100"]},
            422,
            "kernels[0].module",
        ),
    ],
)
def test_bad_requests_get_their_status_and_the_server_stays_up(
    server: int, body, status: int, field: str | None
) -> None:
    got, data = _post(server, "/v1/predict", body, AUTH)
    assert got == status, data
    assert set(data["error"]) == {"code", "message", "field"} and "Traceback" not in data["error"]["message"]
    if field is not None:
        assert (data["error"]["field"] or "").startswith(field), data
    assert _get(server, "/healthz") == (200, {"status": "ok"})


def test_a_cuda_source_question_is_answered_or_refused_cleanly(server: int) -> None:
    status, data = _post(
        server,
        "/v1/predict",
        {
            "kernels": [{"source": SAXPY, "language": "cuda", "launch": {"grid": [4096], "block": [256]}}],
            "devices": ["H100", "A100"],
        },
        AUTH,
    )
    assert status in (200, 422), data
    if status == 200:  # the source predictor is installed: one answer per device, kind "source"
        assert [p["kind"] for p in data["predictions"]] == ["source", "source"]
        assert all(p["duration_us"] is None or p["duration_us"] > 0 for p in data["predictions"])
    else:
        assert "source" in data["error"]["message"]


def test_a_flood_is_answered_or_refused_and_the_server_survives(server: int) -> None:
    statuses: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        status, _ = _post(
            server, "/v1/predict", {"kernels": [GEMM] * 4, "devices": ["H100", "A100", "T4"]}, AUTH
        )
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=one) for _ in range(60)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert len(statuses) == 60 and set(statuses) <= {200, 429} and 200 in statuses, statuses
    assert _get(server, "/readyz")[0] == 200
    assert _post(server, "/v1/predict", {"kernels": [GEMM], "devices": ["H100"]}, AUTH)[0] == 200


def test_a_new_champion_is_served_without_a_restart(server: int, registry: Registry) -> None:
    from components.registry import mlflow_registry as reg

    version = reg.register(registry.model_uri, NAME, registry.uri)
    reg.mlflow_client(registry.uri).set_registered_model_alias(NAME, "champion", version)
    deadline = time.monotonic() + 120
    seen = None
    while time.monotonic() < deadline:
        seen = _get(server, "/readyz")[1].get("model_version")
        if seen == f"models:/{NAME}/{version}":
            break
        time.sleep(0.5)
    assert seen == f"models:/{NAME}/{version}"
    status, data = _post(server, "/v1/predict", {"kernels": [GEMM], "devices": ["H100"]}, AUTH)
    assert status == 200 and data["predictions"][0]["model_version"] == f"models:/{NAME}/{version}"


def test_kernelcast_serve_stops_with_its_process_group(tmp_path: Path) -> None:
    from components.serving.bench import _free_port

    port = _free_port()
    env = {**os.environ, "KERNELCAST_HOME": str(tmp_path)}
    process = subprocess.Popen(
        [sys.executable, "-m", "kernelcast.cli", "serve", "--model", "roofline", "--port", str(port)],
        env=env,
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if _get(port, "/readyz")[0] == 200:
                    break
            except OSError:
                time.sleep(0.3)
        assert _get(port, "/readyz") == (200, {"status": "ready", "model_version": "roofline"})
        children = subprocess.run(
            ["pgrep", "-P", str(process.pid)], capture_output=True, text=True
        ).stdout.split()
        assert children, "the server should run as a child process group"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        for pid in children:
            assert (
                not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
            )
        with pytest.raises(OSError):
            _get(port, "/healthz")
    finally:
        if process.poll() is None:
            process.kill()


def test_the_request_schema_fuzzed_from_openapi() -> None:
    """schemathesis generates requests from /openapi.json: no 5xx, every response as documented."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings

    from components.serving.app import ServerLimits, create_app

    app = create_app("roofline", poll=False, limits=ServerLimits(max_questions=256))
    app.state.holder.refresh()  # the in-process transport may not run the lifespan
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    failures: list[str] = []

    def fuzz(operation) -> None:
        @given(case=operation.as_strategy())
        @settings(
            max_examples=25,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case) -> None:
            response = case.call()
            if response.status_code >= 500:
                failures.append(
                    f"{operation.method.upper()} {operation.path}: {response.status_code} "
                    f"{response.text[:200]}"
                )
            elif response.status_code >= 400:
                body = response.json()
                assert set(body.get("error", {})) == {"code", "message", "field"}, body

        check()

    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/predict", "/v1/rank", "/v1/devices"}
    for operation in operations:
        fuzz(operation)
    assert not failures, failures


def test_kernelcast_mlflow_ui_stops_the_mlflow_server_and_its_workers(tmp_path: Path) -> None:
    """Stopping `kernelcast mlflow-ui` used to leave `mlflow server` and its uvicorn workers running."""
    from components.serving.bench import _free_port

    port = _free_port()
    env = {
        **os.environ,
        "KERNELCAST_HOME": str(tmp_path),
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'm.db'}",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "kernelcast.cli", "mlflow-ui", "--port", str(port)],
        env=env,
        cwd=PROJECT_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    group: list[str] = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            children = subprocess.run(
                ["pgrep", "-P", str(process.pid)], capture_output=True, text=True
            ).stdout.split()
            if children:
                # The MLflow server leads its own group; wait for its workers to join it.
                group = subprocess.run(
                    ["pgrep", "-g", children[0]], capture_output=True, text=True
                ).stdout.split()
                if len(group) >= 2:
                    break
            time.sleep(0.5)
        assert len(group) >= 2, "mlflow server and a worker should be running"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0
        left = [
            pid
            for pid in group
            if Path(f"/proc/{pid}").exists()
            and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        ]
        assert not left, f"processes of the MLflow UI outlived it: {left}"
    finally:
        if process.poll() is None:
            process.kill()
