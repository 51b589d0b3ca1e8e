"""Stages that do not depend on each other run side by side in the pipeline flow, on real Prefect, DVC and
MLflow: a scratch DVC project where ``b`` and ``c`` both read ``a``'s output and ``d`` reads both. Each of
``b`` and ``c`` records when its command ran; their intervals must overlap, and ``d`` must start after both.
The pipeline's own graph (dvc.yaml) is checked too: static starts beside ingest, validate after it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kernelcast.settings import PROJECT_ROOT, Settings

pytestmark = pytest.mark.slow

SLEEP_S = 4  # each of b and c: long enough that running one after the other cannot overlap


def _stage(name: str, deps: list[str], body: str) -> str:
    deps_text = f"    deps: [{', '.join(deps)}]\n" if deps else ""
    return f'  {name}:\n    cmd: python3 -c "{body}"\n{deps_text}    outs: [{name}.txt]\n'


def _project(root: Path) -> None:
    root.mkdir(parents=True)
    timed = (
        "import time, pathlib; s = time.time(); time.sleep({sleep}); "
        "pathlib.Path('{name}.txt').write_text(f'{{s}} {{time.time()}}')"
    )
    text = "stages:\n" + "".join(
        [
            _stage("a", [], "import pathlib; pathlib.Path('a.txt').write_text('a')"),
            _stage("b", ["a.txt"], timed.format(sleep=SLEEP_S, name="b")),
            _stage("c", ["a.txt"], timed.format(sleep=SLEEP_S, name="c")),
            _stage("d", ["b.txt", "c.txt"], timed.format(sleep=0, name="d")),
        ]
    )
    (root / "dvc.yaml").write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([str(Path(sys.executable).with_name("dvc")), "init", "-q"], cwd=root, check=True)


def _interval(path: Path) -> tuple[float, float]:
    start, end = path.read_text().split()
    return float(start), float(end)


def test_independent_stages_run_side_by_side(
    kc_settings: Settings, prefect_harness: str, tmp_path: Path
) -> None:
    from flows.pipeline import pipeline_flow

    project = tmp_path / "project"
    _project(project)
    reports = pipeline_flow(None, str(project), push=False)
    assert sorted(r["stage"] for r in reports) == ["a", "b", "c", "d"]
    assert all(r["action"] == "ran" for r in reports), reports
    b, c, d = (_interval(project / f"{name}.txt") for name in "bcd")
    assert b[0] < c[1] and c[0] < b[1], f"b {b} and c {c} ran one after the other"
    assert d[0] >= max(b[1], c[1]), f"d {d} started before b {b} or c {c} ended"


def test_static_starts_beside_ingest_and_validate_after_it() -> None:
    from components.pipeline.graph import read_stages, ready_stages

    graph = {s.name: s for s in read_stages(PROJECT_ROOT / "dvc.yaml")}
    chosen = list(graph)
    # static reads the gpuFLOPBench/benchmark_hub sources itself (no ingest output): it starts with ingest
    assert graph["static"].upstream == ()
    assert ready_stages(chosen, graph, set(), set()) == ["ingest", "static"]
    assert ready_stages(chosen, graph, {"ingest"}, {"ingest", "static"}) == ["validate"]
    # features reads both validate's and static's outputs: not ready while static runs
    assert ready_stages(chosen, graph, {"ingest", "validate"}, {"ingest", "validate", "static"}) == []
    assert ready_stages(
        chosen, graph, {"ingest", "validate", "static"}, {"ingest", "validate", "static"}
    ) == ["features"]
    # a run of only some stages waits on none of the others
    assert ready_stages(["features", "train"], graph, set(), set()) == ["features"]


def test_a_failing_stage_lets_its_sibling_finish_and_starts_nothing_after(
    kc_settings: Settings, prefect_harness: str, tmp_path: Path
) -> None:
    from flows.pipeline import StageFailed, pipeline_flow

    project = tmp_path / "project"
    _project(project)
    text = (project / "dvc.yaml").read_text()
    broken = _stage("c", ["a.txt"], "import time; time.sleep(1); raise SystemExit(3)")
    start = text.index("  c:\n")
    (project / "dvc.yaml").write_text(text[:start] + broken + text[text.index("  d:\n") :])
    with pytest.raises(StageFailed, match=r"stage 'c' failed") as caught:
        pipeline_flow(None, str(project), push=False)
    assert caught.value.stage == "c"
    assert (project / "b.txt").is_file(), "the sibling b, already running, finishes"
    assert not (project / "d.txt").exists(), "nothing after the failure starts"
