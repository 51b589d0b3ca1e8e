"""A downstream service's view of the registry: a real `mlflow server` on loopback (sqlite backend,
artifacts served over HTTP), a full train -> evaluate --gate -> promote cycle against it through the
CLI, then a SEPARATE process that knows only the server's URL loads ``models:/kernelcast@champion``
and answers raw questions.

Data: our own H100 measurements (``profiled-data/``) as the feature table (session fixture); the gate
is params.yaml's bounds for the unseen-kernel split plus the random split (whose test side the
candidate's recipe is refitted for), since one GPU holds no leave-one-GPU-out or published split.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from components.physics.bounds import BOUNDS
from components.platform.config import PROJECT_ROOT

pytestmark = pytest.mark.slow

SERVER_START_TIMEOUT_S = 120  # ~17 s on an idle 2-core box


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``mlflow server`` on 127.0.0.1 with a sqlite backend and --serve-artifacts, in its own folder."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = _free_port()
    uri = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    log = (root / "server.log").open("w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}",
            "--serve-artifacts",
            "--artifacts-destination",
            str(root / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not start: {(root / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield uri
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


DOWNSTREAM = textwrap.dedent("""
    import json, sys
    import mlflow
    import pandas as pd

    mlflow.set_tracking_uri(sys.argv[1])
    model = mlflow.pyfunc.load_model("models:/kernelcast@champion")
    answers = model.predict(pd.DataFrame(json.loads(sys.argv[2])))
    print("ANSWERS " + answers.to_json(orient="records"))
""")


def _questions() -> list[dict[str, str]]:
    """Two catalog GPUs, and one the catalog does not hold, given by its full spec (JSON text)."""
    from components.devices import load_catalog

    spec = load_catalog().resolve("H100").model_dump(mode="json")
    spec.update(id="made-up-gpu", name="Made-up GPU", aliases=[], dram_gbps=6000.0)
    return [
        {
            "device": "H100",
            "dtype": "fp16",
            "op": "gemm",
            "shape": json.dumps({"M": 4096, "N": 4096, "K": 4096}),
        },
        {"device": "L4", "dtype": "fp32", "op": "softmax", "shape": json.dumps({"B": 4096, "H": 1024})},
        {
            "device_spec": json.dumps(spec),
            "dtype": "fp16",
            "op": "gemm",
            "shape": json.dumps({"M": 2048, "N": 2048, "K": 2048}),
        },
        # Whole programs: CUDA source (compiled and analysed, never run) and a PyTorch module (traced
        # in the sandbox), answered by the same champion through the same columns.
        {
            "device": "H100",
            "dtype": "fp32",
            "source": SAXPY,
            "language": "cuda",
            "launch": json.dumps({"grid": [4096, 1, 1], "block": [256, 1, 1]}),
        },
        {"device": "H100", "dtype": "fp32", "module": MODULE},
    ]


SAXPY = """
__global__ void saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""
MODULE = """
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(1024, 1024)

    def forward(self, x):
        return torch.relu(self.fc(x))

def get_inputs():
    return [torch.randn(64, 1024)]

def get_init_inputs():
    return []
"""


def test_train_evaluate_promote_against_a_server_then_a_downstream_process_predicts(
    mlflow_server: str,
    features_file: Path,
    small_op_engine: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kernelcast.cli import app
    from mlflow import MlflowClient

    params = yaml.safe_load((PROJECT_ROOT / "params.yaml").read_text())
    bounds = params["register"]["splits"]["unseen-kernel"]
    params["register"]["splits"] = {"unseen-kernel": bounds, "random": {"max_runtime_mape": 0.6}}
    params["register"]["guarded"] = ["unseen-kernel/runtime_mape", "random/runtime_mape"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.setenv("KERNELCAST_PARAMS_FILE", str(tmp_path / "params.yaml"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(app, list(args))
        assert result.exit_code == 0, result.output
        return result.output

    from components.registry.lineage import file_md5

    out = run(
        "train",
        "--family",
        "tabular",
        "--split",
        "unseen-kernel",
        "--features",
        str(features_file),
        "--out",
        str(tmp_path / "tabular"),
        "--no-ray",
    )
    version = re.search(r"registered: models:/kernelcast/(\d+)", out).group(1)
    registration = str(tmp_path / "tabular" / "registration.json")
    out = run(
        "evaluate",
        "--gate",
        "--registration",
        registration,
        "--features",
        str(features_file),
        "--out",
        str(tmp_path / "gate.json"),
    )
    assert "complete;" in out, out
    out = run("promote", "--registration", registration)
    assert "PASS  evaluation complete: 2/2 splits" in out and f"kernelcast v{version}: champion" in out

    client = MlflowClient(tracking_uri=mlflow_server)
    tabular = client.get_model_version("kernelcast", version)
    assert client.get_model_version_by_alias("kernelcast", "champion").version == version
    # Lineage: the version says what trained it, on which data, and where its full evaluation is.
    tags = tabular.tags
    assert (
        tags["family"] == "tabular"
        and tags["training_run"] == tabular.run_id
        and len(tags["git_commit"]) == 40
    )
    assert tags["dataset_version"] == f"md5:{file_md5(features_file)}"  # not in a DVC output folder here
    assert tags["kc.promotion"] == "champion" and float(tags["kc.metric.random/runtime_mape"]) <= 0.6
    report = client.download_artifacts(tabular.run_id, "evaluation/gate.json", str(tmp_path / "downloaded"))
    assert tags["eval_report"] == f"runs:/{tabular.run_id}/evaluation/gate.json"
    gate = json.loads(Path(report).read_text())
    assert (
        gate["model_version"] == version
        and gate["complete"]
        and set(gate["splits"]) == {"unseen-kernel", "random"}
    )
    assert (
        gate["splits"]["random"]["mode"] == "refit" and gate["splits"]["unseen-kernel"]["mode"] == "artifact"
    )

    # The downstream service: another process, another folder, only the server's URL.
    child = subprocess.run(
        [sys.executable, "-c", DOWNSTREAM, mlflow_server, json.dumps(_questions())],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "KERNELCAST_"))},
    )
    assert child.returncode == 0, child.stderr[-3000:]
    line = next(line for line in child.stdout.splitlines() if line.startswith("ANSWERS "))
    answers = json.loads(line.removeprefix("ANSWERS "))
    assert [a["question"] for a in answers] == [0, 1, 2, 3, 4]
    assert [a["kind"] for a in answers] == ["op", "op", "op", "source", "module"]
    assert [a["device"] for a in answers[:2]] == ["h100-sxm", "l4"] and answers[2][
        "device_name"
    ] == "Made-up GPU"
    for answer in answers:
        assert answer["duration_us"] > 0 and answer["model_version"] == f"runs:/{tabular.run_id}/model"
    for answer in answers[:3]:
        assert answer["roofline_us"] > 0 and answer["headroom"] > 0
        assert (
            answer["duration_us_lo"] <= answer["duration_us"] <= answer["duration_us_hi"]
        )  # tabular: intervals
        # the class is the bound's side (issue 34): latency when launch-bound
        assert answer["roofline_class"] == BOUNDS[answer["bound_pipe"]][0]
    assert json.loads(answers[4]["breakdown"])  # the module's top ops
