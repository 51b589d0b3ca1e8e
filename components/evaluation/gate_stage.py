"""The promotion gate's report (``kernelcast evaluate --gate``): one candidate scored on every split of
params.yaml ``register.splits`` and, when it is a registered version, attached to its training run."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from components.common.atomic import atomic_write
from components.evaluation.stage import EvaluateInputs, EvaluateResult, check_inputs

if TYPE_CHECKING:
    from components.evaluation.report import ExecutorFactory
    from components.platform.config import Settings


@dataclass(frozen=True)
class Candidate:
    """What the gate evaluates: a predictor reference and, when registered, which version it is."""

    model: str  # what load_any_predictor reads
    model_name: str | None
    version: str | None
    trained_split: str | None
    run_id: str | None  # the training run (the report is attached to it)


def resolve_candidate(inputs: EvaluateInputs, tracking_uri: str) -> Candidate:
    """From ``--registration`` (the pipeline), a ``models:/name/N`` URI, or a predictor folder (its
    registration.json when it has one)."""
    from components.registry.runs import REGISTRATION_FILE, read_registration

    registration = inputs.registration
    if (
        registration is None
        and Path(inputs.model).is_dir()
        and (Path(inputs.model) / REGISTRATION_FILE).is_file()
    ):
        registration = Path(inputs.model) / REGISTRATION_FILE
    if registration is not None:
        recorded = read_registration(registration)
        return Candidate(
            recorded.predictor_dir or inputs.model,
            recorded.model_name,
            recorded.version,
            recorded.split or None,
            recorded.run_id,
        )
    if inputs.model.startswith("models:/"):
        from components.registry.mlflow_registry import mlflow_client

        name, _, ref = inputs.model.removeprefix("models:/").partition("/")
        client = mlflow_client(tracking_uri)
        if "@" in name:
            name, _, alias = name.partition("@")
            found = client.get_model_version_by_alias(name, alias)
        else:
            found = client.get_model_version(name, ref)
        return Candidate(inputs.model, name, str(found.version), found.tags.get("split"), found.run_id)
    return Candidate(inputs.model, None, None, None, None)


def gate_stage(
    inputs: EvaluateInputs,
    settings: Settings,
    params: dict[str, Any],
    fold_executor: ExecutorFactory | None = None,
) -> EvaluateResult:
    """The gate report of one candidate over every split of params.yaml ``register.splits`` (caps from
    ``register.evaluation``), written atomically; when the candidate is a registered version and
    ``inputs.log`` is on, attached to its training run and named by its ``eval_report`` tag."""
    from components.evaluation.harness import read_feature_table
    from components.evaluation.report import gate_report
    from components.registry.gate import read_policy
    from components.registry.lineage import dataset_version
    from components.registry.loading import load_any_predictor

    check_inputs(inputs)
    policy = read_policy(params, str(settings.params_file))  # before any work: no gate, no report
    uri = settings.tracking_uri()
    if inputs.log or inputs.model.startswith("models:/"):
        from components.registry.mlflow_registry import check_reachable

        check_reachable(uri)  # one line naming the URI now, not minutes of retries after the evaluation
    candidate = resolve_candidate(inputs, uri)
    features = Path(inputs.features_file or settings.data_dir / "features" / "features.parquet")
    canonical = settings.data_dir / "canonical"
    table = read_feature_table(features, canonical)
    predictor = load_any_predictor(candidate.model, uri)
    from components.platform.config import PROJECT_ROOT

    identity = {
        "model_name": candidate.model_name,
        "model_version": candidate.version,
        "training_run": candidate.run_id,
        "features_file": str(features),
        "dataset_version": dataset_version(features, PROJECT_ROOT),
    }
    from contextlib import nullcontext

    from components.evaluation.tracking import attach_gate_report, log_gate_run, split_plotter
    from components.registry.tracking import stage_run

    out = Path(inputs.out_file)
    plots_dir = out.with_name(out.stem + "_plots")
    tracked: Any = (
        stage_run(
            "evaluate",
            settings,
            params={
                "model": candidate.model,
                "version": candidate.version,
                "splits": ",".join(policy.splits),
            },
            tags={"kind": "evaluation", "model_uri": candidate.model, "training_run": str(candidate.run_id)},
            run_name=f"evaluate-gate-{candidate.model_name or 'model'}-v{candidate.version or '?'}",
        )
        if inputs.log
        else nullcontext()
    )
    with tracked:
        report = gate_report(
            predictor,
            table,
            tuple(policy.splits),
            policy.evaluation,
            model=candidate.model,
            trained_split=candidate.trained_split,
            canonical_dir=canonical,
            executor_factory=fold_executor,
            identity=identity,
            on_frame=split_plotter(plots_dir) if inputs.log else None,
        )
        report["policy"] = policy.to_json()
        text = json.dumps(report, indent=2, sort_keys=False) + "\n"
        atomic_write(out, lambda tmp: tmp.write_text(text))
        if inputs.log:
            log_gate_run(report, out, plots_dir, features)
        if inputs.log and candidate.version is not None and candidate.run_id is not None:
            attach_gate_report(out, candidate, uri)
    return EvaluateResult(report, out, candidate.run_id if inputs.log else None, None, None)
