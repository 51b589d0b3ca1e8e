"""The register stage: move ``champion`` only through the threshold gate in params.yaml ``register:``.

``promote_stage`` is the one function behind ``kernelcast promote``, the DVC ``register`` stage
and the promote task of ``flows/evaluate_and_promote.py``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.atomic import atomic_write
from components.registry import mlflow_registry as registry
from components.registry.runs import read_registration, version_exists


@dataclass(frozen=True)
class PromoteInputs:
    """Which version to judge: ``version``, or the one a ``registration`` file names; or ``rollback``."""

    tracking_uri: str
    model_name: str | None = None  # default: the registration's model, else ``default_model``
    default_model: str = "kernelcast"
    version: str | None = None
    registration: Path | None = None
    rollback: bool = False
    report: Path | None = None  # write the result here as JSON


@dataclass(frozen=True)
class PromoteResult:
    model_name: str
    version: str
    promoted: bool
    champion: str | None
    reason: str
    failures: tuple[str, ...] = ()
    rolled_back: bool = False
    report: Path | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            "version": self.version,
            "promoted": self.promoted,
            "champion": self.champion,
            "reason": self.reason,
            "failures": list(self.failures),
        }


def gate_thresholds(params: Mapping[str, Any], source: str = "params.yaml") -> dict[str, float]:
    """params.yaml ``register:`` as thresholds; none at all is an error (no promotion without a gate)."""
    from components.config import register_thresholds

    thresholds = register_thresholds(params, source=source)
    if not thresholds:
        raise ValueError(f"{source} has no 'register:' thresholds; refusing to promote without a gate")
    return thresholds


def _target(inputs: PromoteInputs) -> tuple[str, str | None]:
    """(model name, version) from the inputs; a ValueError naming the conflicting inputs."""
    version, name = inputs.version, inputs.model_name
    if inputs.registration is not None:
        if version is not None or inputs.rollback:
            raise ValueError("--registration replaces --version; give one of them")
        recorded = read_registration(inputs.registration)
        if recorded.version is None:
            raise ValueError(
                f"--registration {inputs.registration}: the model was trained with --no-register"
            )
        version, name = recorded.version, name or recorded.model_name
    if inputs.rollback == (version is not None):
        raise ValueError("give exactly one of --version N, --registration FILE or --rollback")
    return name or inputs.default_model, version


def promote_stage(inputs: PromoteInputs, thresholds: Mapping[str, float] | None = None) -> PromoteResult:
    """Make the version the challenger, and the champion if it meets ``thresholds`` and beats the
    current champion (judged on the metrics logged with the version's run); or roll back.

    ``thresholds`` is required unless rolling back (``gate_thresholds(params)``).
    """
    name, version = _target(inputs)
    if inputs.rollback:
        rolled = registry.rollback(name, tracking_uri=inputs.tracking_uri)
        return PromoteResult(name, rolled.version, True, rolled.champion, rolled.reason, rolled_back=True)
    assert version is not None  # _target guarantees one of version / rollback
    if not thresholds:
        raise ValueError("promotion needs the register: thresholds of params.yaml")
    if not version_exists(name, version, inputs.tracking_uri):
        raise LookupError(f"model {name!r} has no version {version} in {inputs.tracking_uri}")
    outcome = registry.promote(name, version, None, dict(thresholds), tracking_uri=inputs.tracking_uri)
    result = PromoteResult(
        name,
        outcome.version,
        outcome.promoted,
        outcome.champion,
        outcome.reason,
        tuple(outcome.failures),
        report=inputs.report,
    )
    if inputs.report is not None:
        text = json.dumps(result.to_json(), indent=2, sort_keys=True)
        atomic_write(inputs.report, lambda tmp: tmp.write_text(text))
    return result
