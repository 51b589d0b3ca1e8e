"""The whole pipeline as one Prefect flow: each task reproduces one DVC stage, as soon as the stages it
reads from are done (stages that do not depend on each other run side by side).

The stage graph has ONE definition, ``dvc.yaml``: the stage list, their order and their outputs are
read from it (``components.pipeline.graph``), never listed here. DVC owns *what* is versioned and
whether a stage must rerun (its deps/params changed); Prefect owns *running* it (ordering, retries
on I/O, logs, the run history in the UI). Stages that parallelise dispatch their work to Ray
themselves (validation, features, training).

Reliability:
- a stage's command runs in a session of its own, stopped with the run (SIGINT/SIGTERM, a crash);
- a failing stage stops the chain (``StageFailed`` names it and the end of its output); DVC records
  a stage in ``dvc.lock`` only once its command succeeded and the stage functions write atomically,
  so nothing half-written is taken for done and a rerun redoes exactly the unfinished stages;
- one run per state folder (``components.pipeline.lock``);
- ``KERNELCAST_FAULT_AFTER_STAGE=<stage>`` kills the run (SIGKILL) right after that stage: the
  crash the resume test injects; with ``KERNELCAST_TEST_ONLY_HOLD_CRASH_UNTIL=<file>`` only once
  that file exists (the test's explicit event: a second run meets a live holder whatever the speed).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from prefect import flow, task
from prefect.tasks import exponential_backoff

from components.platform.config import PROJECT_ROOT, Settings
from flows.retry import transient_only

FAULT_ENV = "KERNELCAST_FAULT_AFTER_STAGE"
HOLD_CRASH_ENV = "KERNELCAST_TEST_ONLY_HOLD_CRASH_UNTIL"


class StageReport(TypedDict):
    stage: str
    action: str  # "ran" | "skipped" (DVC found its deps, params and outputs unchanged)
    seconds: float
    rows: int | None
    output_tail: str


class StageFailed(RuntimeError):
    """A DVC stage's command failed: the message names the stage, ``tail`` is the end of its output."""

    def __init__(self, message: str, stage: str = "", tail: str = "") -> None:
        super().__init__(message)
        self.stage = stage
        self.tail = tail

    def __reduce__(self) -> tuple[Any, ...]:  # Prefect may pickle a task's exception
        return (StageFailed, (str(self), self.stage, self.tail))


def _dvc() -> list[str]:
    """The dvc executable of this environment (the venv's, not whatever is first on PATH)."""
    local = Path(sys.executable).with_name("dvc")
    return [str(local)] if local.exists() else [shutil.which("dvc") or "dvc"]


def _stage_env(mlflow_run: str | None = None) -> dict[str, str]:
    """Stage commands (``kernelcast ...``) must resolve to this venv's entry point; ``mlflow_run`` is the
    run the flow opened for the stage (a stage that logs more resumes it)."""
    from components.registry.tracking import STAGE_ENV

    env = dict(os.environ)
    if mlflow_run:
        env[STAGE_ENV] = mlflow_run
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop(FAULT_ENV, None)
    env.pop(HOLD_CRASH_ENV, None)
    return env


def _action(output: str, stage: str) -> str:
    return "ran" if f"Running stage '{stage}'" in output else "skipped"


@task(name="dvc-repro", retries=0)
def reproduce_stage(
    stage: str,
    project_root: str,
    force: bool = False,
    outs: tuple[str, ...] = (),
    mlflow_run: str | None = None,
) -> StageReport:
    """``dvc repro --single-item STAGE``: runs the stage only if its deps or params changed.

    Not retried: a stage that failed on its input fails again; one that failed on I/O is rerun by
    rerunning the pipeline, which redoes only that stage and those after it.
    """
    from components.pipeline.progress import output_rows
    from components.platform.runtime import run_stopping_with_us

    start = time.monotonic()
    # --wait-for-lock: a stage running beside this one may hold DVC's repo lock for a moment (DVC holds it
    # while it checks and records a stage, not while the command runs).
    command = [*_dvc(), "--wait-for-lock", "repro", "--single-item", stage] + (["--force"] if force else [])
    result = run_stopping_with_us(command, cwd=project_root, env=_stage_env(mlflow_run))
    tail = (result.stdout or "")[-4000:]
    if result.returncode != 0:
        raise StageFailed(
            f"stage {stage!r} failed (exit {result.returncode}); later stages not run; fix it "
            "and rerun `kernelcast pipeline` (finished stages are skipped)",
            stage,
            tail,
        )
    return {
        "stage": stage,
        "action": _action(result.stdout or "", stage),
        "seconds": round(time.monotonic() - start, 1),
        "rows": output_rows(Path(project_root), outs),
        "output_tail": tail[-800:],
    }


@task(
    name="dvc-push",
    retries=3,
    retry_delay_seconds=exponential_backoff(backoff_factor=5),
    retry_jitter_factor=0.5,
    retry_condition_fn=transient_only,
)
def push_outputs(project_root: str, remote_url: str | None = None) -> str:
    """Push every stage output to the DVC remote (pure I/O: retried with backoff): the default one
    of ``.dvc/config``, or ``remote_url`` (``KERNELCAST_DVC_REMOTE_URL``, e.g. the team's
    ``s3://kernelcast-dvc/cache``) registered as remote ``kernelcast`` in the untracked
    ``.dvc/config.local``."""
    from components.platform.runtime import run_stopping_with_us

    target: list[str] = []
    if remote_url:
        add = [*_dvc(), "remote", "add", "--local", "--force", "kernelcast", remote_url]
        added = run_stopping_with_us(add, cwd=project_root, env=_stage_env())
        if added.returncode != 0:
            why = added.stdout[-1000:]
            raise ValueError(f"KERNELCAST_DVC_REMOTE_URL={remote_url}: dvc refused it:\n{why}")
        target = ["-r", "kernelcast"]
    result = run_stopping_with_us([*_dvc(), "push", *target], cwd=project_root, env=_stage_env())
    if result.returncode != 0:
        raise OSError(f"dvc push failed:\n{(result.stdout or '')[-2000:]}")
    lines = (result.stdout or "").strip().splitlines()
    return lines[-1] if lines else "pushed"


def _inject_fault(stage: str) -> None:
    if os.environ.get(FAULT_ENV) == stage:
        release = os.environ.get(HOLD_CRASH_ENV)
        while release and not Path(release).exists():  # tests only: crash when the test says so
            time.sleep(0.05)
        print(f"{FAULT_ENV}={stage}: killing this run (SIGKILL) to simulate a crash", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


@flow(name="kernelcast-pipeline", log_prints=False)
def pipeline_flow(
    stages: list[str] | None = None,
    project_root: str | None = None,
    force: bool = False,
    push: bool = True,
    lock: bool = True,
) -> list[StageReport]:
    """Reproduce ``stages`` (default: every stage of dvc.yaml), each once the stages it reads from are
    done (independent ones side by side); stop at the first failure (later stages need its outputs).
    ``lock`` takes the state folder's lock (a deployment run); ``run_pipeline`` holds it already."""
    from contextlib import nullcontext

    from components.pipeline.graph import read_stages, select_stages
    from components.pipeline.lock import pipeline_lock
    from components.pipeline.progress import Progress
    from components.platform.config import get_settings

    root = Path(project_root) if project_root else PROJECT_ROOT
    graph = {s.name: s for s in read_stages(root / "dvc.yaml")}
    chosen = select_stages(root / "dvc.yaml", only=stages) if stages else list(graph)
    progress = Progress(total=len(chosen), echo=lambda line: print(line, flush=True))
    reports: list[StageReport] = []
    settings = get_settings()
    with pipeline_lock(settings.state_dir, "kernelcast-pipeline flow") if lock else nullcontext():
        parent = _open_parent_run(settings, chosen, force)
        failed = True
        try:
            _run_stages(settings, parent, chosen, graph, root, force, progress, reports)
            if push:
                print(f"dvc push: {push_outputs(str(root), settings.dvc_remote_url)}", flush=True)
            failed = False
        finally:
            _close_parent_run(settings, parent, reports, chosen, root, failed)
    return reports


def _run_stages(
    settings: Settings,
    parent: str,
    chosen: list[str],
    graph: dict[str, Any],
    root: Path,
    force: bool,
    progress: Any,
    reports: list[StageReport],
) -> None:
    """Run ``chosen`` as the graph allows: each stage starts once the stages it reads from are done, so
    independent ones (static beside ingest) run side by side as Prefect task runs. A failure starts
    nothing more; the stages already running finish (their outputs are whole, DVC records them), then
    the first failure is raised."""
    from concurrent.futures import Future, ThreadPoolExecutor

    from prefect.context import FlowRunContext

    from components.pipeline.graph import ready_stages
    from components.registry.tracking import close_stage_run, open_stage_run

    # In a flow run the stages are Prefect task runs (its thread pool); called bare (``pipeline_flow.fn``)
    # the same function runs in threads of our own.
    in_flow = FlowRunContext.get() is not None
    pool = None if in_flow else ThreadPoolExecutor(max_workers=len(chosen) or 1)
    running: dict[str, tuple[Any, str]] = {}  # stage -> (future, its MLflow run)
    done: set[str] = set()
    failure: BaseException | None = None
    while True:
        if failure is None:
            for stage in ready_stages(chosen, graph, done, set(running) | done):
                progress.start(stage)
                run_id = open_stage_run(settings, parent, stage)
                args = (stage, str(root), force, graph[stage].outs, run_id)
                future = pool.submit(reproduce_stage.fn, *args) if pool else reproduce_stage.submit(*args)
                running[stage] = (future, run_id)
        if not running:
            break
        finished = [
            s for s, (f, _) in running.items() if (f.done() if isinstance(f, Future) else f.state.is_final())
        ]
        if not finished:
            time.sleep(0.2)
            continue
        for stage in finished:
            future, run_id = running.pop(stage)
            try:
                report = future.result()
            except BaseException as exc:
                close_stage_run(settings, run_id, stage, root, ran=True, ok=False)
                failure = failure or exc
                continue
            close_stage_run(settings, run_id, stage, root, ran=report["action"] == "ran", ok=True)
            progress.finish(stage, report["action"], report["seconds"], report["rows"])
            reports.append(report)
            done.add(stage)
            _inject_fault(stage)
    if pool is not None:
        pool.shutdown()
    # Callers read the reports in dvc.yaml's order, whichever of two side-by-side stages finished first.
    reports.sort(key=lambda r: chosen.index(r["stage"]))
    if failure is not None:
        raise failure


def _open_parent_run(settings: Settings, stages: list[str], force: bool) -> str:
    """The pipeline's parent MLflow run (every params.yaml key as a param); its id goes to the stage
    commands through the environment (``components.registry.tracking.PARENT_ENV``)."""
    from components.platform.config import load_params
    from components.registry.tracking import start_pipeline_run

    params = load_params(settings.params_file) if settings.params_file.is_file() else {}
    run_id = start_pipeline_run(
        settings,
        f"pipeline (running): {', '.join(stages)}",
        params,
        {"kc.stages": ",".join(stages), "kc.force": str(force).lower()},
    )
    print(f"MLflow parent run: {run_id}", flush=True)
    return run_id


def _close_parent_run(
    settings: Settings, run_id: str, reports: list[StageReport], stages: list[str], root: Path, failed: bool
) -> None:
    """Name the parent run by what the pipeline did (stages run and skipped, the verdict) and close it."""
    from components.registry.tracking import end_pipeline_run

    ran = [r["stage"] for r in reports if r["action"] == "ran"]
    skipped = [r["stage"] for r in reports if r["action"] == "skipped"]
    finished = {r["stage"] for r in reports}
    unfinished = [s for s in stages if s not in finished]  # side by side, the failed one need not be next
    outcome = f"FAILED at {unfinished[0]}" if failed and unfinished else ""
    verdict_line = verdict(root, settings)[0].removeprefix("verdict: ") if "register" in ran else ""
    what = "; ".join(
        part
        for part in (
            f"ran {', '.join(ran)}" if ran else "nothing to rerun",
            f"skipped {len(skipped)} up to date" if skipped else "",
            outcome,
            verdict_line,
        )
        if part
    )
    end_pipeline_run(
        settings,
        run_id,
        ok=not failed,
        name=f"pipeline: {what}"[:250],
        tags={
            "kc.ran": ",".join(ran),
            "kc.skipped": ",".join(skipped),
            **{f"kc.seconds.{r['stage']}": str(r["seconds"]) for r in reports},
        },
    )


def verdict(project_root: Path, settings: Settings, since: float | None = None) -> list[str]:
    """The closing lines: the promotion outcome and where to look (MLflow UI, reports). A decision
    older than ``since`` (a ``time.time()``: this run's start) is labelled as an earlier run's."""
    import json

    from components.pipeline.graph import read_stages

    lines: list[str] = []
    reports = [out for s in read_stages(project_root / "dvc.yaml") for out in s.outs if out.endswith(".json")]
    promotion = next((project_root / r for r in reports if Path(r).name == "promotion.json"), None)
    if promotion is not None and promotion.is_file():
        outcome = json.loads(promotion.read_text())
        version = f"{outcome.get('model_name')} v{outcome.get('version')}"
        if since is not None and promotion.stat().st_mtime < since:
            version += " (decided by an earlier run; register was up to date)"
        if outcome.get("promoted"):
            lines.append(f"verdict: {version} PROMOTED to champion ({outcome.get('reason')})")
        else:
            failures = "; ".join(str(f) for f in outcome.get("failures") or []) or outcome.get("reason")
            champion = f"v{outcome['champion']}" if outcome.get("champion") else "none yet"
            lines.append(f"verdict: {version} stays challenger (champion: {champion}); failed: {failures}")
    else:
        lines.append("verdict: no promotion report (the register stage did not run)")
    uri = settings.tracking_uri()
    ui = (
        uri if uri.startswith("http") else f"http://127.0.0.1:5000 after `kernelcast mlflow-ui` (store {uri})"
    )
    lines.append(f"MLflow UI: {ui}")
    lines.append("reports: " + ", ".join(str(project_root / r) for r in reports))
    return lines


def run_pipeline(
    settings: Settings,
    stages: list[str],
    force: bool = False,
    push: bool = True,
    project_root: Path = PROJECT_ROOT,
    echo: Callable[[str], None] = print,
) -> list[StageReport]:
    """Take the state folder's lock, start (or reuse) the Prefect API, then run the flow.

    SIGTERM/SIGINT stop everything this run started: the flow's stage process tree and the
    Prefect server, each by its process group.
    """
    from components.pipeline.lock import pipeline_lock
    from components.platform.runtime import stop_on_signals
    from flows.runtime import prefect_server

    command = " ".join(["kernelcast pipeline", *sys.argv[2:]])
    with stop_on_signals(), pipeline_lock(settings.state_dir, command):
        echo(f"pipeline: {len(stages)} stages from {project_root / 'dvc.yaml'} ({', '.join(stages)})")
        with prefect_server(settings) as api_url:
            echo(f"Prefect API: {api_url}")
            reports = pipeline_flow(stages, str(project_root), force, push, lock=False)
    return reports
