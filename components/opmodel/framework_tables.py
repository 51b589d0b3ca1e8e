"""The op engine answering for one serving framework: its own measured kernels first, the pooled ones else.

AIConfigurator measured each kernel table under the framework that runs it (``<gpu>/<op>/<framework>/
<version>/``: vLLM, SGLang, TensorRT-LLM, with their versions and kernel sources); the store's pooled tables
fold every framework's repeats into one median (``store.py``), so a vLLM deployment's MoE step was timed
with TensorRT-LLM's and SGLang's kernels too. ``for_framework`` is the same engine (one engine, not a
second one) whose measured tier and MoE curves take each (family, GPU, dtype) group from the rows the
serving framework measured (``store.load_framework_rows``) where it measured that group, else from the
pooled group; ``source_of`` names which answered (the deployment's op-tier note). Held-out GPUs stay held
out: a tier restricted by ``MeasuredTier.without`` keeps the framework's groups restricted too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from components.opmodel.measured import LAYOUTS, MeasuredTier, measured_groups

POOLED = "pooled"


class FirstOf(Mapping):
    """``{group key: frame}`` from ``first`` where it has the key, else from ``rest`` (a lazy split is read
    only for the keys asked)."""

    def __init__(self, first: Mapping[tuple, Any], rest: Mapping[tuple, Any]) -> None:
        self.first, self.rest = first, rest

    def __getitem__(self, key: tuple) -> Any:
        return self.first[key] if key in self.first else self.rest[key]

    def __contains__(self, key: object) -> bool:
        return key in self.first or key in self.rest

    def __iter__(self) -> Iterator[tuple]:
        yield from self.first
        yield from (k for k in self.rest if k not in self.first)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def subset(self, keys: Any) -> FirstOf:
        """The same groups restricted to ``keys`` (``MeasuredTier.without``)."""
        keys = list(keys)
        rest_keys = [k for k in keys if k in self.rest and k not in self.first]
        subset = getattr(self.rest, "subset", None)
        rest = subset(rest_keys) if subset else {k: self.rest[k] for k in rest_keys}
        return FirstOf({k: self.first[k] for k in keys if k in self.first}, rest)


def framework_tier(tier: MeasuredTier, framework: str, frames: Mapping[str, Any]) -> MeasuredTier:
    """``tier`` answering for ``framework``: each (family, GPU, dtype[, kv dtype]) group from ``frames``
    (the rows ``framework`` measured, per family) where it has the group, else ``tier``'s pooled group."""
    own = {
        key: part
        for family, frame in frames.items()
        if family in LAYOUTS
        for key, part in measured_groups(family, frame)
    }
    out = MeasuredTier({}, tier.specs)
    out.groups = FirstOf(own, tier.groups)
    out._tables = {k: v for k, v in tier._tables.items() if k not in own}  # pooled tables are shared
    out.framework, out.own_keys = framework, frozenset(own)
    return out


def framework_curves(curve_groups: Mapping[tuple, Any], frames: Mapping[str, Any]) -> FirstOf:
    """The transfer tier's curve groups (MoE: ``(family, GPU, dtype)``) from ``frames`` first."""
    from components.opmodel.transfer import CURVE_FAMILIES

    own = {
        (family, str(device), str(dtype)): part
        for family, frame in frames.items()
        if family in CURVE_FAMILIES
        for (device, dtype), part in frame.groupby(["device_id", "dtype"], sort=True, observed=True)
    }
    return FirstOf(own, curve_groups)


def source_of(groups: Any, key: tuple) -> str:
    """Whose kernels hold ``key``: the framework's own (``FirstOf.first``), else :data:`POOLED`."""
    return "own" if isinstance(groups, FirstOf) and key in groups.first else POOLED


def tier_label(engine: Any, family: str, dtype: str, spec: Any, kv_dtype: str | None) -> str | None:
    """Whose tables a framework engine's measured (or, for MoE, transfer) answers came from: the
    framework's name or :data:`POOLED`; None for an engine not asked for a framework."""
    measured = getattr(engine, "measured", None)
    framework = getattr(measured, "framework", None)
    if framework is None:
        return None
    if family in LAYOUTS:
        from components.opmodel.measured import physics_key

        device = measured.by_physics.get(physics_key(spec))
        key = (family, device, dtype, (kv_dtype or dtype) if family == "attention" else None)
        return framework if source_of(measured.groups, key) == "own" else POOLED
    curves = getattr(getattr(engine, "transfer", None), "curve_groups", None)
    own = getattr(curves, "first", {})
    return framework if any(k[0] == family and k[2] == dtype for k in own) else POOLED
