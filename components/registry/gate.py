"""The promotion gate: params.yaml ``register:`` as a typed policy, and the rules that judge a candidate.

A candidate is judged on its evaluation report over several splits (``components.evaluation.report``):

1. the report is complete -- every split the policy names was evaluated (a failed or partial
   evaluation never promotes);
2. per split, every threshold holds (``max_<metric>``: lower is better, ``min_<metric>``: higher);
3. no guarded metric is worse than the current champion's by more than ``tolerance`` (absolute, in
   the metric's own units: 0.02 = two percentage points of MAPE).

Each rule comes back as a ``Rule`` with the figure, the limit and the verdict, so ``kernelcast
promote`` prints why, and the decision is recorded on the version. Pure: no MLflow here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

POLICY_KEYS: frozenset[str] = frozenset({"tolerance", "guarded", "splits", "evaluation"})
EVALUATION_KEYS: frozenset[str] = frozenset(
    {"max_train_rows", "max_test_rows", "max_gpu_folds", "gpu_folds", "min_gpu_rows"}
)


class PolicyError(ValueError):
    """params.yaml ``register:`` is not a policy this gate can apply; the message names the key."""


@dataclass(frozen=True)
class EvaluationCaps:
    """What the gate's evaluation may cost (2 cores): train/test rows per fold, leave-one-GPU-out folds."""

    max_train_rows: int | None = 20000
    max_test_rows: int | None = 5000
    max_gpu_folds: int | None = 2
    gpu_folds: tuple[str, ...] = ()  # catalog ids held out by leave-one-GPU-out (default: chosen by hash)
    min_gpu_rows: int = 1000


@dataclass(frozen=True)
class GatePolicy:
    """``register:`` of params.yaml."""

    splits: dict[str, dict[str, float]]  # split -> {max_<metric>|min_<metric>: bound}
    guarded: tuple[str, ...]  # "split/metric" compared with the champion
    tolerance: float = 0.02
    evaluation: EvaluationCaps = field(default_factory=EvaluationCaps)

    def direction(self, key: str) -> bool:
        """True when higher is better for ``split/metric`` (it has a ``min_`` bound, or is an accuracy)."""
        split, _, metric = key.partition("/")
        bounds = self.splits.get(split, {})
        if f"min_{metric}" in bounds:
            return True
        if f"max_{metric}" in bounds:
            return False
        return metric.startswith(("within_", "roofline_accuracy", "roofline_balanced")) or metric.endswith(
            "coverage"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "splits": self.splits,
            "guarded": list(self.guarded),
            "tolerance": self.tolerance,
            "evaluation": {**vars(self.evaluation), "gpu_folds": list(self.evaluation.gpu_folds)},
        }


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise PolicyError(f"{where} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PolicyError(f"{where} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise PolicyError(f"{where} must be finite, got {value!r}")
    return number


def _caps(raw: Any, source: str) -> EvaluationCaps:
    if raw is None:
        return EvaluationCaps()
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{source}: register.evaluation must be a mapping")
    unknown = sorted(set(raw) - EVALUATION_KEYS)
    if unknown:
        raise PolicyError(
            f"{source}: unknown key register.evaluation.{unknown[0]}; "
            f"known: {', '.join(sorted(EVALUATION_KEYS))}"
        )
    values: dict[str, Any] = {}
    for key in ("max_train_rows", "max_test_rows", "max_gpu_folds", "min_gpu_rows"):
        if key in raw:
            value = raw[key]
            if value is None and key != "min_gpu_rows":
                values[key] = None
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PolicyError(
                    f"{source}: register.evaluation.{key} must be a positive integer"
                    + ("" if key == "min_gpu_rows" else " or null")
                    + f", got {value!r}"
                )
            values[key] = value
    if "gpu_folds" in raw:
        folds = raw["gpu_folds"] or []
        if not isinstance(folds, list) or not all(isinstance(d, str) and d for d in folds):
            raise PolicyError(f"{source}: register.evaluation.gpu_folds must be a list of catalog ids")
        values["gpu_folds"] = tuple(folds)
    return EvaluationCaps(**values)


def read_policy(params: Mapping[str, Any], source: str = "params.yaml") -> GatePolicy:
    """``register:`` as a ``GatePolicy``; a ``PolicyError`` naming the key that is wrong.

    No section, or no split with a threshold, is an error: nothing is promoted without a gate.
    """
    from components.platform.config import OPMODEL_SPLITS, SERVING_SPLITS, SPLITS

    raw = params.get("register")
    if not isinstance(raw, Mapping) or not raw:
        raise PolicyError(f"{source} has no 'register:' section; refusing to promote without a gate")
    unknown = sorted(set(raw) - POLICY_KEYS)
    if unknown:
        raise PolicyError(
            f"{source}: unknown key register.{unknown[0]}; known: {', '.join(sorted(POLICY_KEYS))}"
            " (thresholds live under register.splits.<split>)"
        )
    splits_raw = raw.get("splits")
    if not isinstance(splits_raw, Mapping) or not splits_raw:
        raise PolicyError(
            f"{source}: register.splits must map each split to its thresholds; "
            f"refusing to promote without a gate"
        )
    splits: dict[str, dict[str, float]] = {}
    for split, bounds in splits_raw.items():
        if split not in SPLITS + OPMODEL_SPLITS + SERVING_SPLITS:
            raise PolicyError(
                f"{source}: register.splits.{split}: unknown split; choose from "
                f"{', '.join(SPLITS + OPMODEL_SPLITS + SERVING_SPLITS)}"
            )
        if not isinstance(bounds, Mapping) or not bounds:
            raise PolicyError(
                f"{source}: register.splits.{split} must map max_<metric>/min_<metric> to a bound"
            )
        splits[str(split)] = {}
        for key, value in bounds.items():
            kind, _, metric = str(key).partition("_")
            if kind not in ("max", "min") or not metric:
                raise PolicyError(
                    f"{source}: register.splits.{split}.{key}: thresholds are max_<metric> or min_<metric>"
                )
            splits[str(split)][str(key)] = _number(value, f"{source}: register.splits.{split}.{key}")
    guarded_raw = raw.get("guarded", [])
    if not isinstance(guarded_raw, list) or not all(isinstance(g, str) for g in guarded_raw):
        raise PolicyError(f"{source}: register.guarded must be a list of 'split/metric'")
    for key in guarded_raw:
        split, sep, metric = key.partition("/")
        if not sep or not metric or split not in splits:
            raise PolicyError(
                f"{source}: register.guarded {key!r}: expected 'split/metric' with the split one "
                f"of register.splits ({', '.join(splits)})"
            )
    tolerance = _number(raw.get("tolerance", 0.02), f"{source}: register.tolerance")
    if tolerance < 0:
        raise PolicyError(f"{source}: register.tolerance must be >= 0, got {tolerance}")
    return GatePolicy(splits, tuple(guarded_raw), tolerance, _caps(raw.get("evaluation"), source))


# --------------------------------------------------------------------------- judging


@dataclass(frozen=True)
class Rule:
    """One rule of the gate, judged: ``passed`` is False on a violation and on a missing figure."""

    rule: str  # e.g. "unseen-kernel/runtime_mape <= 0.35", "report complete", "vs champion v3: ..."
    figure: float | str | None
    limit: float | str | None
    passed: bool
    note: str = ""

    def line(self) -> str:
        figure = _fmt(self.figure)
        verdict = "PASS" if self.passed else "FAIL"
        return f"{verdict}  {self.rule}: {figure}" + (f" ({self.note})" if self.note else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "figure": self.figure,
            "limit": self.limit,
            "passed": self.passed,
            "note": self.note,
        }


def _fmt(value: Any) -> str:
    if value is None:
        return "missing"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def report_metrics(report: Mapping[str, Any]) -> dict[str, float]:
    """``{"split/metric": value}`` from an evaluation report's ``splits.<split>.metrics``."""
    out: dict[str, float] = {}
    for split, entry in (report.get("splits") or {}).items():
        for metric, value in (entry.get("metrics") or {}).items():
            if value is not None and math.isfinite(float(value)):
                out[f"{split}/{metric}"] = float(value)
    return out


def completeness_rule(report: Mapping[str, Any] | None, policy: GatePolicy) -> Rule:
    """Every split of the policy evaluated without error (and the report not marked partial)."""
    if report is None:
        return Rule(
            "evaluation report present",
            None,
            "a report over every gated split",
            False,
            "no evaluation report for this version: run `kernelcast evaluate --gate` first",
        )
    splits = report.get("splits") or {}
    missing = [s for s in policy.splits if s not in splits]
    failed = [
        f"{s} ({splits[s].get('status')}: {splits[s].get('note') or 'no detail'})"
        for s in policy.splits
        if s in splits and splits[s].get("status") != "ok"
    ]
    problems = ([f"not evaluated: {', '.join(missing)}"] if missing else []) + failed
    if report.get("complete") is False and not problems:
        problems.append("the report is marked partial")
    done = len(policy.splits) - len(missing) - len(failed)
    return Rule(
        "evaluation complete",
        f"{done}/{len(policy.splits)} splits",
        f"{len(policy.splits)} splits",
        not problems,
        "; ".join(problems),
    )


def threshold_rules(metrics: Mapping[str, float], policy: GatePolicy) -> list[Rule]:
    rules = []
    for split, bounds in policy.splits.items():
        for key, limit in bounds.items():
            kind, _, metric = key.partition("_")
            name = f"{split}/{metric}"
            relation = "<=" if kind == "max" else ">="
            value = metrics.get(name)
            ok = value is not None and (value <= limit if kind == "max" else value >= limit)
            rules.append(
                Rule(
                    f"{name} {relation} {limit:g}",
                    value,
                    limit,
                    ok,
                    "" if value is not None else "the evaluation produced no such figure",
                )
            )
    return rules


def champion_rules(
    metrics: Mapping[str, float],
    champion: Mapping[str, float] | None,
    champion_version: str | None,
    policy: GatePolicy,
) -> list[Rule]:
    """No guarded metric worse than the champion's by more than the tolerance."""
    if champion_version is None:
        return [Rule("no champion to defend", "none", None, True, "first champion")]
    rules = []
    for key in policy.guarded:
        higher = policy.direction(key)
        value, old = metrics.get(key), (champion or {}).get(key)
        if old is None:
            rules.append(
                Rule(
                    f"{key} vs champion v{champion_version}",
                    value,
                    None,
                    True,
                    "the champion has no recorded figure: not compared",
                )
            )
            continue
        limit = old - policy.tolerance if higher else old + policy.tolerance
        ok = value is not None and (value >= limit if higher else value <= limit)
        relation = ">=" if higher else "<="
        rules.append(
            Rule(
                f"{key} {relation} champion v{champion_version}'s {old:.4g} "
                f"{'-' if higher else '+'} {policy.tolerance:g}",
                value,
                limit,
                ok,
                "" if value is not None else "the evaluation produced no such figure",
            )
        )
    return rules


@dataclass(frozen=True)
class Judgement:
    rules: list[Rule]
    metrics: dict[str, float]

    @property
    def passed(self) -> bool:
        return bool(self.rules) and all(rule.passed for rule in self.rules)

    def failures(self) -> list[str]:
        return [rule.line() for rule in self.rules if not rule.passed]


def judge(
    report: Mapping[str, Any] | None,
    policy: GatePolicy,
    champion: Mapping[str, float] | None = None,
    champion_version: str | None = None,
) -> Judgement:
    """Every rule of the gate on ``report`` (None: no report, which fails)."""
    complete = completeness_rule(report, policy)
    if report is None:
        return Judgement([complete], {})
    metrics = report_metrics(report)
    rules = [
        complete,
        *threshold_rules(metrics, policy),
        *champion_rules(metrics, champion, champion_version, policy),
    ]
    return Judgement(rules, metrics)


def render(rules: Sequence[Rule]) -> list[str]:
    return [rule.line() for rule in rules]
