"""The registered champion answers every question form from its artifact alone: loaded with
``mlflow.pyfunc.load_model("models:/<name>@champion")`` in a separate process whose KERNELCAST_HOME is an
empty folder, it answers an op question with the op engine it carries and a deployment question with the
serving engines' constants it carries (``components.registry.carried``).

Real parts: a sqlite MLflow store, a tabular predictor trained here on our own H100 measurements
(profiled-data/), an op engine over a one-row measured store of a known GEMM time (so the measured tier's
answer is known), a calibration ``kernelcast calibrate`` would have stored in the training state folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from components.platform.config import PROJECT_ROOT
from tests.integration.registered import CARRYING_CORRECTION as CORRECTION
from tests.integration.registered import CARRYING_GEMM as GEMM
from tests.integration.registered import CARRYING_MEASURED_US as MEASURED_US
from tests.integration.registered import CarryingChampion

pytestmark = pytest.mark.slow


# Run in a fresh process: only MLflow's store and an EMPTY state folder; prints the answers as JSON.
SERVICE = textwrap.dedent(
    """
    import json, sys
    import mlflow.pyfunc
    import pandas as pd

    model = mlflow.pyfunc.load_model("models:/%s@champion")
    questions = pd.DataFrame([
        {"device": "H100", "dtype": "fp16", "op": "gemm", "shape": json.dumps(%s)},
        {"device": "H100", "deployment": json.dumps(
            {"model": "Llama-3.1-8B", "isl": 1024, "osl": 128, "concurrency": 8, "framework": "sglang"})},
        {"device": "H100", "dtype": "fp32", "op": "add", "shape": json.dumps({"N": 1 << 26})},
    ])
    answers = model.predict(questions)
    predictor = model.unwrap_python_model().predictor
    constants = predictor.deployment_constants.as_posix()
    del predictor.corrections_home  # the same model without the corrections it carries
    plain = model.predict(questions.tail(1))
    print(json.dumps({"artifacts": constants, "answers": json.loads(answers.to_json(orient="records")),
                      "uncorrected_us": float(plain["duration_us"].iloc[0])}))
    """
)


def test_the_champion_answers_op_and_deployment_questions_with_no_state_folder(
    tmp_path: Path, carrying_champion: CarryingChampion
) -> None:
    uri = carrying_champion.uri
    manifest = json.loads((carrying_champion.root / "model" / "carried.json").read_text())
    assert manifest["calibrations"]["calibrated_gpus"] == ["a100-sxm4"]
    assert manifest["calibrations"]["corrected_gpus"] == ["h100-sxm"]
    assert manifest["deployment_constants"]["file"] == "deployments/constants.json"

    empty = tmp_path / "service-home"
    empty.mkdir()
    env = {
        **os.environ,
        "KERNELCAST_HOME": str(empty),
        "MLFLOW_TRACKING_URI": uri,
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "PYTHONPATH": str(PROJECT_ROOT),
    }
    script = SERVICE % (carrying_champion.name, json.dumps(GEMM))
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    op, deployment, classic = result["answers"]
    carried = Path(result["artifacts"])

    # The op question: the measured tier of the op engine inside the artifact, verbatim.
    assert op["kind"] == "op" and op["device"] == "h100-sxm"
    assert op["duration_us"] == pytest.approx(MEASURED_US)
    assert op["duration_us"] >= op["roofline_us"]

    # A classic op answered by the tabular predictor: the H100 correction the artifact carries applied.
    assert classic["kind"] == "op" and classic["duration_us"] >= classic["roofline_us"]
    assert classic["duration_us"] == pytest.approx(CORRECTION * result["uncorrected_us"], rel=1e-6)

    # The deployment question: the engine it names, with constants read from the artifact's copy.
    assert deployment["kind"] == "deployment" and deployment["device"] == "h100-sxm"
    assert deployment["ttft_ms"] > 0 and deployment["duration_us"] > deployment["ttft_ms"] * 1e3
    engine = json.loads(deployment["breakdown"])["deployment"]["engine"]
    assert engine["name"] == "sglang"
    assert engine["provenance"].startswith("constants fitted on ")
    assert engine["provenance"].endswith(f"read from {carried}")
    assert carried.is_file() and not carried.is_relative_to(
        PROJECT_ROOT
    )  # MLflow's download, not the package
    assert "predates" not in deployment["note"]
    # the service's state folder holds no model, op engine, store or calibration it could have answered from
    left = sorted(str(p.relative_to(empty)) for p in empty.rglob("*"))
    assert not [p for p in left if p.split("/")[0] in ("models", "opmodel", "data", "calibration")], left


def test_the_cli_answers_a_deployment_with_the_champions_own_engine_and_constants(
    tmp_path: Path, carrying_champion: CarryingChampion
) -> None:
    """`kernelcast predict --llm` and `rank --llm` read what `--model` carries, not the state folder's or
    the package's (they ignored `--model` before): the engine's constants come from MLflow's download."""
    empty = tmp_path / "cli-home"
    empty.mkdir()
    env = {
        **os.environ,
        "KERNELCAST_HOME": str(empty),
        "MLFLOW_TRACKING_URI": carrying_champion.uri,
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "PYTHONPATH": str(PROJECT_ROOT),
    }
    model = f"models:/{carrying_champion.name}@champion"
    question = ["--llm", "Llama-3.1-8B", "--isl", "1024", "--osl", "128", "--framework", "sglang", "--json"]

    def cli(*args: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-m", "kernelcast.cli", *args, *question, "--model", model],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    answer = cli("predict", "--device", "H100")["deployments"][0]
    provenance = answer["deployment"]["engine"]["provenance"]
    downloaded = Path(provenance.rsplit("read from ", 1)[1])
    assert downloaded.is_relative_to(empty / "serving") and downloaded.is_file()
    assert not [n for n in answer["notes"] if "predates" in n]

    ranking = cli("rank", "--device", "H100", "--device", "A100")["ranking"]
    assert {r["device"].split("-")[0] for r in ranking} == {"h100", "a100"}
    h100_tp1 = next(r for r in ranking if r["device"] == "h100-sxm" and r["tp"] == 1)
    assert h100_tp1["tpot_ms"] == pytest.approx(answer["tpot_ms"], rel=0.05)  # one model behind both

    refused = subprocess.run(
        [sys.executable, "-m", "kernelcast.cli", "predict", "--device", "H100", *question, "--model", "nope"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert refused.returncode == 2 and "'nope'" in refused.stderr and "Traceback" not in refused.stderr
