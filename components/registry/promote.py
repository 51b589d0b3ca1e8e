"""The register stage: move ``champion`` only through the gate of params.yaml ``register:``.

``promote_stage`` is the one function behind ``kernelcast promote``, the DVC ``register`` stage
and the promote task of ``flows/evaluate_and_promote.py``. A version is judged on its gate
evaluation report (``kernelcast evaluate --gate``: several splits, ``components.evaluation.report``)
by the rules of ``components.registry.gate``; every rule comes back with its figure and verdict,
and the decision is recorded on the version as tags (``kc.promotion*``, ``kc.metric.*``).

Safety: the judging and the alias moves happen under one file lock per (registry URI, model)
(``components.registry.lock``); under it the champion alias is read again just before it moves,
and a champion that changed since judging means the candidate lost the race -- it is not
promoted (run promote again to judge it against the new champion). ``previous-champion`` is set
before ``champion``, so a crash between the two writes leaves both pointing at a real version.
A missing, failed or partial evaluation never promotes; an unreachable registry is one line naming
its URI.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from components.common.atomic import atomic_write
from components.registry import mlflow_registry as registry
from components.registry.gate import GatePolicy, Judgement, Rule, judge, read_policy
from components.registry.lock import promotion_lock
from components.registry.runs import read_registration, version_exists

EVAL_REPORT_TAG = "eval_report"
TAG_VALUE_LIMIT = 4900  # MLflow caps a version tag's value at 5000 characters


@dataclass(frozen=True)
class PromoteInputs:
    """Which version to judge: ``version``, or the one a ``registration`` file names; or ``rollback``."""

    tracking_uri: str
    model_name: str | None = None  # default: the registration's model, else ``default_model``
    default_model: str = "kernelcast"
    version: str | None = None
    registration: Path | None = None
    rollback: bool = False
    report: Path | None = None  # write the decision here as JSON
    eval_report: Path | None = None  # judge on this gate report (default: the version's eval_report artifact)
    dry_run: bool = False  # judge and print; move no alias, record nothing
    lock_dir: Path | None = None  # default: KERNELCAST_HOME/locks


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
    rules: tuple[Rule, ...] = ()
    dry_run: bool = False
    previous_champion: str | None = None

    @property
    def would_promote(self) -> bool:
        """A dry run's verdict: every rule passed (``promoted`` stays False, nothing moved)."""
        return (
            bool(self.rules) and all(rule.passed for rule in self.rules) and self.reason != "already champion"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            "version": self.version,
            "promoted": self.promoted,
            "champion": self.champion,
            "previous_champion": self.previous_champion,
            "reason": self.reason,
            "failures": list(self.failures),
            "rules": [rule.to_json() for rule in self.rules],
            "dry_run": self.dry_run,
        }


def gate_policy(params: Mapping[str, Any], source: str = "params.yaml") -> GatePolicy:
    """params.yaml ``register:`` as the gate; none at all is an error (no promotion without a gate)."""
    return read_policy(params, source)


gate_thresholds = gate_policy  # the name the flows and older callers use


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
    if inputs.rollback and inputs.dry_run:
        raise ValueError("--dry-run judges a version; it does not go with --rollback")
    return name or inputs.default_model, version


def _lock_dir(inputs: PromoteInputs) -> Path:
    if inputs.lock_dir is not None:
        return Path(inputs.lock_dir)
    from components.platform.config import get_settings

    return get_settings().state_dir / "locks"


def read_eval_report(path: Path) -> dict[str, Any]:
    """A gate report file, or a ValueError naming the file and what is wrong with it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"--eval-report {path}: file not found (run `kernelcast evaluate --gate` first)"
        )
    try:
        report = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"--eval-report {path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(report, dict) or report.get("kind") != "kernelcast-gate-report":
        raise ValueError(f"--eval-report {path}: not a gate report (written by `kernelcast evaluate --gate`)")
    return report


def version_eval_report(name: str, version: str, tracking_uri: str) -> dict[str, Any] | None:
    """The gate report the version's ``eval_report`` tag points at; None when it has none."""
    import mlflow.artifacts

    tags = registry.mlflow_client(tracking_uri).get_model_version(name, version).tags
    uri = tags.get(EVAL_REPORT_TAG)
    if not uri:
        return None
    import os

    os.environ.setdefault(
        "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false"
    )  # one small JSON: no bar in the verdict
    mlflow.set_tracking_uri(tracking_uri)  # runs:/ artifact URIs resolve against the current store
    return mlflow.artifacts.load_dict(uri)


def identity_rule(report: Mapping[str, Any] | None, name: str, version: str) -> Rule | None:
    """The report must be the candidate's own (a report for another version judges nothing)."""
    if report is None:
        return None
    reported = (str(report.get("model_name")), str(report.get("model_version")))
    return Rule(
        f"report is for {name} v{version}",
        f"{reported[0]} v{reported[1]}",
        f"{name} v{version}",
        reported == (name, str(version)),
        "" if reported == (name, str(version)) else "evaluate this version with `kernelcast evaluate --gate`",
    )


def _record(
    name: str,
    version: str,
    judgement: Judgement,
    policy: GatePolicy,
    decision: str,
    reason: str,
    champion_before: str | None,
    tracking_uri: str,
) -> None:
    """The decision on the version: verdict, reason, every rule line, and the gated figures."""
    client = registry.mlflow_client(tracking_uri)
    named = {f"{split}/{key.partition('_')[2]}" for split, bounds in policy.splits.items() for key in bounds}
    foreign = any(rule.rule.startswith("report is for") and not rule.passed for rule in judgement.rules)
    for key in (
        sorted(named | set(policy.guarded)) if not foreign else ()
    ):  # another version's figures: not its own
        if key in judgement.metrics:
            client.set_model_version_tag(
                name, version, f"{registry.METRIC_TAG_PREFIX}{key}", repr(judgement.metrics[key])
            )
    lines = json.dumps([rule.line() for rule in judgement.rules])
    tags = {
        "kc.promotion": decision,
        "kc.promotion.reason": reason[:TAG_VALUE_LIMIT],
        "kc.promotion.rules": lines
        if len(lines) <= TAG_VALUE_LIMIT
        else lines[: TAG_VALUE_LIMIT - 5] + " ...]",
        "kc.promotion.champion_before": champion_before or "none",
        "kc.promotion.at": datetime.now(UTC).isoformat(timespec="seconds"),
        "kc.policy": json.dumps(policy.to_json(), sort_keys=True)[:TAG_VALUE_LIMIT],
    }
    for key, value in tags.items():
        client.set_model_version_tag(name, version, key, value)


def judge_version(
    name: str, version: str, report: Mapping[str, Any] | None, policy: GatePolicy, tracking_uri: str
) -> tuple[Judgement, str | None]:
    """Every rule on the candidate, against the champion as it is now; (judgement, champion)."""
    champion = registry.alias_version(name, registry.CHAMPION, tracking_uri)
    incumbent = (
        registry.version_metrics(name, champion, tracking_uri) if champion and champion != version else None
    )
    judgement = judge(report, policy, incumbent, champion if champion != version else None)
    identity = identity_rule(report, name, version)
    if identity is not None:
        judgement = Judgement([identity, *judgement.rules], judgement.metrics)
    return judgement, champion


def promote_stage(inputs: PromoteInputs, policy: GatePolicy | None = None) -> PromoteResult:
    """Judge the version on its gate report; record the decision on it, make it the challenger, and
    the champion when every rule passes. Or roll back. ``policy`` is ``gate_policy(params)``;
    required unless rolling back."""
    name, version = _target(inputs)
    uri = inputs.tracking_uri
    registry.check_reachable(uri)
    if inputs.rollback:
        with promotion_lock(_lock_dir(inputs), uri, name):
            rolled = rollback(name, uri)
        return PromoteResult(name, rolled.version, True, rolled.champion, rolled.reason, rolled_back=True)
    assert version is not None  # _target guarantees one of version / rollback
    if policy is None:
        raise ValueError("promotion needs the register: section of params.yaml (gate_policy(params))")
    if not version_exists(name, version, uri):
        raise LookupError(f"model {name!r} has no version {version} in {uri}")
    report = (
        read_eval_report(inputs.eval_report)
        if inputs.eval_report is not None
        else version_eval_report(name, version, uri)
    )

    with promotion_lock(_lock_dir(inputs), uri, name):
        judgement, champion = judge_version(name, version, report, policy, uri)
        previous = registry.alias_version(name, registry.PREVIOUS_CHAMPION, uri)
        rules = tuple(judgement.rules)
        failures = tuple(judgement.failures())
        if champion == version:
            result = PromoteResult(
                name,
                version,
                False,
                champion,
                "already champion",
                failures,
                rules=rules,
                dry_run=inputs.dry_run,
                previous_champion=previous,
            )
        elif inputs.dry_run:
            verdict = "would become champion" if judgement.passed else "would stay challenger"
            result = PromoteResult(
                name,
                version,
                False,
                champion,
                f"dry run: {verdict}",
                failures,
                rules=rules,
                dry_run=True,
                previous_champion=previous,
            )
        else:
            result = _decide(name, version, judgement, policy, champion, previous, uri)
    _write(inputs.report, result)
    return replace(result, report=inputs.report)


def _decide(
    name: str,
    version: str,
    judgement: Judgement,
    policy: GatePolicy,
    champion: str | None,
    previous: str | None,
    uri: str,
) -> PromoteResult:
    """Record the verdict and move the aliases (under the caller's lock)."""
    client = registry.mlflow_client(uri)
    rules, failures = tuple(judgement.rules), tuple(judgement.failures())
    if not judgement.passed:
        reason = f"{len(failures)} of {len(rules)} rules failed"
        _record(name, version, judgement, policy, "rejected", reason, champion, uri)
        client.set_registered_model_alias(name, registry.CHALLENGER, version)
        return PromoteResult(
            name, version, False, champion, reason, failures, rules=rules, previous_champion=previous
        )
    # Re-read just before moving: a champion that changed since judging was not the one judged against.
    now = registry.alias_version(name, registry.CHAMPION, uri)
    if now != champion:
        reason = (
            f"lost the race: champion moved from v{champion} to v{now} while this version was judged; "
            "run promote again to judge it against the new champion"
        )
        _record(name, version, judgement, policy, "rejected: lost race", reason, champion, uri)
        return PromoteResult(
            name, version, False, now, reason, (reason,), rules=rules, previous_champion=previous
        )
    _record(name, version, judgement, policy, "champion", "every rule passed", champion, uri)
    client.set_registered_model_alias(name, registry.CHALLENGER, version)
    if champion is not None:
        client.set_registered_model_alias(name, registry.PREVIOUS_CHAMPION, champion)
    client.set_registered_model_alias(name, registry.CHAMPION, version)
    if registry.alias_version(name, registry.CHAMPION, uri) != version:
        raise RuntimeError(f"{name}@champion did not move to v{version} (registry {uri}): check the store")
    reason = f"every rule passed; replaced v{champion}" if champion else "every rule passed; first champion"
    return PromoteResult(
        name,
        version,
        True,
        version,
        reason,
        (),
        rules=rules,
        previous_champion=champion if champion else previous,
    )


@dataclass(frozen=True)
class Rollback:
    version: str
    champion: str
    demoted: str | None
    reason: str = field(default="")


def rollback(name: str, tracking_uri: str) -> Rollback:
    """Point ``champion`` back at ``previous-champion`` (call under the promotion lock).

    ``previous-champion`` is cleared so a second rollback fails loudly instead of flip-flopping; the
    demoted version and the restored one are tagged.
    """
    client = registry.mlflow_client(tracking_uri)
    previous = registry.alias_version(name, registry.PREVIOUS_CHAMPION, tracking_uri)
    if previous is None:
        raise LookupError(
            f"model {name!r} has no {registry.PREVIOUS_CHAMPION!r} alias to roll back to "
            f"(registry {tracking_uri})"
        )
    demoted = registry.alias_version(name, registry.CHAMPION, tracking_uri)
    client.set_registered_model_alias(name, registry.CHAMPION, previous)
    client.delete_registered_model_alias(name, registry.PREVIOUS_CHAMPION)
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    if demoted is not None and demoted != previous:
        client.set_model_version_tag(name, demoted, "kc.promotion", f"rolled back to v{previous}")
        client.set_model_version_tag(name, demoted, "kc.promotion.at", stamp)
    client.set_model_version_tag(name, previous, "kc.promotion", f"champion (restored from v{demoted})")
    return Rollback(previous, previous, demoted, f"rolled back from v{demoted}")


def _write(path: Path | None, result: PromoteResult) -> None:
    if path is None:
        return
    text = json.dumps(result.to_json(), indent=2, sort_keys=True)
    atomic_write(Path(path), lambda tmp: tmp.write_text(text))
