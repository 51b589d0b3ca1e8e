"""The registry contract on a real sqlite MLflow store: the question-in/answer-out pyfunc, and promotion
through the gate (pass, fail, dry run, rollback, concurrent promoters in separate processes,
unreachable registry).

The model is the training-free roofline, logged once; each "candidate" is one more registered version
of it, judged on a gate report written here (the real evaluate -> promote cycle, on a real `mlflow
server`, is tests/integration/test_registry_service.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from components.platform.config import PROJECT_ROOT
from components.registry import mlflow_registry as reg

GATE = {
    "tolerance": 0.02,
    "splits": {"unseen-kernel": {"max_runtime_mape": 0.35, "min_within_10": 0.30}},
    "guarded": ["unseen-kernel/runtime_mape", "unseen-kernel/within_10"],
}
OP_QUESTIONS = pd.DataFrame(
    [
        {
            "device": "H100",
            "dtype": "fp16",
            "op": "gemm",
            "shape": json.dumps({"M": 4096, "N": 4096, "K": 4096}),
        },
        {"device": "A100", "dtype": "fp32", "op": "add", "shape": json.dumps({"N": 1 << 24})},
    ]
)


@dataclass
class Store:
    uri: str
    root: Path
    model_uri: str
    params_file: Path

    def version(self, name: str) -> str:
        """One more registered version (the same logged roofline model)."""
        return reg.register(self.model_uri, name, self.uri)

    def report(self, name: str, version: str, mape: float, within_10: float, complete: bool = True) -> Path:
        path = self.root / f"gate-{name}-{version}.json"
        splits = {
            "unseen-kernel": {
                "status": "ok",
                "mode": "artifact",
                "metrics": {"runtime_mape": mape, "within_10": within_10},
            }
        }
        path.write_text(
            json.dumps(
                {
                    "kind": "kernelcast-gate-report",
                    "model_name": name,
                    "model_version": version,
                    "complete": complete,
                    "splits": splits,
                }
            )
        )
        return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    from components.models.roofline import RooflinePredictor

    root = tmp_path_factory.mktemp("registry")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    patch = pytest.MonkeyPatch()
    patch.setenv("KERNELCAST_HOME", str(root / "home"))
    patch.setenv("MLFLOW_TRACKING_URI", uri)
    params = yaml.safe_load((PROJECT_ROOT / "params.yaml").read_text())
    params["register"] = GATE
    params_file = root / "params.yaml"
    params_file.write_text(yaml.safe_dump(params))
    patch.setenv("KERNELCAST_PARAMS_FILE", str(params_file))
    try:
        RooflinePredictor().save(root / "roofline")
        reg.ensure_experiment("kernelcast-test", (root / "artifacts").as_uri(), uri)
        model_uri = reg.log_predictor(
            root / "roofline",
            {},
            {"family": "roofline"},
            {"family": "roofline"},
            experiment="kernelcast-test",
            tracking_uri=uri,
        )
        yield Store(uri, root, model_uri, params_file)
    finally:
        patch.undo()


def _promote(*args: str) -> tuple[int, str]:
    from kernelcast.cli import app

    result = CliRunner().invoke(app, ["promote", *args])
    return result.exit_code, result.output


@pytest.mark.slow
def test_registered_model_answers_questions_under_its_signature(store: Store) -> None:
    from mlflow.exceptions import MlflowException

    import mlflow
    from components.serving.query import QueryError

    version = store.version("kc-contract")
    mlflow.set_tracking_uri(store.uri)
    model = mlflow.pyfunc.load_model(f"models:/kc-contract/{version}")
    inputs = {spec.name: (spec.type.name, spec.required) for spec in model.metadata.get_input_schema().inputs}
    # the contract as written in docs/answers.md, spelled out here (not read from the code it checks)
    contract = ("device", "device_spec", "dtype", "op", "shape", "source", "language", "launch", "module",
                "deployment")  # fmt: skip
    assert inputs == {name: ("string", False) for name in contract}
    answers = model.predict(OP_QUESTIONS)
    assert answers["question"].tolist() == [0, 1] and answers["kind"].eq("op").all()
    assert answers.loc[0, "device"] == "h100-sxm" and answers.loc[0, "roofline_class"] == "compute"
    assert answers.loc[1, "roofline_class"] == "bandwidth" and answers["duration_us"].gt(0).all()
    assert answers["model_version"].str.startswith("runs:/").all()
    # The roofline runs AT its ceiling: no headroom by construction.
    assert answers["headroom"].tolist() == pytest.approx([1.0, 1.0])

    # Enforced: a column of the wrong type, and an old caller's feature table, are errors -- not answers.
    with pytest.raises(MlflowException, match="shape"):
        model.predict(OP_QUESTIONS.assign(shape=[1, 2]))
    with pytest.raises(QueryError, match="none of the question columns"):
        model.predict(pd.DataFrame({"f_flops": [1e9], "dev_dram_gbps": [3350.0]}))
    with pytest.raises(QueryError, match="question 0"):
        model.predict(OP_QUESTIONS.head(1).assign(op="gemmm"))
    # The deployment form through the same signature: an LLM deployment answered by the composition.
    deployment = json.dumps({"model": "Llama-3.1-8B", "isl": 1024, "osl": 128, "concurrency": 8})
    deployed = model.predict(pd.DataFrame([{"device": "H200", "deployment": deployment}]))
    assert deployed.loc[0, "kind"] == "deployment" and deployed.loc[0, "ttft_ms"] > 0
    assert deployed.loc[0, "duration_us"] > deployed.loc[0, "ttft_ms"] * 1e3


@pytest.mark.slow
def test_fail_pass_dry_run_and_rollback_through_the_cli(store: Store) -> None:
    name = "kc-cli"
    v1, v2, v3, v4 = (store.version(name) for _ in range(4))

    # No evaluation report at all: never promoted.
    code, out = _promote("--model-name", name, "--version", v1)
    assert code == 1 and "FAIL  evaluation report present" in out
    assert reg.alias_version(name, reg.CHAMPION, store.uri) is None

    code, out = _promote(
        "--model-name", name, "--version", v1, "--eval-report", str(store.report(name, v1, 0.25, 0.4))
    )
    assert code == 0, out
    assert "PASS  unseen-kernel/runtime_mape <= 0.35: 0.25" in out and f"v{v1}: champion" in out
    # the new champion's local copy is made now (serving.prepare), where its first question reads it
    from components.serving.models import local_copy

    copy = local_copy(name, v1, store.uri)
    assert f"{name} v{v1}: ready to answer from {copy}" in out and (copy / "predictor.json").is_file()

    # Fails a threshold: stays challenger, the decision and the failing rule are on the version.
    code, out = _promote(
        "--model-name", name, "--version", v2, "--eval-report", str(store.report(name, v2, 0.2, 0.1))
    )
    assert code == 1 and "FAIL  unseen-kernel/within_10 >= 0.3: 0.1" in out
    assert reg.alias_version(name, reg.CHAMPION, store.uri) == v1
    assert reg.alias_version(name, reg.CHALLENGER, store.uri) == v2
    tags = reg.mlflow_client(store.uri).get_model_version(name, v2).tags
    assert tags["kc.promotion"] == "rejected" and "within_10 >= 0.3: 0.1" in tags["kc.promotion.rules"]

    # A report for another version judges nothing.
    code, out = _promote(
        "--model-name", name, "--version", v3, "--eval-report", str(store.report(name, v1, 0.1, 0.9))
    )
    assert code == 1 and f"FAIL  report is for {name} v{v3}: {name} v{v1}" in out

    tags = reg.mlflow_client(store.uri).get_model_version(name, v3).tags
    assert tags["kc.promotion"] == "rejected" and not reg.version_metrics(
        name, v3, store.uri
    )  # not its figures

    # Dry run: every rule printed, nothing moved, nothing recorded.
    good = str(store.report(name, v3, 0.15, 0.6))
    code, out = _promote("--model-name", name, "--version", v3, "--eval-report", good, "--dry-run")
    assert code == 0 and "DRY RUN, would become champion" in out and f"champion v{v1}'s 0.25 + 0.02" in out
    assert reg.alias_version(name, reg.CHAMPION, store.uri) == v1
    assert reg.mlflow_client(store.uri).get_model_version(name, v3).tags == tags

    code, out = _promote("--model-name", name, "--version", v3, "--eval-report", good)
    assert code == 0 and reg.alias_version(name, reg.CHAMPION, store.uri) == v3
    assert reg.alias_version(name, reg.PREVIOUS_CHAMPION, store.uri) == v1
    assert reg.version_metrics(name, v3, store.uri) == {
        "unseen-kernel/runtime_mape": 0.15,
        "unseen-kernel/within_10": 0.6,
    }

    # Worse than the champion by more than the tolerance on a guarded metric, though within the thresholds.
    code, out = _promote(
        "--model-name", name, "--version", v4, "--eval-report", str(store.report(name, v4, 0.2, 0.6))
    )
    assert code == 1 and f"FAIL  unseen-kernel/runtime_mape <= champion v{v3}'s 0.15 + 0.02: 0.2" in out

    code, out = _promote("--model-name", name, "--rollback")
    assert code == 0 and f"champion -> v{v1}" in out and f"{name} v{v1}: ready to answer from" in out
    assert reg.alias_version(name, reg.CHAMPION, store.uri) == v1
    assert (
        reg.mlflow_client(store.uri).get_model_version(name, v3).tags["kc.promotion"]
        == f"rolled back to v{v1}"
    )
    code, out = _promote("--model-name", name, "--rollback")  # once only: no flip-flopping
    assert code == 2 and "no 'previous-champion' alias" in out
    code, out = _promote("--model-name", name, "--version", "99")
    assert code == 2 and "has no version 99" in out


CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from components.platform.config import load_params
    from components.registry.promote import PromoteInputs, gate_policy, promote_stage
    uri, name, version, report, barrier, locks = sys.argv[1:7]
    policy = gate_policy(load_params())
    Path(barrier, f"ready-{version}").touch()
    while not Path(barrier, "go").exists():  # every promoter starts judging at the same moment
        time.sleep(0.005)
    result = promote_stage(PromoteInputs(tracking_uri=uri, model_name=name, version=version,
                                         eval_report=Path(report), lock_dir=Path(locks)), policy)
    print("RESULT", version, result.promoted, result.champion)
""")


@pytest.mark.slow
def test_concurrent_promotions_in_separate_processes_have_one_winner(store: Store, tmp_path: Path) -> None:
    """Two candidates that each beat the champion but each lose to the other (v2 better on MAPE,
    v3 on within-10, each worse than the other by more than the tolerance): judged one after the
    other, exactly one can win; without the lock both would be judged against v1 and both move it.

    Both promoters are released together once both are ready (an explicit barrier, not a start time
    8 s ahead that a busy machine's imports can overrun: then they would not overlap, and the test
    would pass without testing the lock)."""
    name = "kc-race"
    v1, v2, v3 = (store.version(name) for _ in range(3))
    reg.mlflow_client(store.uri).set_registered_model_alias(name, reg.CHAMPION, v1)
    client = reg.mlflow_client(store.uri)
    for key, value in (("unseen-kernel/runtime_mape", 0.30), ("unseen-kernel/within_10", 0.40)):
        client.set_model_version_tag(name, v1, f"{reg.METRIC_TAG_PREFIX}{key}", str(value))
    reports = {v2: store.report(name, v2, 0.20, 0.40), v3: store.report(name, v3, 0.30, 0.60)}
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD,
                store.uri,
                name,
                v,
                str(reports[v]),
                str(barrier),
                str(store.root / "locks"),
            ],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for v in (v2, v3)
    ]
    hang = time.monotonic() + 600  # only a hung child reaches this; it is no part of the outcome
    try:
        while (
            not all((barrier / f"ready-{v}").exists() for v in (v2, v3))
            and all(p.poll() is None for p in procs)
            and time.monotonic() < hang
        ):
            time.sleep(0.05)
        both_ready = all((barrier / f"ready-{v}").exists() for v in (v2, v3))
    finally:
        (barrier / "go").touch()  # released whatever happened: no child is left waiting
    outputs = [p.communicate(timeout=600) for p in procs]
    assert both_ready, [err[-2000:] for _, err in outputs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outputs]
    results = [line.split() for out, _ in outputs for line in out.splitlines() if line.startswith("RESULT")]
    winners = [r[1] for r in results if r[2] == "True"]
    assert len(results) == 2 and len(winners) == 1, results
    winner, loser = winners[0], ({v2, v3} - set(winners)).pop()
    assert reg.alias_version(name, reg.CHAMPION, store.uri) == winner
    assert reg.alias_version(name, reg.PREVIOUS_CHAMPION, store.uri) == v1
    tags = client.get_model_version(name, loser).tags
    # The loser was judged against the winner (the lock serialised them), not against v1.
    assert tags["kc.promotion"].startswith("rejected") and tags["kc.promotion.champion_before"] == winner


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_registry_is_one_line_naming_the_uri(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    # MLflow's HTTP client retries with back-off for minutes; failing fast means it is never called.
    # Counted on the real client (every call still goes through), not timed: a busy machine is slow.
    import requests

    mlflow_calls: list[str] = []
    real_request = requests.Session.request

    def counted(self, method, url, *args, **kwargs):
        mlflow_calls.append(f"{method} {url}")
        return real_request(self, method, url, *args, **kwargs)

    monkeypatch.setattr(requests.Session, "request", counted)
    for args in (["--version", "1"], ["--rollback"], ["--version", "1", "--dry-run"]):
        code, out = _promote(*args)
        lines = [line for line in out.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1, out
        assert lines[0].startswith(f"error: MLflow registry at {uri} cannot be reached"), out
    from kernelcast.cli import app

    gate = CliRunner().invoke(
        app, ["evaluate", "--gate", "--model", "roofline", "--out", str(tmp_path / "g.json")]
    )
    assert gate.exit_code == 2 and gate.output.strip() == (
        f"error: MLflow registry at {uri} cannot be reached ([Errno 111] Connection refused)"
    ), gate.output
    assert not [call for call in mlflow_calls if uri in call], mlflow_calls  # no minutes of HTTP retries
    missing = f"sqlite:///{tmp_path / 'no' / 'such' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", missing)
    code, out = _promote("--version", "1")
    assert code == 2 and f"MLflow registry at {missing} cannot be reached" in out
