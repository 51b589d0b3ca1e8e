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
        """The same groups restricted to ``keys`` (``MeasuredTier.without``; a lazy split stays unread)."""
        keys = list(keys)
        return FirstOf(
            _subset(self.first, [k for k in keys if k in self.first]),
            _subset(self.rest, [k for k in keys if k in self.rest and k not in self.first]),
        )

    def table(self, key: tuple, tag: str, build: Any) -> Any:
        """Group ``key``'s measured-tier table: saved beside its split where the mapping holding it is one
        (``store_cache.GroupFrames.table``), else built."""
        holder = self.first if key in self.first else self.rest
        saved = getattr(holder, "table", None)
        return saved(key, tag, build) if saved else build()


def _subset(groups: Mapping[tuple, Any], keys: list[tuple]) -> Mapping[tuple, Any]:
    subset = getattr(groups, "subset", None)
    return subset(keys) if subset else {k: groups[k] for k in keys}


def framework_tier(tier: MeasuredTier, framework: str, frames: Mapping[str, Any]) -> MeasuredTier:
    """``tier`` answering for ``framework``: each (family, GPU, dtype[, kv dtype]) group from ``frames``
    (the rows ``framework`` measured, per family) where it has the group, else ``tier``'s pooled group."""
    own = {
        key: part
        for family, frame in frames.items()
        if family in LAYOUTS
        for key, part in measured_groups(family, frame)
    }
    return framework_tier_of(tier, framework, own)


def framework_tier_of(tier: MeasuredTier, framework: str, own: Mapping[tuple, Any]) -> MeasuredTier:
    """``tier`` answering for ``framework`` from its groups ``own`` (``{group key: rows}``, or a split's
    ``store_cache.framework_split``, read on first use) first, else from ``tier``'s pooled groups."""
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


def framework_engine(engine: Any, framework: str) -> Any:
    """``engine`` (an ``OpEngine``) answering for ``framework`` (``OpEngine.for_framework``): its groups from
    the split store where the engine reads one (``store_cache.framework_split``: only the groups asked are
    read, their tables saved beside), else from the store's per-framework rows read whole; ``engine``
    itself where the store keeps no per-framework rows."""
    from pathlib import Path

    from components.opmodel.store import load_framework_rows
    from components.opmodel.store_cache import framework_split
    from components.opmodel.transfer import CURVE_FAMILIES

    if engine.measured is None or engine.store_dir is None:
        return engine
    transfer = engine.transfer
    split = framework_split(
        engine.measured.groups, Path(engine.store_dir), framework, tuple(LAYOUTS), tuple(CURVE_FAMILIES)
    )
    if split is not None:
        curves = FirstOf(split[1], transfer.curve_groups) if transfer is not None else None
        return _with_tiers(engine, framework, framework_tier_of(engine.measured, framework, split[0]), curves)
    tables = {
        f: load_framework_rows(Path(engine.store_dir), f, framework) for f in (*LAYOUTS, *CURVE_FAMILIES)
    }
    if all(rows is None for rows in tables.values()):
        return engine
    frames = {f: rows for f, rows in tables.items() if rows is not None and len(rows)}  # none: all pooled
    curves = framework_curves(transfer.curve_groups, frames) if transfer is not None else None
    return _with_tiers(engine, framework, framework_tier(engine.measured, framework, frames), curves)


def _with_tiers(engine: Any, framework: str, measured: MeasuredTier, curves: Any) -> Any:
    """``engine`` with ``framework``'s measured tier and transfer curves, its lattices its own
    (``lattice_cache.engine_identity`` names the framework)."""
    from components.opmodel.transfer import TransferTier

    transfer = None
    if engine.transfer is not None:
        # a framework's curves answer the sites it measured, not another model's site: the nearest-site
        # hold was chosen on the pooled tables (every framework's median); from one framework's few sites it
        # carried vLLM's fp8 MoE kernels of another model (0.03-0.13 of the roofline) to gpt-oss-120b,
        # 5-10x the spec prior (docs/engines.md "silicon11")
        transfer = TransferTier(measured, None, engine.transfer.model, nearest=False)
        transfer.curve_groups = curves
        transfer.not_relatives = engine.transfer.not_relatives
    out = type(engine)(
        measured,
        engine.spec_model,
        engine.calibrations,
        engine.intervals,
        engine.meta,
        engine.store_dir,
        engine.fallback_util,
        transfer,
        engine.monotone,
        engine.lattices,
        engine.origin,
    )
    out.framework = framework
    return out
