"""Features that transfer to GPUs a model never saw, and the pieces that compose a runtime from them.

Why: trees fed absolute device peaks (TFLOP/s, GB/s, clocks) learn "which training GPU is this" and
cannot extrapolate to a faster one (NeuSight's unseen H100: 115% MAPE). Here the learned part is a
bounded, dimensionless efficiency -- measured time over the analytical roofline time of the GPU
asked about -- and its inputs are counts and ratios that mean the same thing on every GPU:

- the kernel's own work: FLOPs, DRAM and tiled L2 bytes, arithmetic intensity, tile and CTA shape,
  precision, family; static-analysis counts of its source (``s_*``);
- how that work lands on the GPU's parallelism (counts, never rates): waves and tail efficiency,
  CTAs per SM and on the busiest SM, SM imbalance, active-SM fraction, FLOPs and bytes per SM;
- capacities relative to the working set: the DRAM footprint over L2 (and Infinity Cache) size,
  shared memory and threads per SM.

No input changes when only a GPU's compute or bandwidth changes, so the composed runtime
``roofline_time * exp(efficiency model) + launch floor`` is proportional to the roofline time
plus a constant: more compute or bandwidth, all else equal, can never predict a slower kernel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from components.common.lazy import lazy_module
from components.features.analytical import RATE_FREE_COLUMNS
from components.features.arrays import label_codes

pd = lazy_module("pandas")  # tables only: a single question's arrays load no pandas

# Device columns that are counts or capacities per SM (never a rate, a clock or a total peak).
DEVICE_COUNT_COLUMNS: tuple[str, ...] = (
    "dev_fp32_lanes_per_sm",
    "dev_l1_smem_per_sm_kb",
    "dev_max_smem_per_sm_kb",
    "dev_regs_per_sm",
    "dev_max_threads_per_sm",
    "dev_is_amd",
)
# Derived here from the columns above (all dimensionless or per-SM).
DERIVED_COLUMNS: tuple[str, ...] = (
    "t_flops_per_sm",
    "t_bytes_per_sm",
    "t_l2_over_dram_bytes",
    "t_footprint_over_l2",
    "t_footprint_over_llc",
    "t_sfu_per_flop",
    "t_tensor_share",
    "t_flops_per_cta",
    "t_base_over_boost_clock",
    "t_tdp_w_per_peak_tflops",
)
# Direction of each input's effect on the learned slowdown (time over roofline), from physics: busier
# SMs and more work per SM amortise launch and tail costs, a working set far beyond the caches gets
# no help from them, power- or clock-capped parts fall further below peak. Imposed as monotone
# constraints, they also stop trees from spending device-specific ratios (work per SM differs per
# GPU for one kernel) on memorising each training GPU's offset -- which does not transfer.
MONOTONE: dict[str, int] = {
    "f_wave_efficiency": -1,
    "f_active_sm_fraction": -1,
    "f_sm_imbalance": 1,
    "t_flops_per_sm": -1,
    "t_bytes_per_sm": -1,
    "t_flops_per_cta": -1,
    "t_footprint_over_l2": 1,
    "t_footprint_over_llc": 1,
    "t_base_over_boost_clock": -1,
    "t_tdp_w_per_peak_tflops": -1,
}
# Columns used to flag a query as outside the training data (per family ranges).
OOD_COLUMNS: tuple[str, ...] = (
    "f_flops",
    "f_dram_bytes_min",
    "f_arith_intensity",
    "f_waves",
    "t_flops_per_sm",
)
# Normalisers the runtime can be learned against: both scale with 1/peak, so composition stays monotone.
RUNTIME_NORMALISERS: dict[str, str] = {
    "roofline": "f_roofline_time_us",
    "pipes": "f_pipes_time_us",
    "pipes-overlap": "f_pipes_time_us",
}
# "pipes-overlap": the busiest-SM compute, DRAM and L2 times combined as a p-norm instead of a max --
# pipes that must both be busy overlap imperfectly, most visibly at the ridge point (sqrt(2) x the
# max there, ~the max far from it). Still a function of (time per pipe) only, so still monotone.
OVERLAP_P: float = 2.0


# The columns a prediction reads: a feature DataFrame (training, evaluation) or a dict of equal-length
# arrays (serving: no DataFrame per request). Every function below reads both, so there is one
# computation, not a training one and a serving copy kept in step by tests.
Columns = Mapping[str, Any]


def n_rows(cols: Columns) -> int:
    if isinstance(cols, pd.DataFrame):
        return len(cols)
    return len(next(iter(cols.values()))) if cols else 0


def numeric(cols: Columns, name: str, n: int | None = None) -> np.ndarray:
    """Column ``name`` as float64 (NaN where absent or not a number)."""
    value = cols.get(name)
    if value is None:
        return np.full(n_rows(cols) if n is None else n, np.nan)
    if isinstance(value, np.ndarray) and value.dtype.kind in "fiub":
        return value.astype("float64", copy=False)
    series = value if isinstance(value, pd.Series) else pd.Series(value)
    return pd.to_numeric(series, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)


def labels(cols: Columns, name: str, n: int | None = None) -> Any:
    """Column ``name`` as labels for ``map_labels``/``label_codes`` ("" where absent): a categorical
    column as its ``pd.Categorical`` (codes, no string per row), else an object array."""
    value = cols.get(name)
    if value is None:
        return np.full(n_rows(cols) if n is None else n, "", dtype=object)
    if isinstance(value, pd.Series):
        value = value.array if isinstance(value.dtype, pd.CategoricalDtype) else value.to_numpy(dtype=object)
    return value if isinstance(value, pd.Categorical) else np.asarray(value, dtype=object)


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        out = a / b
    return np.where(np.isfinite(out), out, np.nan)


def derived_features(cols: Columns) -> dict[str, np.ndarray]:
    """The ``t_*`` ratios of ``DERIVED_COLUMNS`` for each row (NaN where an input is missing)."""
    n = n_rows(cols)
    sms = numeric(cols, "dev_sms", n)
    flops, dram = numeric(cols, "f_flops", n), numeric(cols, "f_dram_bytes_min", n)
    l2_bytes = numeric(cols, "f_l2_bytes_tiled", n)
    l2_capacity = numeric(cols, "dev_l2_mb", n) * 1e6
    llc = numeric(cols, "dev_llc_mb", n)
    llc_capacity = np.where(llc > 0, llc * 1e6 + l2_capacity, l2_capacity)
    return {
        "t_flops_per_sm": _ratio(flops, sms),
        "t_bytes_per_sm": _ratio(dram, sms),
        "t_l2_over_dram_bytes": _ratio(l2_bytes, dram),
        "t_footprint_over_l2": _ratio(dram, l2_capacity),
        "t_footprint_over_llc": _ratio(dram, llc_capacity),
        "t_sfu_per_flop": _ratio(numeric(cols, "f_sfu_ops", n), flops),
        "t_tensor_share": _ratio(numeric(cols, "f_tensor_flops", n), flops),
        # Work per CTA (for a GEMM tile: 2 x tile area x K): long K-loops amortise prologue/epilogue.
        "t_flops_per_cta": _ratio(flops, numeric(cols, "f_ctas", n)),
        # How far below its boost clock a GPU sustains under load: power-capped inference cards
        # (P4, T4, L4) rated at a low base clock reach a small share of their spec-sheet peak.
        "t_base_over_boost_clock": _ratio(
            numeric(cols, "dev_base_clock_mhz", n), numeric(cols, "dev_boost_clock_mhz", n)
        ),
        # Power budget per unit of the kernel's peak: a card with few watts per TFLOP of the pipe
        # it uses cannot hold that pipe at full clock.
        "t_tdp_w_per_peak_tflops": _ratio(
            numeric(cols, "dev_tdp_w", n), numeric(cols, "f_peak_compute_flops", n) / 1e12
        ),
    }


def transfer_frame(cols: Columns, static_columns: list[str] | None = None) -> dict[str, np.ndarray]:
    """Every transferable numeric input of ``cols``: kernel, per-SM device, derived and static columns."""
    n = n_rows(cols)
    out = {c: numeric(cols, c, n) for c in (*RATE_FREE_COLUMNS, *DEVICE_COUNT_COLUMNS)}
    out.update(derived_features(cols))
    static = static_columns if static_columns is not None else sorted(c for c in cols if c.startswith("s_"))
    out.update({c: numeric(cols, c, n) for c in static})
    return out


def runtime_normaliser(cols: Columns, which: str) -> np.ndarray:
    """The analytical time (µs) runtime is learned against; NaN where the op has no formula."""
    if which not in RUNTIME_NORMALISERS:
        raise ValueError(f"runtime normaliser must be one of {', '.join(RUNTIME_NORMALISERS)}, not {which!r}")
    n = n_rows(cols)
    values = numeric(cols, RUNTIME_NORMALISERS[which], n)
    if which == "pipes-overlap":
        compute = numeric(cols, "f_compute_time_us", n) * np.nan_to_num(
            numeric(cols, "f_sm_imbalance", n), nan=1.0
        )
        pipes = np.column_stack(
            [compute, numeric(cols, "f_dram_time_us", n), numeric(cols, "f_l2_time_us", n)]
        )
        combined = np.power(
            np.nansum(np.power(np.nan_to_num(pipes, nan=0.0), OVERLAP_P), axis=1), 1.0 / OVERLAP_P
        )
        values = np.where(np.isfinite(values), combined, np.nan)
    return np.where(np.isfinite(values) & (values > 0), values, np.nan)


def launch_floors(frame: pd.DataFrame, duration: np.ndarray, min_rows: int = 50) -> dict[str, float]:
    """Launch/latency floors in µs, per ``source|family``, and ``*`` for a source never seen.

    Why: a launch costs the same few µs on every GPU, so tiny kernels do not speed up on a faster
    one; how much fixed cost a measurement carries depends on how it was timed (NeuSight's PyTorch
    eager calls timed with CUDA events carry ~25-55 µs of framework overhead, PipeWeave's and our
    kernel timings ~3-5 µs). So the floor is estimated per source and family: 0.9 x the 10th-
    percentile runtime of the rows with the smallest roofline times (the lowest 5%), when those
    are overhead-dominated (roofline time under half that runtime), else 0. A query from no known
    source gets the lowest floor of all: a kernel's own launch cost. A constant added to the
    scaled roofline time keeps the composition monotone in the GPU's peaks.
    """
    roof = numeric(frame, "f_roofline_time_us")
    families = (
        frame["family"].astype(str).to_numpy() if "family" in frame.columns else np.full(len(frame), "")
    )
    sources = frame["source"].astype(str).to_numpy() if "source" in frame.columns else np.full(len(frame), "")
    ok = np.isfinite(duration) & (duration > 0) & np.isfinite(roof) & (roof > 0)
    floors: dict[str, float] = {}
    for source, family in sorted(set(zip(sources[ok], families[ok], strict=False))):
        rows = ok & (sources == source) & (families == family)
        if rows.sum() < min_rows:
            continue
        smallest = rows & (roof <= np.quantile(roof[rows], 0.05))
        runtime = float(np.quantile(duration[smallest], 0.10))
        overhead_dominated = float(np.median(roof[smallest])) < 0.5 * runtime
        floors[f"{source}|{family}"] = 0.9 * runtime if overhead_dominated else 0.0
    # A measurement from no known source (a user's query, a new profiler): a bare kernel launch,
    # the lowest floor any source shows -- not NeuSight's framework overhead for the same family.
    positive = [v for v in floors.values() if v > 0]
    if positive:
        floors[UNKNOWN_SOURCE_FLOOR] = min(positive)
    return floors


UNKNOWN_SOURCE_FLOOR = "*"


def source_floor(floors: Mapping[str, float], source: str) -> float:
    """A known source's floor for a family it has no floor of: the lowest positive floor of its own families
    (a bare launch timed the way that source times), else a bare kernel launch's (``*``), else 0.

    Why not ``*`` straight away: the fixed cost follows the timing method, not the family. Our profiler's
    CUDA-event rows carry 3-9 us whatever the family (kernelcast's floors), NeuSight's eager calls 16-100
    us; ``*`` is the lowest of any source (another harness's kernel launch)."""
    own = [
        v for k, v in floors.items() if k.split("|", 1)[0] == source and k != UNKNOWN_SOURCE_FLOOR and v > 0
    ]
    return min(own) if own else floors.get(UNKNOWN_SOURCE_FLOOR, 0.0)


def floor_of(cols: Columns, floors: dict[str, float]) -> np.ndarray:
    """Each row's floor: its source and family's, else its source's (``source_floor``), else a bare kernel
    launch's (the lowest), else 0."""
    n = n_rows(cols)
    if not floors or "family" not in cols:
        return np.zeros(n)
    family_codes, families = label_codes(labels(cols, "family", n))
    source_codes, sources = label_codes(labels(cols, "source", n))
    default = floors.get(UNKNOWN_SOURCE_FLOOR, 0.0)
    # One lookup per distinct (source, family) pair, not per row.
    table = np.array(
        [[floors.get(f"{s}|{f}", source_floor(floors, str(s))) for f in families] for s in sources],
        dtype="float64",
    )
    return table[source_codes, family_codes] if table.size else np.full(n, default)


def ood_ranges(
    frame: pd.DataFrame, transfer: dict[str, np.ndarray], lo: float = 0.005, hi: float = 0.995
) -> dict[str, dict[str, list[float]]]:
    """Per family, the [lo, hi] quantile range of each ``OOD_COLUMNS`` input on the training side."""
    families = (
        frame["family"].astype(str).to_numpy() if "family" in frame.columns else np.full(len(frame), "")
    )
    ranges: dict[str, dict[str, list[float]]] = {}
    for family in sorted(set(families)):
        rows = families == family
        entry = {}
        for column in OOD_COLUMNS:
            values = transfer[column][rows] if column in transfer else np.array([])
            values = values[np.isfinite(values)]
            if values.size:
                entry[column] = [float(np.quantile(values, lo)), float(np.quantile(values, hi))]
        ranges[str(family)] = entry
    return ranges


def ood_flags(
    cols: Columns, transfer: dict[str, np.ndarray], ranges: dict[str, dict[str, list[float]]]
) -> np.ndarray:
    """True where the family was never trained on or an input lies outside its training range by more
    than a quarter of the bound (a value a hair outside the quantile range is not a new regime). Bounds
    looked up per row by family code: one pass per column, not per family."""
    codes, uniques = label_codes(labels(cols, "family"))
    entries = [ranges.get(str(u)) for u in uniques]
    flags = np.array([e is None for e in entries], dtype=bool)[codes]
    for column in sorted({c for e in entries if e for c in e}):
        low = np.array(
            [e[column][0] - 0.25 * abs(e[column][0]) if e and column in e else -np.inf for e in entries]
        )[codes]
        high = np.array(
            [e[column][1] + 0.25 * abs(e[column][1]) if e and column in e else np.inf for e in entries]
        )[codes]
        values = transfer[column]
        flags |= np.isfinite(values) & ((values < low) | (values > high))
    return flags


NATIVE_DTYPE_PEAKS: dict[str, tuple[str, ...]] = {
    # dtype -> device peak columns any one of which means native hardware support
    "bf16": ("dev_peak_bf16_tflops", "dev_peak_bf16_tensor_tflops"),
    "fp8": ("dev_peak_fp8_tensor_tflops",),
    "fp16": ("dev_peak_fp16_tflops", "dev_peak_fp16_tensor_tflops"),
    "fp64": ("dev_peak_fp64_tflops", "dev_peak_fp64_tensor_tflops"),
    "tf32": ("dev_peak_tf32_tensor_tflops",),
}


def emulation_notes(cols: Columns) -> np.ndarray | None:
    """A note for each row whose dtype the GPU cannot run natively (None elsewhere); None when no row
    has one.

    bf16 on V100/T4 or fp8 before Ada/Hopper runs through conversions on the FP32 pipe (if at all):
    the prediction is then an emulation estimate and says so, rather than a silent number.
    """
    if "dtype" not in cols:
        return None
    n = n_rows(cols)
    notes: np.ndarray | None = None
    codes, uniques = label_codes(labels(cols, "dtype", n))
    for dtype, columns in NATIVE_DTYPE_PEAKS.items():
        wanted = [k for k, u in enumerate(uniques) if str(u) == dtype]
        present = [c for c in columns if c in cols]
        if not wanted or not present:  # no row asks in this dtype: no pass over the rows
            continue
        peaks = np.column_stack([numeric(cols, c, n) for c in present])
        known = np.isfinite(peaks).any(axis=1)
        native = np.nan_to_num(peaks, nan=0.0).max(axis=1) > 0
        devices = labels(cols, "device_id", n) if "device_id" in cols else None
        for i in np.flatnonzero(np.isin(codes, wanted) & known & ~native):
            if notes is None:
                notes = np.full(n, None, dtype=object)
            device = devices[i] if devices is not None else "this GPU"
            notes[i] = (
                f"{dtype} is not native on {device}: emulation estimate (converted and computed on the "
                "FP32 pipe)"
            )
    return notes
