"""The transfer tier: a GPU with no measured rows of a (family, dtype) regime, answered from its measured
relatives.

Each relative Y (a GPU of the store with rows of the regime) answers the question on itself -- its measured
tier: an exact hit or an interpolation of its own kernels -- and that time is carried over to the asked GPU X
by physics, ``t_X = t_Y * base_X / base_Y``, ``base = roofline time + the regime's latency floor`` (the fixed
cost of one kernel of the library, ``spec.latency_floors``). Why: the shape's own quirks (kernel choice, tile
quantisation, split-K, L2 residency) travel with the relative's measurement; only what differs between the two
GPUs is modelled. A small ridge correction of ``log(t_X / carried)`` on log ratios of the two GPUs' peaks,
bandwidth, SMs, L2 and clocks and the question's regime features may then shift it (``transfer_fit.py`` fits
it leave-one-GPU-out and keeps it only where it beats plain physics on the training GPUs). The k nearest
relatives by spec distance (``spec_distance``) are blended geometrically, weighted by similarity and by each
relative's own transfer error on the training side.

The learned part (settings, floors, corrections, relative errors, achievable peaks) is plain JSON
(``transfer.json``) beside the engine; without it the tier is plain sibling physics with the store's floors.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from components.common.lazy import lazy_module
from components.opmodel import l2_resident
from components.opmodel.curve_table import CURVE_FAMILIES, CurveTable, shape_keys
from components.opmodel.row_memo import RowMemo, shape_key
from components.physics import roofline as physics

# pandas loads where a table is built from rows: a question answered from saved tables needs none of it
pd = lazy_module("pandas")

TRANSFER_FILE = "transfer.json"
DEFAULT_FLOOR_US = 3.0  # the sibling rule (roof + 3 us) where no floor was learned for a regime
# spec distance: how much each difference between two spec sheets counts (octaves of a ratio, or a flat cost).
# The pipe's peak and the DRAM bandwidth enter as their ratio (the ridge point: FLOPs per byte where the
# kernel turns compute-bound), not one by one: a GPU with more of every peak then has the same relatives,
# weighted alike, and since each carried answer shrinks with its roofline, never a slower blend.
DISTANCE_WEIGHTS: dict[str, float] = {
    "vendor": 3.0,
    "architecture": 1.0,
    "memory_type": 0.5,
    "ridge": 1.5,
    "sms": 0.5,
    "clock": 0.5,
    "l2": 0.25,
}
SAME_SPEC_TOLERANCE = 0.01  # two spec figures this close are one (``identical_pipe``)
MAX_REMEMBERED = 4096  # relative answers a tier keeps (``TransferTier.relative_answer``) before forgetting


@dataclass(frozen=True)
class TransferSettings:
    """How one family transfers: relatives blended, similarity temperature, the correction's ridge (None =
    plain sibling physics), and ``near``: where a relative of the asked GPU's generation answers a row, it
    answers alone (the ``k`` nearest of them; a far relative's other kernels no longer dilute it), the ``k``
    nearest of all elsewhere."""

    k: int = 1
    tau: float = 1.0
    ridge: float | None = None
    near: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> TransferSettings:
        data = data or {}
        ridge = data.get("ridge")
        return cls(
            int(data.get("k", 1)),
            float(data.get("tau", 1.0)),
            None if ridge is None else float(ridge),
            bool(data.get("near", False)),
        )


NEAR_PLAIN = TransferSettings(k=1, near=True)  # a relative of the asked GPU's generation alone, plain physics


@dataclass
class TransferModel:
    """What the transfer tier learned: per family its settings and correction coefficients, per regime its
    latency floor, per relative its own train-side transfer error, per pipe the achievable share of the
    peak."""

    settings: dict[str, TransferSettings] = field(default_factory=dict)
    corrections: dict[str, list[float]] = field(default_factory=dict)  # family -> ridge coefficients
    floors: dict[str, float] = field(default_factory=dict)  # regime (family|pipe|dtype) -> us
    relative_error: dict[str, float] = field(default_factory=dict)  # device -> median |log ratio| as relative
    achievable: dict[str, float] = field(default_factory=dict)  # "dram" | "tensor|bf16" ... -> share of peak
    meta: dict[str, Any] = field(default_factory=dict)
    # family|dtype[|kv] -> GPUs whose table of that regime measured another kernel than their relatives'
    # (``transfer_fit.inconsistent_relatives``): no relative there
    inconsistent: dict[str, list[str]] = field(default_factory=dict)
    # family -> {"tier": transfer | blend | spec, inner scores}: the answer where no relative is of the asked
    # GPU's generation (``tier_choice``); absent: the transfer tier's
    far: dict[str, dict[str, Any]] = field(default_factory=dict)
    # family -> (low, high) quantiles of log(actual / answer) over the inner leave-one-GPU-out answers
    intervals: dict[str, list[float]] = field(default_factory=dict)
    # family -> the kin choice and its inner and nested scores (``tier_choice.choose_kin``; fitted on request,
    # ``fit_transfer(kin=True)``): a record of whether a generation jump within one line (Hopper for
    # Blackwell) would be better answered apart from the far cases. The engine does not apply it: measured
    # on the training GPUs, it did not win (docs/transfer-tier.md, branch transfer7)
    kin: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the clock (MHz) the floors are stated at: a kernel's fixed cost is a count of cycles (launch, prologue,
    # epilogue, the tail wave's sync), so a GPU's floor is ``floors[key] * floor_clock_mhz / its boost clock``
    # (the fastest kernels of a regime: A100 bf16 decode attention 12.7 us, H100 8.3, L40S 7.0 at 1410,
    # 1980, 2520 MHz). None: the floors are one time in us on every GPU (a transfer.json written before)
    floor_clock_mhz: float | None = None
    # family -> the settings where a relative of the asked GPU's generation answers the regime (H100 for
    # H200), chosen on the inner answers of that standing only (``transfer_fit.choose_settings``); absent:
    # that relative alone by plain physics (the sibling rule, no evidence to do otherwise). The far
    # standing's are ``settings``: one choice for both let a blend that helps far GPUs (k = 3) dilute a near
    # relative's answer with other generations' kernels
    near_settings: dict[str, TransferSettings] = field(default_factory=dict)
    # the usable share of the L2 for a kernel's working set (``l2_resident``): the carried ratio reads the
    # memory side at the L2's bandwidth for the bytes the L2 holds, on both GPUs; None: DRAM only
    l2_capacity: float | None = None
    # family -> p joining the compute and memory sides of its carried ratio (``pipe_overlap``); absent: max
    overlap: dict[str, float] = field(default_factory=dict)

    def settings_of(self, family: str, near: bool = False) -> TransferSettings:
        """The family's settings for the asked GPU's standing in the regime (``near``: a relative of its
        generation answers)."""
        if near:
            return self.near_settings.get(family, NEAR_PLAIN)
        return self.settings.get(family, TransferSettings())

    def corrections_of(self, family: str, near: bool = False) -> list[float] | None:
        return self.corrections.get(f"{family}|near" if near else family)

    def floor_of(self, key: str, spec: Any = None) -> float:
        """The regime's latency floor in us on the GPU ``spec`` (at its boost clock when the floors are
        stated at a clock; ``spec`` None or without a clock: as stated)."""
        floor = float(self.floors.get(key, self.floors.get(key.split("|")[0], DEFAULT_FLOOR_US)))
        clock = getattr(spec, "boost_clock_mhz", None)
        if self.floor_clock_mhz and clock:
            floor *= self.floor_clock_mhz / float(clock)
        return floor

    def save(self, folder: Path) -> None:
        data = {
            "settings": {f: asdict(s) for f, s in self.settings.items()},
            "corrections": self.corrections,
            "floors": self.floors,
            "relative_error": self.relative_error,
            "achievable": self.achievable,
            "meta": self.meta,
            "inconsistent": self.inconsistent,
            "far": self.far,
            "intervals": self.intervals,
            "kin": self.kin,
            "floor_clock_mhz": self.floor_clock_mhz,
            "near_settings": {f: asdict(s) for f, s in self.near_settings.items()},
            "l2_capacity": self.l2_capacity,
            "overlap": self.overlap,
        }
        (Path(folder) / TRANSFER_FILE).write_text(json.dumps(data, indent=1, sort_keys=True))

    @classmethod
    def load(cls, folder: Path) -> TransferModel | None:
        path = Path(folder) / TRANSFER_FILE
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        return cls(
            {f: TransferSettings.from_dict(s) for f, s in data.get("settings", {}).items()},
            {f: [float(x) for x in c] for f, c in data.get("corrections", {}).items()},
            {k: float(v) for k, v in data.get("floors", {}).items()},
            {k: float(v) for k, v in data.get("relative_error", {}).items()},
            {k: float(v) for k, v in data.get("achievable", {}).items()},
            dict(data.get("meta", {})),
            {k: [str(d) for d in v] for k, v in data.get("inconsistent", {}).items()},
            dict(data.get("far", {})),
            {k: [float(x) for x in v] for k, v in data.get("intervals", {}).items()},
            dict(data.get("kin", {})),
            None if data.get("floor_clock_mhz") is None else float(data["floor_clock_mhz"]),
            {f: TransferSettings.from_dict(s) for f, s in data.get("near_settings", {}).items()},
            None if data.get("l2_capacity") is None else float(data["l2_capacity"]),
            {f: float(p) for f, p in data.get("overlap", {}).items()},
        )


def regime_key(family: str, dtype: str, kv: str | None) -> str:
    """``family|dtype[|kv dtype]``: one regime of measured rows (attention's per KV-cache dtype too)."""
    return "|".join(x for x in (family, dtype, kv) if x)


def _log2_ratio(a: float | None, b: float | None) -> float:
    return abs(float(np.log2(a / b))) if a and b else 2.0


def spec_distance(x: Any, y: Any, dtype: str) -> float:
    """How unlike two spec sheets are for ``dtype``'s work (0 = the same physics)."""
    w = DISTANCE_WEIGHTS
    d = w["vendor"] * (x.vendor != y.vendor) + w["architecture"] * (x.architecture != y.architecture)
    d += w["memory_type"] * (str(x.memory_type).lower() != str(y.memory_type).lower())
    ridge_x = physics.pipe_for(dtype, x).peak_flops / float(x.dram_gbps)
    ridge_y = physics.pipe_for(dtype, y).peak_flops / float(y.dram_gbps)
    d += w["ridge"] * _log2_ratio(ridge_x, ridge_y) + w["sms"] * _log2_ratio(x.sms, y.sms)
    d += w["clock"] * _log2_ratio(x.boost_clock_mhz, y.boost_clock_mhz) + w["l2"] * _log2_ratio(
        x.l2_mb, y.l2_mb
    )
    return float(d)


def _same(a: float | None, b: float | None) -> bool:
    return bool(a and b and abs(float(a) / float(b) - 1.0) <= SAME_SPEC_TOLERANCE)


def identical_pipe(x: Any, y: Any, roof_x: physics.Roofline, roof_y: physics.Roofline) -> np.ndarray:
    """Per row: the relative ``y`` is ``x``'s twin for the row's dtype -- one vendor and architecture (one
    kernel library), the same SMs, clock and L2 (the same waves, tile quantisation and fixed costs) and the
    same peak on the dtype's pipe -- so only DRAM may differ (H200 from H100: 4.8 vs 3.35 TB/s). A twin's
    time beyond its roofline is carried unchanged (``carried``); a twin answers its rows alone. Why apart: a
    blend chosen for relatives of another configuration (MI300X from MI308X, 80 of 304 CUs) diluted what a
    twin measured with other generations' kernels."""
    from components.opmodel.tier_choice import near

    n = len(roof_x.time_us)
    same = near(x, y) and _same(x.sms, y.sms) and _same(x.boost_clock_mhz, y.boost_clock_mhz)
    same = same and _same(x.l2_mb, y.l2_mb) and _same(roof_x.peak_flops, roof_y.peak_flops)
    return np.full(n, bool(same))


def correction_features(roof_x: physics.Roofline, roof_y: physics.Roofline, x: Any, y: Any) -> np.ndarray:
    """Per row: the log ratio of the two GPUs' peaks on the side the row is bound on (the pipe's for
    compute-bound rows, DRAM's for memory-bound ones), of SMs and (memory-bound rows) of L2 size at half
    weight (the ridge then prefers the bound pipe's ratio: with few GPUs the pair-level ratios are
    collinear), and the bound ratio times the question's regime on X (log roofline time: launch-bound kernels
    shift less)."""
    n = len(roof_x.time_us)
    peak = np.log(roof_x.peak_flops / roof_y.peak_flops)
    dram = np.log(roof_x.peak_bps / roof_y.peak_bps)
    compute = (roof_x.compute_us >= roof_x.memory_us).astype(float)
    bound = compute * peak + (1.0 - compute) * dram
    size = np.clip(np.log2(np.maximum(roof_x.time_us, 1e-3)), -10.0, 20.0) / 10.0
    columns = [
        compute * peak,
        (1.0 - compute) * dram,
        np.full(n, 0.5 * np.log(x.sms / y.sms)),
        (1.0 - compute) * 0.5 * np.log(float(x.l2_mb) / float(y.l2_mb)),
        bound * size,
    ]
    return np.column_stack(columns)


@dataclass
class Carried:
    """One relative's answer carried over to the asked GPU."""

    device: str
    distance: float
    duration_us: np.ndarray  # NaN where the relative has no answer
    exact: np.ndarray  # the relative measured this very shape
    features: np.ndarray  # correction features per row
    held: np.ndarray | None = None  # past the relative's reach: its efficiency held (``reach``)
    near: bool = False  # of the asked GPU's generation (``tier_choice.near``)
    identical: np.ndarray | None = None  # per row: a twin of the asked GPU (``identical_pipe``)
    # the answer carried by the roofline ratio (a twin's ``duration_us`` keeps its time beyond the roofline
    # instead): the fit's statistics of how a ratio carry errs (relative errors, consistency, the correction)
    ratio_us: np.ndarray | None = None
    own_us: np.ndarray | None = None  # the relative's own answer before the carry (the fit re-carries it)

    def by_ratio(self) -> np.ndarray:
        return self.duration_us if self.ratio_us is None else self.ratio_us


class TransferTier:
    """Relatives of the store (measured tier + curve tables of the families without a layout) carried over."""

    def __init__(
        self,
        measured: Any,
        curves: dict[str, pd.DataFrame] | None,
        model: TransferModel | None,
        curve_tables: dict[tuple, CurveTable] | None = None,
        hold: bool = True,
        twins: bool = True,
        nearest: bool = True,
    ):
        """``curve_tables``: shared by tiers whose curves hold the same rows per GPU (a leave-one-GPU-out
        bench's folds), built once per (family, GPU, dtype). ``hold``: a relative answers past its reach with
        its efficiency held (``reach``); off, it answers only near its own kernels (the fit's pairs: settings
        and corrections are learned where relatives measured; the issue's sibling rule). ``nearest`` (with
        ``hold``): a curve family's relative answers a site it never measured from its nearest site
        (``CurveTable.resolve``); off for one serving framework's own tables (``framework_tables``)."""
        self.measured = measured  # components.opmodel.measured.MeasuredTier
        self.hold = hold
        self.nearest = nearest
        self.twins = twins  # off: a twin is carried by the ratio like any relative (the sibling rule)
        self.model = model or TransferModel()
        self.curve_groups: dict[tuple, pd.DataFrame] = {}
        for family, frame in (curves or {}).items():
            if family not in CURVE_FAMILIES:
                continue
            for (device, dtype), part in frame.groupby(["device_id", "dtype"], sort=True, observed=True):
                self.curve_groups[(family, str(device), str(dtype))] = part
        self._curves: dict[tuple, CurveTable] = {} if curve_tables is None else curve_tables
        # measured groups no other GPU is answered from: the store's measured-only rows (NeuSight's, which
        # the model was fitted without), as (family, device, dtype, kv dtype | None)
        self.not_relatives: frozenset[tuple] = frozenset()
        # a relative's answers per question and per row (``row_memo``): every GPU it is a relative of asks it
        # the same shapes (a whole-catalog rank asks ~90 GPUs the step grids of one model, in other batches)
        self._answers: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._rows = RowMemo()

    def share_answers(self, memo: dict) -> None:
        """Keep the relatives' answers in ``memo`` (a leave-one-GPU-out bench's, across its folds), for a tier
        that does not hold (``hold`` off): its relative answers read only the relative's own rows, which are
        the same in every fold whose held-out GPU is not that relative (``MeasuredTier.without`` shares the
        site tables; ``curve_tables`` the curves), so a fold answers what an earlier one asked once."""
        if self.hold:
            raise ValueError("a tier that holds answers past a relative's reach with the model's floors")
        self._answers = memo.setdefault("answers", {})
        self._rows = memo.setdefault("rows", RowMemo())

    def relatives(self, family: str, dtype: str, kv_dtype: str | None, spec: Any) -> list[tuple[str, float]]:
        """(device, spec distance) of every store GPU with measured rows of the regime, nearest first; the
        asked GPU itself (by physics) excluded."""
        from components.opmodel.measured import physics_key

        specs = self.measured.specs if self.measured is not None else {}
        own = physics_key(spec)
        kv = (kv_dtype or dtype) if family == "attention" else None
        apart = set(self.model.inconsistent.get(regime_key(family, dtype, kv), ()))
        out = []
        for device, other in specs.items():
            if physics_key(other) == own or device in apart or not self._has(family, device, dtype, kv_dtype):
                continue
            try:
                if physics.pipe_for(dtype, other).dtype != dtype:
                    continue
            except physics.PhysicsError:
                continue
            out.append((device, spec_distance(spec, other, dtype)))
        return sorted(out, key=lambda t: (t[1], t[0]))

    def far_choice(self, family: str, dtype: str, kv_dtype: str | None, spec: Any) -> str:
        """``transfer`` where a relative of the regime is of the asked GPU's generation, else the family's far
        choice (``tier_choice``: transfer, blend or spec). A relative of another generation of the GPU's line
        (``tier_choice.kin``: Hopper for Blackwell) is far too: a choice of its own did not win on the
        training GPUs (``TransferModel.kin``)."""
        from components.opmodel.tier_choice import near

        found = self.relatives(family, dtype, kv_dtype, spec)
        if any(near(spec, self.measured.specs[d]) for d, _ in found):
            return "transfer"
        return str(self.model.far.get(family, {}).get("tier", "transfer"))

    def _has(self, family: str, device: str, dtype: str, kv_dtype: str | None) -> bool:
        if family in CURVE_FAMILIES:
            return (family, device, dtype) in self.curve_groups
        kv = (kv_dtype or dtype) if family == "attention" else None
        key = (family, device, dtype, kv)
        return key in self.measured.groups and key not in self.not_relatives

    def relative_answer(
        self,
        family: str,
        device: str,
        dtype: str,
        shape: dict[str, Any],
        roof: physics.Roofline,
        kv: str | None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The relative's own answer at the shape (its measured tier): durations (NaN = none), exact hits and
        answers held past its reach (read-only: remembered per question, ``_answers``)."""
        key = (family, device, dtype, kv, shape_key(shape))
        found = self._answers.get(key)
        if found is None:
            if len(self._answers) >= MAX_REMEMBERED:
                self._answers.clear()
            question = (family, device, dtype, kv)
            found = self._rows.answer(
                question,
                shape,
                len(roof.time_us),
                lambda part, rows: self._relative_answer(question, part, roof.time_us[rows]),
            ) or self._relative_answer(question, shape, roof.time_us)
            for array in found:
                array.setflags(write=False)
            self._answers[key] = found
        return found

    def _relative_answer(
        self, question: tuple[str, str, str, str | None], shape: dict[str, Any], roof_us: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        family, device, dtype, kv = question
        spec = self.measured.specs[device]
        if family in CURVE_FAMILIES:
            key = (family, device, dtype)
            if key not in self._curves:
                self._curves[key] = CurveTable(family, self.curve_groups[key], spec, dtype)
            # past its sites (``hold``): the nearest site's efficiency, held like a GEMM's past its reach
            nearest = self.hold and self.nearest
            duration, exact, held = self._curves[key].resolve(shape, roof_us, nearest=nearest)
            return (
                np.array(duration, dtype="float64"),
                np.array(exact, dtype=bool),
                np.array(held, dtype=bool),
            )
        table = self.measured.table(family, device, dtype, kv if family == "attention" else None)
        resolved = table.resolve(shape, roof_us)
        duration = np.array(resolved.duration_us, dtype="float64")
        windowed = np.zeros(len(duration), bool)
        if self.hold:  # a window it never measured: its full kernel, carried by the roofline ratio
            windowed = self._windowless(question, table, shape, roof_us, duration)
        past = np.flatnonzero(~np.isfinite(duration) & ~windowed)
        if len(past) and self.hold:  # past its reach: efficiency held from its measured extent (``reach``)
            from components.opmodel.reach import held_answer
            from components.opmodel.spec import regime

            part = {k: np.broadcast_to(np.asarray(v), (len(duration),))[past] for k, v in shape.items()}
            floor = self.model.floor_of(regime(family, dtype, spec), spec)
            duration[past] = held_answer(table, part, roof_us[past], floor)
        held = windowed & np.isfinite(duration)
        held[past] = self.hold & np.isfinite(duration[past])
        return duration, np.array(resolved.exact, dtype=bool) & ~windowed, held

    def _windowless(
        self,
        question: tuple[str, str, str, str | None],
        table: Any,
        shape: dict[str, Any],
        roof_us: np.ndarray,
        duration: np.ndarray,
    ) -> np.ndarray:
        """Attention rows whose sliding window the relative never measured (``reach.windowless``), answered
        in ``duration`` (in place) from its full kernel at the keys the window reads, times ``base(shape) /
        base(restated)`` (roofline + floor on the relative); the rows so answered."""
        from components.opmodel.reach import windowless
        from components.opmodel.spec import regime

        rows, restated = windowless(table, shape, len(roof_us))
        if not rows.any():
            return rows
        family, device, dtype, kv = question
        spec = self.measured.specs[device]
        part = {k: np.asarray(v)[rows] for k, v in restated.items()}
        numeric = {k: v for k, v in part.items() if k in shape_keys(family)}
        roof_c = physics.roofline(family, dtype, numeric, spec, kv).time_us
        at_c, _, _ = self._relative_answer(question, part, roof_c)
        floor = self.model.floor_of(regime(family, dtype, spec), spec)
        duration[rows] = at_c * (roof_us[rows] + floor) / (roof_c + floor)
        return rows

    def carried(
        self,
        family: str,
        dtype: str,
        shape: dict[str, Any],
        spec: Any,
        roof_x: physics.Roofline,
        kv: str | None,
        device: str,
        distance: float,
    ) -> Carried:
        """Relative ``device``'s answer, times base_X / base_Y (roofline + the regime's latency floor)."""
        from components.opmodel.spec import regime
        from components.opmodel.tier_choice import near

        other = self.measured.specs[device]
        numeric = {k: v for k, v in shape.items() if k in shape_keys(family)}
        roof_y = physics.roofline(family, dtype, numeric, other, kv)
        t_y, exact, held = self.relative_answer(family, device, dtype, shape, roof_y, kv)
        floors = (
            self.model.floor_of(regime(family, dtype, spec), spec),
            self.model.floor_of(regime(family, dtype, other), other),
        )
        features = correction_features(roof_x, roof_y, spec, other)
        carry = (self.model.l2_capacity, self.twins, self.model.overlap.get(family))
        duration, by_ratio, same = l2_resident.carry_times(
            t_y, (roof_x, roof_y), (spec, other), floors, *carry
        )
        return Carried(
            device, distance, duration, exact, features, held, near(spec, other), same, by_ratio, t_y
        )

    def resolve(
        self,
        family: str,
        dtype: str,
        shape: dict[str, Any],
        spec: Any,
        roof: physics.Roofline,
        kv_dtype: str | None = None,
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Per row: the blended transfer runtime (NaN where no relative answers) and the support text; None
        when the GPU has no relative in the regime."""
        if self.measured is None:
            return None
        kv = (kv_dtype or dtype) if family == "attention" else None
        found = self.relatives(family, dtype, kv, spec)
        if not found:
            return None
        carried = [self.carried(family, dtype, shape, spec, roof, kv, d, dist) for d, dist in found]
        own = any(c.near for c in carried)
        settings = self.model.settings_of(family, own)
        duration, used = blend(
            carried, settings, self.model.corrections_of(family, own), self.model.relative_error
        )
        return duration, support_text(carried, used, settings)


def blend(
    carried: list[Carried],
    settings: TransferSettings,
    coefficients: list[float] | None,
    relative_error: dict[str, float],
) -> tuple[np.ndarray, np.ndarray]:
    """Geometric blend per row of the ``settings.k`` nearest relatives that answer it (weights: similarity
    ``exp(-distance / tau)`` over the relative's own transfer error), each corrected when a correction was
    kept. Returns (duration, used: bool matrix relatives x rows)."""
    n = len(carried[0].duration_us)
    logs = np.full((len(carried), n), np.nan)
    for i, c in enumerate(carried):
        value = np.log(c.duration_us)
        if settings.ridge is not None and coefficients:
            value = value + c.features @ np.asarray(coefficients)
        logs[i] = value
    answered = np.isfinite(logs)
    # rows a relative answers on the asked GPU's very pipe: those relatives alone, plain physics (the issue's
    # sibling rule; nothing differs between the two GPUs there for a correction or another relative to add)
    same = answered & np.array(
        [c.identical if c.identical is not None else np.zeros(n, bool) for c in carried]
    )
    for i, c in enumerate(carried):
        if settings.ridge is not None and coefficients and same[i].any():
            logs[i, same[i]] = np.log(c.duration_us[same[i]])
    answered = np.where(same.any(axis=0), same, answered)
    if settings.near:  # rows a relative of the asked GPU's generation answers: those relatives alone
        own = answered & np.array([c.near for c in carried], dtype=bool)[:, None]
        answered = np.where(own.any(axis=0), own, answered)
    rank = np.cumsum(answered, axis=0)
    used = answered & (rank <= settings.k)
    weights = np.array(
        [np.exp(-c.distance / settings.tau) / (0.05 + relative_error.get(c.device, 0.1)) for c in carried]
    )[:, None]
    w = np.where(used, weights, 0.0)
    total = w.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (np.where(used, logs, 0.0) * w).sum(axis=0) / total
    return np.where(total > 0, np.exp(mean), np.nan), used


def support_text(carried: list[Carried], used: np.ndarray, settings: TransferSettings) -> np.ndarray:
    """'carried over from H100 (measured), H200 (interpolated) by roofline ratio' per row."""
    n = used.shape[1]
    how = " by roofline ratio" + ("" if settings.ridge is None else ", corrected for the spec differences")
    same = [c.identical if c.identical is not None else np.zeros(n, bool) for c in carried]
    twin = (used & np.array(same, dtype=bool)).any(axis=0)  # a twin answers alone, uncorrected
    how = np.where(twin, " (a twin: its time beyond the roofline kept)", how).astype(object)
    parts = np.full(n, "", dtype=object)
    for i, c in enumerate(carried):
        label = np.where(c.exact, f"{c.device} (measured)", f"{c.device} (interpolated)")
        if c.held is not None:
            label = np.where(c.held, f"{c.device} (held past its measured range)", label)
        parts = np.where(used[i], np.where(parts == "", label, parts + ", " + label), parts)
    return np.where(parts == "", "", "carried over from " + parts + how).astype(object)
