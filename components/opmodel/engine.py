"""The op engine: one runtime per question from the best tier that can answer it, never against physics.

Per row: **measured** (the GPU's own measured kernels near the question, ``measured.py``) > **calibrated**
(the spec tier shifted by K profiled rows of the GPU, ``calibrated.py``) > **transfer** (the GPU's measured
relatives' answers carried over by physics, ``transfer.py``) > **spec** (the efficiency learned across every
measured GPU, ``spec.py``). Each tier gives an efficiency ``util = roofline time / runtime``; the runtime is
``roofline / util``, clamped at the roofline (``physics.clamp``) and, but for a measured kernel returned
verbatim, at the achievable share of each pipe's peak learned from measured kernels (``achievable.py``), so
no rate derived from it reaches a datasheet peak. The interval is each tier's held-out residual quantiles
(log ratio measured/predicted), stored with the engine.

A folder holds the engine: ``store/`` (the measured store), ``spec.json`` + ``spec_<family>.txt`` (the spec
model), ``calibrations.json`` (per GPU, per regime), ``transfer.json`` (the transfer tier) and ``engine.json``
(intervals, provenance). No pickle.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from components.physics import roofline as physics

if TYPE_CHECKING:
    from components.opmodel.spec import SpecRows

ENGINE_FILE = "engine.json"
# (low, high) quantiles of log(measured / predicted) per tier when no held-out figure was stored (wide on
# purpose)
DEFAULT_INTERVALS: dict[str, tuple[float, float]] = {
    "exact": (-0.08, 0.08),
    "measured": (-0.15, 0.15),
    "calibrated": (-0.25, 0.25),
    "transfer": (-0.3, 0.3),
    "spec": (-0.45, 0.45),
}
ENGINE_FAMILIES: tuple[str, ...] = physics.FAMILIES  # the registry's engine families
LABELS: frozenset[str] = frozenset({"distribution"})  # shape columns that are names, not sizes
FALLBACK_UTIL = 0.5  # no store, no model: half the speed of light, said so in the note


@dataclass
class OpTimes:
    duration_us: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    tier: np.ndarray  # object: measured | calibrated | transfer | spec
    support: np.ndarray  # object: what the answer rests on
    bound_pipe: np.ndarray
    note: np.ndarray  # object: emulation and the like, None where nothing to say
    roof: physics.Roofline
    # object: what the answer had no measurement of -- None (a measured kernel or an interpolation of the
    # GPU's own), "the shape" (the GPU was measured in the regime, not near this shape), "the GPU" (answered
    # from its relatives or the spec model), "the GPU and the dtype" (no measured GPU has the regime)
    unseen: np.ndarray | None = None


def unseen_of(tier: np.ndarray, gpu_measured: bool, has_relatives: bool) -> np.ndarray:
    """Per row, what was unseen (``OpTimes.unseen``) from its tier and what the store holds of the regime."""
    beyond = "the shape" if gpu_measured else ("the GPU" if has_relatives else "the GPU and the dtype")
    return np.where(np.isin(tier, ("measured", "calibrated")), None, beyond).astype(object)


class OpEngine:
    """Measured store + spec model + calibrations, answering whole batches with array work."""

    def __init__(
        self,
        measured: Any = None,
        spec_model: Any = None,
        calibrations: dict | None = None,
        intervals: dict[str, tuple[float, float]] | None = None,
        meta: dict | None = None,
        store_dir: Path | None = None,
        fallback_util: float = FALLBACK_UTIL,
        transfer: Any = None,
        monotone: bool = True,
        lattices: Path | None = None,
        origin: Path | None = None,
    ) -> None:
        self.measured = measured  # components.opmodel.measured.MeasuredTier | None
        self.spec_model = spec_model  # components.opmodel.spec.SpecModel | None
        self.calibrations = calibrations or {}  # device_id -> {regime: {"log_shift": x, "rows": n}}
        self.intervals = {**DEFAULT_INTERVALS, **(intervals or {})}
        self.meta = meta or {}
        self.store_dir = store_dir
        self.fallback_util = fallback_util  # 1.0: the training-free roofline itself
        self.transfer = transfer  # components.opmodel.transfer.TransferTier | None
        self.monotone = monotone  # answers under the monotone envelope (envelope.py)
        self.lattices = lattices  # where the envelope's lattices are saved across processes (None: not)
        self.origin = origin  # the engine folder it was loaded from (None: built in memory)
        self.framework: str | None = None  # the serving framework whose measured rows it reads (None: pooled)
        from components.opmodel.envelope import Envelope

        files = None
        if lattices is not None:
            from components.opmodel.lattice_cache import LatticeFiles, engine_identity

            files = LatticeFiles(Path(lattices), lambda: engine_identity(self, origin))
        self.envelope = Envelope(files)

    # ---------------------------------------------------------------------------------------- persistence

    @classmethod
    def from_store(
        cls,
        store_dir: Path,
        spec_model: Any = None,
        transfer_model: Any = None,
        cache_dir: Path | None = None,
        measured_only: bool = True,
        **kwargs: Any,
    ) -> OpEngine:
        """An engine over a saved store. With ``cache_dir`` (the CLI's and the server's: the state folder's
        cache) it reads only the groups its questions ask for: the store is split once per (family, GPU,
        dtype) there (``store_cache``); without one, or where it cannot be written, it reads the whole
        store."""
        from components.opmodel.measured import LAYOUTS, MeasuredTier
        from components.opmodel.store_cache import open_split
        from components.opmodel.transfer import CURVE_FAMILIES, TransferTier

        families = (tuple(LAYOUTS), tuple(CURVE_FAMILIES))
        try:
            split = (
                None
                if cache_dir is None or not measured_only
                else open_split(Path(store_dir), Path(cache_dir), *families)
            )
        except OSError:  # a read-only cache folder: read the whole store
            split = None
        if split is None:
            from components.opmodel.store import load_store

            store = load_store(Path(store_dir), (*families[0], *families[1]), measured_only)
            engine = cls.from_frames(store, spec_model, transfer_model, store_dir=Path(store_dir), **kwargs)
        else:
            groups, curves, devices = split
            measured = MeasuredTier.from_groups(groups, _specs_of(devices))
            transfer = TransferTier(measured, {}, transfer_model)
            transfer.curve_groups = curves  # the keys TransferTier groups whole frames by, read on first use
            engine = cls(
                measured,
                spec_model,
                transfer=transfer,
                store_dir=Path(store_dir),
                lattices=Path(cache_dir) if cache_dir is not None else None,  # saved beside the split
                **kwargs,
            )
        if measured_only and engine.transfer is not None:  # NeuSight's rows answer their own GPU only
            from components.opmodel.store_cache import measured_only_groups

            engine.transfer.not_relatives = measured_only_groups(Path(store_dir))
        return engine

    @classmethod
    def from_frames(
        cls, store: dict, spec_model: Any = None, transfer_model: Any = None, **kwargs: Any
    ) -> OpEngine:
        """An engine over in-memory store frames ``{family: frame}`` (the measured tier, and the transfer tier
        over the same GPUs: plain sibling physics when no ``transfer_model`` was learned)."""
        from components.opmodel.measured import LAYOUTS, MeasuredTier
        from components.opmodel.transfer import CURVE_FAMILIES, TransferTier

        specs = _specs_of({str(d) for frame in store.values() for d in frame["device_id"].unique()})
        measured = MeasuredTier({f: v for f, v in store.items() if f in LAYOUTS}, specs)
        curves = {f: v for f, v in store.items() if f in CURVE_FAMILIES}
        transfer = TransferTier(measured, curves, transfer_model)
        return cls(measured, spec_model, transfer=transfer, **kwargs)

    def save(self, folder: Path) -> None:
        """Write the engine into ``folder`` (created; the caller makes the whole predictor folder atomic)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        if self.store_dir is not None and Path(self.store_dir).resolve() != (folder / "store").resolve():
            shutil.copytree(self.store_dir, folder / "store", dirs_exist_ok=True)
        if self.spec_model is not None:
            self.spec_model.save(folder)
        if self.transfer is not None and self.transfer.model.settings:
            self.transfer.model.save(folder)
        (folder / "calibrations.json").write_text(json.dumps(self.calibrations, indent=1, sort_keys=True))
        (folder / ENGINE_FILE).write_text(
            json.dumps(
                {
                    "intervals": self.intervals,
                    "meta": self.meta,
                    "has_store": (folder / "store").is_dir(),
                    "has_spec": self.spec_model is not None,
                },
                indent=1,
                sort_keys=True,
            )
        )

    @classmethod
    def load(cls, folder: Path, cache_dir: Path | None = None) -> OpEngine:
        """The engine saved in ``folder``; ``cache_dir``: where its store may be split (``from_store``)."""
        folder = Path(folder)
        info = json.loads((folder / ENGINE_FILE).read_text())
        spec_model = None
        if info.get("has_spec") and (folder / "spec.json").is_file():
            from components.opmodel.spec import SpecModel

            spec_model = SpecModel.load(folder)
        calibrations = (
            json.loads((folder / "calibrations.json").read_text())
            if (folder / "calibrations.json").is_file()
            else {}
        )
        intervals = {k: tuple(v) for k, v in info.get("intervals", {}).items()}
        if info.get("has_store") and (folder / "store").is_dir():
            from components.opmodel.transfer import TransferModel

            return cls.from_store(
                folder / "store",
                spec_model,
                TransferModel.load(folder),
                cache_dir,
                calibrations=calibrations,
                intervals=intervals,
                meta=info.get("meta"),
                origin=folder,
            )
        return cls(
            None, spec_model, calibrations, intervals, info.get("meta"), lattices=cache_dir, origin=folder
        )

    def with_calibrations(self, calibrations: dict) -> OpEngine:
        """The same engine with more GPUs' calibrations (a GPU's newer calibration replaces its older one)."""
        return OpEngine(
            self.measured,
            self.spec_model,
            {**self.calibrations, **calibrations},
            self.intervals,
            self.meta,
            self.store_dir,
            self.fallback_util,
            self.transfer,
            self.monotone,
            self.lattices,
            self.origin,
        )

    def for_framework(self, framework: str) -> OpEngine:
        """This engine answering a deployment served by ``framework`` (``framework_tables``): the same tiers,
        each measured group from the rows that framework measured where it did, else pooled; itself where
        the store keeps no per-framework rows (a store built before it kept them)."""
        cache = self.__dict__.setdefault("_frameworks", {})
        if framework not in cache:
            from components.opmodel.framework_tables import framework_engine

            cache[framework] = framework_engine(self, framework)
        return cache[framework]

    # ---------------------------------------------------------------------------------------- answering

    def spec_log_util(self, group: SpecRows) -> tuple[np.ndarray, str]:
        """The spec tier's log efficiency per row and its support text."""
        n, family = len(group.roof.time_us), group.family
        model = self.spec_model
        if model is not None and family in model.boosters:
            return model.predict_log_util(group)
        if model is not None:
            from components.opmodel.spec import regime

            key = regime(family, group.dtype, group.spec)
            if key in model.priors or family in model.priors:
                return (
                    np.full(n, model.priors.get(key, model.priors.get(family))),
                    f"spec prior of {key} ({model.rows.get(key, 0):,} measured rows; no learned shape model)",
                )
        if self.fallback_util >= 1.0:
            return np.zeros(n), "the roofline (speed of light; no measured data or learned model asked for)"
        return (
            np.full(n, np.log(self.fallback_util)),
            f"no measured data or learned model: {self.fallback_util:.0%} of the roofline speed",
        )

    def predict(
        self, family: str, dtype: str, shape: dict[str, Any], spec: Any, kv_dtype: str | None = None
    ) -> OpTimes:
        """Runtimes of rows of one (family, dtype, GPU); ``shape``: dimension name -> array or scalar.
        Answers of the learned tiers (calibrated, transfer, spec) are under the monotone envelope
        (``envelope.py``): no answer shorter than a smaller shape's of the same question. Measured-tier
        answers (exact hits and interpolations between the GPU's own kernels) are returned as measured: on
        the real tables the envelope moved them far from the measurement (A100 int4_wo exact hits 0% -> 54%
        MAPE, L40S int8_wo 0.3% -> 38%), because one slow lattice point lifts every larger shape."""
        from components.opmodel.envelope import AXES
        from components.opmodel.measured import BLOCK_SCALED, physics_key

        if family in ("linear", "bmm"):
            family = "gemm"
        times = self.raw_predict(family, dtype, shape, spec, kv_dtype)
        if not self.monotone or family not in AXES:
            return times
        block = family == "gemm" and times.roof.choice.dtype in BLOCK_SCALED
        n = len(times.duration_us)
        sizes = {k: np.broadcast_to(np.asarray(v), (n,)) for k, v in shape.items() if k not in LABELS}
        enveloped = np.array(times.duration_us, dtype="float64")
        # one lattice per label (MoE's routing distribution: each its own kernels' token sweep)
        for label, rows in label_groups({k: v for k, v in shape.items() if k in LABELS}, n):
            key = (dtype, kv_dtype, spec.id, physics_key(spec), *sorted(label.items()))

            def answer(lattice: dict[str, np.ndarray], label: dict = label) -> np.ndarray:
                return self.raw_predict(family, dtype, {**lattice, **label}, spec, kv_dtype).duration_us

            part = {k: v[rows] for k, v in sizes.items()}
            enveloped[rows] = self.envelope.apply(family, part, enveloped[rows], key, answer, block)
        enveloped = np.where(times.tier == "measured", times.duration_us, enveloped)
        enveloped = physics.clamp(enveloped, times.roof)
        times.hi = np.fmax(times.hi, enveloped)
        times.lo = np.fmin(times.lo, enveloped)
        times.duration_us = enveloped
        return times

    def raw_predict(
        self, family: str, dtype: str, shape: dict[str, Any], spec: Any, kv_dtype: str | None = None
    ) -> OpTimes:
        """The tiers' answers before the monotone envelope. The spec tier is asked only for the rows no
        measured kernel or relative answers (or that a blend needs): on a whole-catalog rank the transfer
        tier answers nearly every row, and walking the spec model's trees for them was a third of its op
        times (each row's answer is its own: the same with or without the others)."""
        if family in ("linear", "bmm"):
            family = "gemm"
        roof = physics.roofline(
            family, dtype, {k: v for k, v in shape.items() if k not in LABELS}, spec, kv_dtype
        )
        n = len(roof.time_us)
        eff_dtype = roof.choice.dtype
        # categorical columns (MoE's routing distribution) reach only the tiers that match them exactly
        labels = {
            k: np.broadcast_to(np.asarray(v, dtype=object), (n,)) for k, v in shape.items() if k in LABELS
        }
        arrays = {
            k: np.broadcast_to(np.asarray(v, dtype="float64"), (n,))
            for k, v in shape.items()
            if k not in LABELS
        }
        duration = np.full(n, np.nan)
        tier = np.full(n, "spec", dtype=object)
        support = np.full(n, None, dtype=object)
        q_lo, q_hi = np.full(n, np.nan), np.full(n, np.nan)
        resolved = None
        if self.measured is not None and family in ("gemm", "attention"):
            resolved = self.measured.resolve(
                family, eff_dtype, arrays, spec, roof.time_us, kv_dtype if family == "attention" else None
            )
        hit = np.zeros(n, bool) if resolved is None else np.isfinite(resolved.duration_us)
        if resolved is not None:
            self.fill_measured(resolved, hit, duration, tier, support, (q_lo, q_hi))
        free = np.flatnonzero(~hit)  # rows the calibrated (else the spec, then the transfer) tier answers
        calibrated = self._shift(family, eff_dtype, spec, kv_dtype)[2] is not None
        moved = (
            None
            if calibrated
            else self._transfer_rows(family, eff_dtype, arrays, labels, spec, kv_dtype, free)
        )
        need = ~hit
        if moved is not None and moved[2] == "transfer":
            need[free[np.isfinite(moved[0])]] = False
        if need.any():
            rows = np.flatnonzero(need)
            spec_us, name, text, q = self._spec_rows(family, eff_dtype, arrays, spec, roof, kv_dtype, rows)
            duration[rows], tier[rows], support[rows] = spec_us, name, text
            q_lo[rows], q_hi[rows] = q
        if moved is not None:
            from components.opmodel.tier_choice import combine

            value, text, choice = moved
            value = combine(choice, value, duration[free]) if choice == "blend" else value
            take = np.isfinite(value)
            where = free[take]
            duration[where], tier[where], support[where] = value[take], "transfer", text[take]
            # the family's inner leave-one-GPU-out residual quantiles where learned, else the tier's default
            learned = self.transfer.model.intervals.get(family)
            q_lo[where], q_hi[where] = learned or self.intervals["transfer"]
        exact_hit = np.zeros(n, bool) if resolved is None else resolved.exact
        duration = physics.clamp(duration, roof)
        text = roof.note
        if self.transfer is not None and self.transfer.model.achievable:
            from components.opmodel.achievable import cap_achievable

            architecture = getattr(spec, "architecture", None)
            learned = self.transfer.model.achievable
            capped, peak = cap_achievable(duration, roof, learned, architecture, family)
            duration = np.where(exact_hit, duration, capped)
            text = f"{text}; {peak}" if text else peak
        note = np.full(n, text, dtype=object)
        lo = physics.clamp(duration * np.exp(q_lo), roof)
        hi = np.maximum(duration * np.exp(q_hi), duration)
        has_relatives = self.transfer is not None and bool(
            self.transfer.relatives(family, eff_dtype, kv_dtype, spec)
        )
        unseen = unseen_of(tier, resolved is not None, has_relatives)
        return OpTimes(duration, lo, hi, tier, support, roof.bound_pipe, note, roof, unseen)

    def fill_measured(
        self,
        resolved: Any,
        hit: np.ndarray,
        duration: np.ndarray,
        tier: np.ndarray,
        support: np.ndarray,
        quantiles: tuple[np.ndarray, np.ndarray],
    ) -> None:
        """Fill, in place, the rows the GPU's own measured kernels answer (``hit``)."""
        duration[hit] = resolved.duration_us[hit]
        tier[hit] = "measured"
        exact = resolved.exact
        support[exact] = np.array(
            [
                f"measured kernel (median of its repeats; spread {s:.1%})"
                if np.isfinite(s)
                else "measured kernel"
                for s in resolved.spread[exact]
            ],
            dtype=object,
        )
        near = hit & ~exact
        pairs = zip(resolved.neighbours[near], resolved.distance[near], strict=False)
        support[near] = np.array(
            [
                f"interpolated from {k} measured site{'s' if k > 1 else ''} of "
                f"this GPU ({dist:.2g} octaves away)"
                if dist > 0
                else "interpolated along a measured sweep of this GPU"
                for k, dist in pairs
            ],
            dtype=object,
        )
        for mask, name in ((exact, "exact"), (near, "measured")):
            quantiles[0][mask], quantiles[1][mask] = self.intervals[name]

    def _shift(self, family: str, dtype: str, spec: Any, kv_dtype: str | None) -> tuple[dict, str, Any]:
        """(the GPU's calibration, the regime key, its shift of the regime: None where not calibrated)."""
        from components.opmodel.calibrated import shift_for
        from components.opmodel.spec import regime

        calibration = self.calibrations.get(spec.id, {})
        key = regime(family, dtype, spec)
        if family == "attention" and kv_dtype is not None and kv_dtype != dtype:
            key = f"{key}|kv={kv_dtype}"
        return calibration, key, shift_for(calibration, key)

    def _spec_rows(
        self,
        family: str,
        dtype: str,
        arrays: dict[str, np.ndarray],
        spec: Any,
        roof: physics.Roofline,
        kv_dtype: str | None,
        rows: np.ndarray,
    ) -> tuple[np.ndarray, str, str, tuple[float, float]]:
        """The spec tier's runtimes of ``rows``, shifted by the GPU's calibration of the regime where it has
        one: (runtimes, tier, support text, interval quantiles)."""
        from components.opmodel.calibrated import (
            apply_shift,
            correction_features,
            local_coords,
            local_residual,
            ridge_correction,
        )
        from components.opmodel.spec import SpecRows

        sub = {k: v[rows] for k, v in arrays.items()}
        part = roof_rows(roof, rows)
        log_util, text = self.spec_log_util(SpecRows(family, dtype, sub, spec, part, kv_dtype))
        calibration, key, shift = self._shift(family, dtype, spec, kv_dtype)
        name, q = "spec", self.intervals["spec"]
        if shift is not None:
            spec_only = log_util
            log_util = apply_shift(log_util, part.time_us, shift)
            ridge = (calibration.get("_ridge") or {}).get(family)
            if ridge:
                log_util = log_util + ridge_correction(
                    ridge, correction_features(family, sub, part, spec, spec_only)
                )
            log_util = log_util + local_residual(calibration, key, local_coords(family, sub, len(rows)))
            name, q = "calibrated", self.intervals["calibrated"]
            text = f"{text}; shifted by {int(shift['rows'])} profiled rows of this GPU"
        return part.time_us / np.exp(np.clip(log_util, None, 0.0)), name, text, q

    def _transfer_rows(
        self,
        family: str,
        dtype: str,
        arrays: dict[str, np.ndarray],
        labels: dict[str, np.ndarray],
        spec: Any,
        kv_dtype: str | None,
        rows: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, str] | None:
        """The transfer tier's answers of ``rows`` from the GPU's measured relatives: (runtimes, NaN where no
        relative answers; support text; the far choice, ``transfer`` or ``blend`` with the spec tier), None
        where it does not answer them."""
        if self.transfer is None or family not in ("gemm", "attention", "moe") or not len(rows):
            return None
        sub = {k: v[rows] for k, v in arrays.items()}
        roof = physics.roofline(family, dtype, sub, spec, kv_dtype)
        got = self.transfer.resolve(
            family, dtype, {**sub, **{k: v[rows] for k, v in labels.items()}}, spec, roof, kv_dtype
        )
        if got is None:
            return None
        value, text = got
        choice = self.transfer.far_choice(family, dtype, kv_dtype, spec)
        if choice == "spec":  # no relative of its generation, and the spec tier errs less there
            return None
        if choice == "blend":
            text = np.where(
                text == "", text, text + "; blended with the spec tier (no relative of its generation)"
            )
        return value, text, choice


def label_groups(labels: dict[str, Any], n: int) -> list[tuple[dict[str, Any], np.ndarray]]:
    """(label values, rows) per distinct combination of the label columns (one group of every row when
    there are none)."""
    if not labels:
        return [({}, np.arange(n))]
    names = sorted(labels)
    text = np.broadcast_to(np.asarray(labels[names[0]], dtype=object), (n,)).astype(str)
    for name in names[1:]:
        text = np.char.add(
            np.char.add(text, "\x1f"), np.broadcast_to(np.asarray(labels[name]), (n,)).astype(str)
        )
    keys, inverse = np.unique(text, return_inverse=True)
    return [
        (dict(zip(names, k.split("\x1f"), strict=True)), np.flatnonzero(inverse == i))
        for i, k in enumerate(keys)
    ]


def roof_rows(roof: physics.Roofline, rows: np.ndarray) -> physics.Roofline:
    """The roofline of ``rows`` of a batch (its per-row arrays taken, its GPU's peaks and pipe kept)."""
    from dataclasses import fields, replace

    n = len(roof.time_us)
    taken = {
        f.name: value[rows]
        for f in fields(roof)
        if isinstance(value := getattr(roof, f.name), np.ndarray) and value.shape[:1] == (n,)
    }
    return replace(roof, **taken)


def _specs_of(devices: Any) -> dict[str, Any]:
    """The catalog specs of the store's GPUs (those the catalog knows)."""
    from components.devices.catalog import load_catalog

    catalog = load_catalog()
    return {d: catalog.get(d) for d in devices if d in catalog}
