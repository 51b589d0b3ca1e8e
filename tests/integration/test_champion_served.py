"""`kernelcast serve` on the registered champion alone: the real CLI starts the real HTTP server on
``models:/<name>@champion`` from a process whose KERNELCAST_HOME is an empty folder, and the server answers
an op question with the op engine the champion carries and a deployment question with the serving engines'
constants it carries (``components.registry.carried``), leaving no model state in that folder.

Real parts: the champion of ``tests/integration/conftest.py`` (a sqlite MLflow store, a tabular predictor
trained on profiled-data/, an op engine over a one-row measured store of a known GEMM time), the CLI, uvicorn.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.platform.config import PROJECT_ROOT
from tests.integration.registered import CARRYING_GEMM, CARRYING_MEASURED_US, CarryingChampion

pytestmark = pytest.mark.slow
START_TIMEOUT_S = 120  # the CLI, the server's imports and the champion's download on a loaded 2-core box
STATE = ("models", "opmodel", "data", "calibration")  # where a home folder keeps what answers


def _request(port: int, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data, {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


@pytest.fixture
def served(carrying_champion: CarryingChampion, tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """``kernelcast serve`` (its own process group) on the champion, home an empty folder; (port, home)."""
    from components.serving.bench import _free_port, stop_server

    home, port = tmp_path / "service-home", _free_port()
    home.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "KERNELCAST_"))},
        "KERNELCAST_HOME": str(home),
        "MLFLOW_TRACKING_URI": carrying_champion.uri,
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "PYTHONPATH": str(PROJECT_ROOT),
    }
    model = f"models:/{carrying_champion.name}@champion"
    command = [sys.executable, "-m", "kernelcast.cli", "serve", "--model", model, "--port", str(port)]
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(
        [*command, "--poll-s", "3600"], env=env, cwd=tmp_path, start_new_session=True, stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if _request(port, "/readyz").get("model_version"):
                    break
            except OSError:  # not listening yet, or 503 until the champion is loaded
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"kernelcast serve did not get ready: {(tmp_path / 'serve.log').read_text()[-3000:]}"
                )
            time.sleep(0.5)
        yield port, home
    finally:
        stop_server(process)
        log.close()


def test_kernelcast_serve_answers_from_the_champion_with_an_empty_home(
    served: tuple[int, Path], carrying_champion: CarryingChampion
) -> None:
    port, home = served
    kernels = [
        {"op": "gemm", "shape": CARRYING_GEMM, "dtype": "fp16"},
        {"op": "add", "shape": {"N": 1 << 26}, "dtype": "fp32"},  # a classic op: the tabular predictor's
    ]
    op = _request(port, "/v1/predict", {"kernels": kernels, "devices": ["H100"]})
    assert op["model_version"] == f"models:/{carrying_champion.name}/1"
    answer, classic = op["predictions"]
    # the measured tier of the op engine inside the artifact, verbatim (no store in the empty home)
    assert answer["device"] == "h100-sxm" and answer["duration_us"] == pytest.approx(CARRYING_MEASURED_US)
    for each in (answer, classic):
        assert each["duration_us"] >= each["roofline_us"] > 0
    # the H100 runtime correction the artifact carries (its 10 rows), applied and said so
    assert "runtime calibrated on 10 profiled rows of this GPU" in (classic["note"] or ""), classic

    question = {"model": "Llama-3.1-8B", "isl": 1024, "osl": 128, "concurrency": 8, "framework": "sglang"}
    [deployment] = _request(port, "/v1/predict", {"deployment": question, "devices": ["H100"]})["deployments"]
    assert deployment["deployment"]["gpu"] == "h100-sxm" and deployment["ttft_ms"] > 0
    engine = deployment["deployment"]["engine"]
    assert engine["name"] == "sglang" and engine["provenance"].startswith("constants fitted on ")
    # read from the server's copy of champion v1 (components.serving.models.local_copy), not the package's
    carried = Path(engine["provenance"].rsplit("read from ", 1)[1])
    assert carried.relative_to(home / "serving" / "models").parts[-4:] == (
        carrying_champion.name,
        "1",
        "deployments",
        "constants.json",
    )
    logged = carrying_champion.root / "model" / "deployments" / "constants.json"
    assert carried.read_text() == logged.read_text()
    assert "predates" not in json.dumps(deployment)

    # `kernelcast serve` lays out the home's folders and keeps its copy of the champion under serving/; no
    # other folder holds a file it could have answered from
    held = [p.relative_to(home) for p in home.rglob("*") if p.is_file()]
    assert not [p for p in held if p.parts[0] in STATE], held
