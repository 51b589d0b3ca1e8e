"""The profile stage on this machine's CPU (the host backend): a run folder in the layout
``components/ingest/profiled.py`` reads (a CPU is not in the device catalog, so it is not ingested)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.config import PROJECT_ROOT


def test_profile_stage_writes_a_run_folder(tmp_path: Path) -> None:
    from components.profiling.stage import ProfileInputs, profile_stage

    out = tmp_path / "runs" / "cpu-run"
    result = profile_stage(
        ProfileInputs(out_dir=out, backend="host", suite="tiny", trials=2, cwd=PROJECT_ROOT)
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest == result.manifest and manifest["suite"] == "tiny" and manifest["ncu"] == []
    assert manifest["timing"] == [{"file": "host.jsonl", "run_id": "cpu-run-timing", "clock_mode": "host"}]
    rows = (out / "host.jsonl").read_text().splitlines()
    assert rows and all(json.loads(r)["device_name"] == manifest["device_name"] for r in rows)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backend": "rocm"}, "--backend 'rocm': choose one of"),
        ({"backend": "cuda_event"}, "no CUDA GPU on this machine"),
    ],
)
def test_profile_stage_refuses_what_cannot_run_here(tmp_path: Path, kwargs: dict, message: str) -> None:
    from components.profiling.stage import ProfileInputs, profile_stage

    torch = pytest.importorskip("torch")
    if kwargs["backend"] == "cuda_event" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match=message):
        profile_stage(ProfileInputs(out_dir=tmp_path / "run", **kwargs))
    assert not (tmp_path / "run").exists()


def test_profile_stage_never_overwrites_a_run(tmp_path: Path) -> None:
    from components.profiling.stage import ProfileInputs, profile_stage

    (tmp_path / "run").mkdir()
    with pytest.raises(ValueError, match="already exists"):
        profile_stage(ProfileInputs(out_dir=tmp_path / "run", backend="host"))


def test_profile_flow_task_is_the_profile_stage(tmp_path: Path) -> None:
    from components.profiling.stage import ProfileInputs
    from flows.profile import profile_task

    out = tmp_path / "flow-run"
    result = profile_task.fn(
        ProfileInputs(out_dir=out, backend="host", suite="tiny", trials=2, cwd=PROJECT_ROOT)
    )
    assert result.out_dir == out and (out / "manifest.json").is_file()
    assert result.manifest["timing"][0]["run_id"] == "flow-run-timing"
