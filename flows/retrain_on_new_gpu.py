"""Prefect flow: a GPU joined the fleet -> profile it, validate, retrain, evaluate, promote.

1. The fleet (Ray nodes by accelerator type, or the operator's list) against the catalog and the
   devices that have measurements (``components.pipeline.fleet``).
2. Each fleet GPU without measurements and with a node of its type is profiled there
   (``flows.profile.profile_device``, placed by accelerator type).
3. The data stages of dvc.yaml (everything ``train`` depends on: ingest, validate, static,
   features) rerun through DVC -- only those whose inputs changed, i.e. from ingest on when a new
   run folder landed under ``profiled-data/``.
4. ``flows.retrain`` retrains the families whose inputs changed; ``flows.evaluate_and_promote``
   evaluates each new version and gates it for ``champion``.
5. A GPU nobody can profile (in the fleet list, no node, no data) is predicted from its spec alone:
   the report quotes the error the last evaluation measured on GPUs held out of training
   (leave-one-GPU-out), from ``reports/evaluation-folds.json`` or the committed
   ``benchmarks/results/bench_accuracy.json``.

    python -m flows.retrain_on_new_gpu [FLEET_FILE]
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

from prefect import flow, task

from components.platform.config import PROJECT_ROOT, Settings, get_settings
from flows.retry import transient_only

BENCH_REPORT = PROJECT_ROOT / "benchmarks" / "results" / "bench_accuracy.json"


@task(name="fleet", retries=2, retry_delay_seconds=5, retry_condition_fn=transient_only)
def fleet_task(settings: Settings, fleet_file: str | None, use_ray: bool) -> list[Any]:
    """Accelerators of the Ray cluster's alive nodes, plus the operator's list (I/O: retried)."""
    from components.pipeline.fleet import nodes_from_file, nodes_from_ray

    fleet = []
    if use_ray:
        import ray

        from components.platform.runtime import ensure_ray

        ensure_ray(settings)
        fleet += nodes_from_ray(ray.nodes())
    if fleet_file:
        fleet += nodes_from_file(Path(fleet_file))
    return fleet


def _profile_on_node(
    device: str, backend: str, suite: str, out_dir: str, options: dict[str, Any]
) -> dict[str, Any]:
    """Runs in a Ray task on the chosen node: ``profile_device`` there, and which node that was."""
    import ray

    from flows.profile import profile_device

    node_id = ray.get_runtime_context().get_node_id()
    # The host backend measures the machine it runs on, so it profiles the device "host" (a GPU
    # stand-in on a machine without one); a GPU backend names the catalog GPU.
    target = "host" if backend == "host" else device
    result = profile_device(target, backend, suite, out_dir=out_dir, **options)
    summary = result if isinstance(result, dict) else {"result": result}
    return {"node_id": node_id, "profiled_as": target, **summary}


@task(name="profile-new-gpu")
def profile_new_gpu_task(
    device: str,
    node_id: str,
    accelerator: str,
    backend: str,
    suite: str,
    out_dir: str,
    options: dict[str, Any],
    settings: Settings,
) -> dict[str, Any]:
    """``flows.profile.profile_device`` for one GPU, run in a Ray task pinned to a node of its type.

    The task itself takes no CPU (it waits on the profiling jobs ``profile_device`` dispatches,
    which place themselves by accelerator type); it records the node it ran on.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from components.platform.runtime import ensure_ray

    ensure_ray(settings)
    remote = ray.remote(_profile_on_node).options(
        num_cpus=0,
        max_retries=0,
        resources={f"accelerator_type:{accelerator}": 0.001},
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
    )
    result = ray.get(remote.remote(device, backend, suite, out_dir, options))
    return {"device": device, "accelerator": accelerator, **result}


def spec_only_quality(settings: Settings, family: str | None = None) -> dict[str, Any] | None:
    """What the last evaluation measured on GPUs held out of training: the fold report of the last
    ``evaluate_and_promote`` with unseen-gpu folds, else the committed accuracy benchmark."""
    from flows.evaluate_folds import unseen_gpu_quality

    for path in (settings.reports_dir / "evaluation-folds.json", BENCH_REPORT):
        try:
            report = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError):
            continue
        quality = unseen_gpu_quality(report, family) or unseen_gpu_quality(report)
        if quality is not None:
            return {**quality, "source": str(path)}
    return None


def data_stages(project_root: Path, until: str = "train") -> list[str]:
    """The dvc.yaml stages ``until`` depends on, transitively, in graph order."""
    from components.pipeline.graph import read_stages

    stages = {s.name: s for s in read_stages(project_root / "dvc.yaml")}
    needed: set[str] = set()
    frontier = list(stages[until].upstream) if until in stages else []
    while frontier:
        name = frontier.pop()
        if name not in needed:
            needed.add(name)
            frontier += stages[name].upstream
    return [name for name in stages if name in needed]


@flow(name="retrain-on-new-gpu", log_prints=True)
def retrain_on_new_gpu_flow(
    fleet_file: str | None = None,
    gpus: list[str] | None = None,
    use_ray: bool = True,
    backend: str = "ncu",
    suite: str = "default",
    profiled_dir: str | None = None,  # the dataset new GPU rows join (default <project>/profiled-data)
    profile_options: dict[str, Any] | None = None,
    retrain: bool = True,
    fold_splits: list[str] | None = None,
    project_root: str | None = None,
) -> dict[str, Any]:
    """Profile fleet GPUs that have no measurements, then validate, retrain, evaluate and promote.

    ``gpus`` are catalog names to report on even without a node (an operator's "do we cover X?").
    ``retrain`` off stops after profiling (the run folders are still ingested next time).
    Returns the plan, the profiled runs, the retrain and promotion outcomes, and for every GPU
    nobody can profile the spec-only quality measured on unseen GPUs.
    """
    from components.devices import load_catalog
    from components.pipeline.fleet import measured_devices, plan_new_gpus
    from components.pipeline.lock import pipeline_lock

    settings = get_settings()
    root = Path(project_root) if project_root else PROJECT_ROOT
    report: dict[str, Any] = {}
    with pipeline_lock(settings.state_dir, "retrain-on-new-gpu flow"):
        fleet = fleet_task(settings, fleet_file, use_ray)
        plan = plan_new_gpus(load_catalog(), fleet, measured_devices(settings.data_dir / "canonical"), gpus)
        report["plan"] = plan.to_json()
        print(
            f"fleet: {len(fleet)} accelerator(s); to profile: {sorted(plan.to_profile) or 'none'}; "
            f"spec only: {plan.unprofilable or 'none'}; unknown to the catalog: {plan.unknown or 'none'}"
        )
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        options = dict(profile_options or {})
        if backend != "host":  # GPU rows join the versioned dataset the ingest stage reads; CPU rows never do
            options.setdefault("dataset_dir", profiled_dir or str(root / "profiled-data"))
        report["profiled"] = [
            profile_new_gpu_task(
                device,
                str(nodes[0].node_id),
                nodes[0].accelerator,
                backend,
                suite,
                str(settings.data_dir / "profiles" / f"{device}-{backend}-{stamp}"),
                options,
                settings,
            )
            for device, nodes in plan.to_profile.items()
        ]
        if report["profiled"] and retrain:
            report["retrain"] = _retrain_evaluate_promote(root, fold_splits)
        quality = spec_only_quality(settings)
        report["spec_only"] = {device: quality for device in plan.unprofilable}
        for device in plan.unprofilable:
            figure = (
                (
                    f"{100 * quality['mape']:.1f}% mean runtime error ({quality['family']}, "
                    f"{quality.get('n')} rows; {quality['source']})"
                )
                if quality
                else "no evaluation yet"
            )
            print(
                f"{device}: no node to profile it on; predicted from its spec alone -- on GPUs held out "
                f"of training the last evaluation measured {figure}"
            )
    return report


def _retrain_evaluate_promote(root: Path, fold_splits: list[str] | None) -> dict[str, Any]:
    from flows.evaluate_and_promote import evaluate_and_promote_flow
    from flows.pipeline import pipeline_flow
    from flows.retrain import retrain_flow

    stages = data_stages(root)
    data = pipeline_flow(stages, str(root), push=False, lock=False)
    trained = retrain_flow()
    outcomes = {}
    for family, info in trained.items():
        if info.get("action") == "trained":
            outcomes[family] = evaluate_and_promote_flow(info["registration_file"], fold_splits=fold_splits)
    return {
        "data_stages": [{k: r[k] for k in ("stage", "action", "rows", "seconds")} for r in data],
        "trained": trained,
        "evaluate_and_promote": outcomes,
    }


def main(argv: list[str]) -> None:
    from flows.runtime import prefect_server

    with prefect_server(get_settings()):
        print(json.dumps(retrain_on_new_gpu_flow(argv[0] if argv else None), indent=2, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
