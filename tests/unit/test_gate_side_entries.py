"""The gate's op-engine splits run in a spawned process beside the candidate's splits: the report still has
every split, in the order asked, and an op-engine split that cannot run (no AIConfigurator/aiter tables in the
datasets folder) is that split's error entry -- computed by the side process, which inherits the caller's
environment (its KERNELCAST_DATASETS_DIR), never a crash of the gate."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.unit.test_evaluate import ScaledPredictor, _table


def _gate(splits: tuple[str, ...], lines: list[str]) -> dict:
    """The gate report of a stub candidate trained on unseen-kernel over ``splits``; progress in ``lines``."""
    from components.evaluation.report import gate_report
    from components.registry.gate import EvaluationCaps

    caps = EvaluationCaps(max_train_rows=None, max_test_rows=6, max_gpu_folds=1, min_gpu_rows=1)
    table = _table(40).assign(upstream_file="x", program="p")
    return gate_report(
        ScaledPredictor(set()),
        table,
        splits,
        caps,
        model="stub",
        trained_split="unseen-kernel",
        progress=lines.append,
    )


def test_op_engine_split_runs_beside_and_keeps_its_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "datasets"
    empty.mkdir()
    monkeypatch.setenv("KERNELCAST_DATASETS_DIR", str(empty))
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    lines: list[str] = []
    splits = ("aiconfigurator-unseen-gpu", "unseen-kernel")
    report = _gate(splits, lines)
    assert tuple(report["splits"]) == splits  # the order asked, though the op-engine split finished last
    side = report["splits"]["aiconfigurator-unseen-gpu"]
    assert side["status"] == "error" and "no measured store" in side["note"], side
    assert str(empty) in side["note"]  # the side process read the caller's environment
    assert report["splits"]["unseen-kernel"]["status"] == "ok" and report["complete"] is False
    assert [line.split(":")[0] for line in lines] == ["unseen-kernel", "aiconfigurator-unseen-gpu"]
    assert os.environ["KERNELCAST_DATASETS_DIR"] == str(empty)
    json.dumps(report, allow_nan=False)


def test_serving_splits_run_in_the_side_process_on_the_candidates_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A serving split reads only the candidate's op engine: the side process builds it (this process never
    does) and scores the split after the op engine's splits; its entry keeps its place in the report."""
    from components.opmodel import loading

    empty = tmp_path / "datasets"
    empty.mkdir()
    monkeypatch.setenv("KERNELCAST_DATASETS_DIR", str(empty))
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(loading, "_CACHE", {})
    lines: list[str] = []
    splits = ("llm-serving-pipeweave", "aiconfigurator-unseen-shape", "unseen-kernel")
    report = _gate(splits, lines)
    assert tuple(report["splits"]) == splits
    assert loading._CACHE == {}, "the serving split's engine was built in this process, not the side one"
    from components.evaluation.report import _serving_entry

    # the entry the candidate's own process computes (no serving runs in the empty datasets folder)
    assert report["splits"]["llm-serving-pipeweave"] == _serving_entry(
        "llm-serving-pipeweave", ScaledPredictor(set())
    )
    assert loading._CACHE, "computed here, the entry builds its engine in this process"
    assert [line.split(":")[0] for line in lines] == [
        "unseen-kernel",
        "aiconfigurator-unseen-shape",
        "llm-serving-pipeweave",
    ]


def test_op_engine_and_serving_splits_run_in_two_side_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The two side chains (op engine's splits, serving splits) each get a spawned process of their own, so
    neither waits for the other; each entry is the one the side process computed alone before."""
    from components.evaluation.report import _opmodel_entry, _SideEntries

    empty = tmp_path / "datasets"
    empty.mkdir()
    monkeypatch.setenv("KERNELCAST_DATASETS_DIR", str(empty))
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    side = _SideEntries(
        ["aiconfigurator-unseen-shape"], None, ["llm-serving-pipeweave"], ScaledPredictor(set())
    )
    workers = [pid for pool in side._pools for pid in pool._processes]
    entries = side.results()
    assert len(workers) == 2 and len(set(workers)) == 2 and os.getpid() not in workers
    assert list(entries) == ["aiconfigurator-unseen-shape", "llm-serving-pipeweave"]
    assert entries["aiconfigurator-unseen-shape"] == _opmodel_entry("aiconfigurator-unseen-shape", None)
    assert entries["llm-serving-pipeweave"]["status"] == "error", entries  # no serving runs in the folder
    only = _SideEntries(["aiconfigurator-unseen-shape"], None)
    assert len(only._pools) == 1  # no serving split: no second process
    only.results()
