"""Great Expectations suites, as code, for the canonical ``measurements`` and ``kernels`` tables.

Every expectation carries ``meta={"name": ...}``: a short, stable name that quarantine rows and
the summary report instead of GX's long expectation type + kwargs.

Physical plausibility needs per-row limits from the device catalog, which GX cannot look up. So
``add_check_columns`` derives ratio columns (``chk_*``: measured rate / catalog peak, relative
arithmetic-intensity error) and the suite bounds them with ``expect_column_values_to_be_between``;
the checks themselves stay in GX. GX is imported inside functions (import ~3 s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd

from components.ingest.schema import KERNEL_COLUMNS, MEASUREMENT_COLUMNS, MEASUREMENT_KEY

if TYPE_CHECKING:
    import great_expectations as gx

PRECISIONS: tuple[str, ...] = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4")
# Pipes a kernel of a dtype may use. FP32 PyTorch ops may run on TF32 tensor cores (cuDNN convs
# do by default), so an fp32 kernel's ceiling is the higher of the FP32 and TF32 peaks.
DTYPE_PRECISIONS: dict[str, tuple[str, ...]] = {
    "fp64": ("fp64",),
    "fp32": ("fp32", "tf32"),
    "fp16": ("fp16",),
    "bf16": ("bf16",),
    "fp8": ("fp8",),
    "int8": ("int8",),
    # The quantised GEMM dtypes of components/physics/roofline.GEMM_DTYPES: fp8 block-scaled runs on the fp8
    # pipe, nvfp4 on fp4; weight-only int8/int4 kernels de-quantise to bf16 (fp16 where no bf16) for the math.
    "tf32": ("tf32",),
    "fp8_block": ("fp8",),
    "nvfp4": ("fp4",),
    "int8_wo": ("bf16", "fp16"),
    "int4_wo": ("bf16", "fp16"),
}
ROOFLINE_CLASSES: tuple[str, ...] = ("bandwidth", "compute")
CLOCK_MODES: tuple[str, ...] = ("locked", "base", "boost", "unknown", "host")
KERNEL_DTYPES: tuple[str, ...] = (
    "fp32",
    "fp16",
    "bf16",
    "fp8",
    "fp64",
    "int8",
    "tf32",
    "fp8_block",
    "nvfp4",
    "int8_wo",
    "int4_wo",
    "mixed",
    "unknown",
)
KERNEL_LANGUAGES: tuple[str, ...] = ("cuda", "hip", "openmp", "pytorch", "op", "triton")
NON_NULL_KEYS: tuple[str, ...] = ("measurement_id", "kernel_id", "device_id", "source")

# Derived columns bounded by the suite (appended after the canonical columns, in this order).
CHECK_COLUMNS: tuple[str, ...] = (
    "chk_achieved_gbps_over_peak",
    "chk_fp32_gflops_over_peak",
    "chk_fp64_gflops_over_peak",
    "chk_gflops_over_peak",
    "chk_arith_intensity_rel_err",
    "chk_fp32_arith_intensity_rel_err",
    "chk_fp64_arith_intensity_rel_err",
)


class DeviceSpecLike(Protocol):
    dram_gbps: float

    def peak_flops(self, precision: str, tensor: bool = False) -> float | None: ...


class CatalogLike(Protocol):
    """What validation needs from ``components.devices.load_catalog()``."""

    def get(self, device_id: str) -> DeviceSpecLike: ...

    def ids(self) -> Any: ...


@dataclass(frozen=True)
class Tolerances:
    """The ``validate:`` keys of params.yaml that the suite reads."""

    bandwidth_tolerance: float
    flops_tolerance: float
    arith_intensity_rel_tol: float

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> Tolerances:
        section = params.get("validate", params)  # accept the whole params.yaml or its `validate:` part
        return cls(
            bandwidth_tolerance=float(section["bandwidth_tolerance"]),
            flops_tolerance=float(section["flops_tolerance"]),
            arith_intensity_rel_tol=float(section["arith_intensity_rel_tol"]),
        )


# ---------------------------------------------------------------------------------------------
# Derived columns (pandas only builds the inputs; GX does the checking)


def _finite_or_nan(value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return number if math.isfinite(number) and number > 0 else math.nan


def _peak(spec: DeviceSpecLike, precision: str, tensor: bool) -> float:
    """Peak FLOP/s, NaN where the catalog has no figure (e.g. FP8 on a V100)."""
    try:
        return _finite_or_nan(spec.peak_flops(precision, tensor=tensor))
    except (KeyError, ValueError, LookupError, AttributeError, TypeError):
        return math.nan


def _best_peak(spec: DeviceSpecLike, precisions: tuple[str, ...]) -> float:
    """Highest peak over the given precisions, tensor pipe or not (NaN if none is known)."""
    values = [_peak(spec, p, t) for p in precisions for t in (False, True)]
    finite = [v for v in values if not math.isnan(v)]
    return max(finite) if finite else math.nan


def device_limits(catalog: CatalogLike, device_ids: list[str]) -> pd.DataFrame:
    """Per-device ceilings in the tables' units (GB/s, GFLOP/s); unknown devices get NaN.

    Columns: dram_gbps, fp32_gflops, fp64_gflops (vector pipes), best_<dtype>_gflops for each
    dtype in ``DTYPE_PRECISIONS``, and best_any_gflops (used when a kernel's dtype is mixed/unknown).
    """
    rows: dict[str, dict[str, float]] = {}
    for device_id in device_ids:
        try:
            spec = catalog.get(device_id)
        except (KeyError, LookupError, ValueError):
            continue  # the device_id-in-catalog expectation reports it; no limit to derive
        if spec is None:
            continue
        row = {
            "dram_gbps": _finite_or_nan(getattr(spec, "dram_gbps", None)),
            # fp32/fp64 rates counted by ncu come from the FMA pipes, so bound them by the non-tensor peak.
            "fp32_gflops": _peak(spec, "fp32", False) / 1e9,
            "fp64_gflops": _peak(spec, "fp64", False) / 1e9,
            "best_any_gflops": _best_peak(spec, PRECISIONS) / 1e9,
        }
        for dtype, precisions in DTYPE_PRECISIONS.items():
            row[f"best_{dtype}_gflops"] = _best_peak(spec, precisions) / 1e9
        rows[device_id] = row
    columns = ["dram_gbps", "fp32_gflops", "fp64_gflops", "best_any_gflops"] + [
        f"best_{d}_gflops" for d in DTYPE_PRECISIONS
    ]
    return pd.DataFrame.from_dict(rows, orient="index", columns=columns, dtype="float64")


def _ratio(numerator: pd.Series, denominator: pd.Series) -> pd.Series:
    num = pd.to_numeric(numerator, errors="coerce").astype("float64")
    den = pd.to_numeric(denominator, errors="coerce").astype("float64")
    out = num / den.where(den > 0)
    return out.where(np.isfinite(out))


def _rel_err(reported: pd.Series, expected: pd.Series) -> pd.Series:
    """|reported - expected| / |expected|; 0 when both are 0; NaN (no check) when either is unknown."""
    rep = pd.to_numeric(reported, errors="coerce").astype("float64")
    exp = pd.to_numeric(expected, errors="coerce").astype("float64")
    err = (rep - exp).abs() / exp.abs()
    err = err.mask((exp == 0) & (rep == 0), 0.0)
    # A non-zero intensity where FLOPs are zero is infinitely wrong; keep it finite for GX and JSON.
    return err.replace(np.inf, np.finfo("float64").max)


def _intensity_expected(frame: pd.DataFrame, flops_total: pd.Series | None, rate: pd.Series) -> pd.Series:
    """FLOP per DRAM byte from totals when known, else from rates (GFLOP/s over GB/s: same ratio)."""
    from_rates = _ratio(rate, frame["achieved_gbps"])
    if flops_total is None:
        return from_rates
    from_totals = _ratio(flops_total, frame["dram_bytes"])
    return from_totals.fillna(from_rates)


def add_check_columns(
    measurements: pd.DataFrame, catalog: CatalogLike, kernels: pd.DataFrame | None = None
) -> pd.DataFrame:
    """The measurements with the ``CHECK_COLUMNS`` appended (index reset to 0..n-1)."""
    frame = measurements.reset_index(drop=True).copy()
    device_ids = (
        sorted({str(d) for d in frame["device_id"].dropna().unique()}) if "device_id" in frame else []
    )
    limits = device_limits(catalog, device_ids)
    raw_ids = frame["device_id"].astype("object").tolist() if "device_id" in frame else [None] * len(frame)
    per_row = limits.reindex([d if isinstance(d, str) else None for d in raw_ids])
    per_row.index = frame.index

    # The best peak for the kernel's dtype (mixed/unknown/absent dtype: the device's best at any precision).
    if kernels is not None and len(kernels) and "dtype" in kernels:
        dtype_of = kernels.drop_duplicates("kernel_id").set_index("kernel_id")["dtype"]
        dtypes = (
            frame["kernel_id"].map(dtype_of) if "kernel_id" in frame else pd.Series(pd.NA, index=frame.index)
        )
    else:
        dtypes = pd.Series(pd.NA, index=frame.index)
    best = per_row["best_any_gflops"].copy()
    for dtype in DTYPE_PRECISIONS:
        mask = (dtypes == dtype).fillna(False).to_numpy(dtype=bool)
        best[mask] = per_row.loc[mask, f"best_{dtype}_gflops"].fillna(per_row.loc[mask, "best_any_gflops"])

    def col(name: str) -> pd.Series:
        return frame[name] if name in frame else pd.Series(np.nan, index=frame.index)

    frame["chk_achieved_gbps_over_peak"] = _ratio(col("achieved_gbps"), per_row["dram_gbps"])
    frame["chk_fp32_gflops_over_peak"] = _ratio(col("fp32_gflops"), per_row["fp32_gflops"])
    frame["chk_fp64_gflops_over_peak"] = _ratio(col("fp64_gflops"), per_row["fp64_gflops"])
    frame["chk_gflops_over_peak"] = _ratio(col("gflops"), best)
    if {"achieved_gbps", "dram_bytes"} <= set(frame.columns):
        frame["chk_arith_intensity_rel_err"] = _rel_err(
            col("arith_intensity"), _intensity_expected(frame, col("flops"), col("gflops"))
        )
        frame["chk_fp32_arith_intensity_rel_err"] = _rel_err(
            col("fp32_arith_intensity"), _intensity_expected(frame, None, col("fp32_gflops"))
        )
        frame["chk_fp64_arith_intensity_rel_err"] = _rel_err(
            col("fp64_arith_intensity"), _intensity_expected(frame, None, col("fp64_gflops"))
        )
    else:
        for name in CHECK_COLUMNS[4:]:
            frame[name] = np.nan
    for name in CHECK_COLUMNS:
        frame[name] = frame[name].astype("float64")
    return frame


# ---------------------------------------------------------------------------------------------
# Suites


def gx_type_name(pandas_dtype: str) -> str:
    """The name GX 1.24 observes for a pandas dtype: the scalar type (string -> str, Int64 -> int64)."""
    return pd.api.types.pandas_dtype(pandas_dtype).type.__name__


def _named(expectation: Any, name: str) -> Any:
    expectation.meta = {**(expectation.meta or {}), "name": name}
    return expectation


def measurement_expectations(device_ids: list[str], tol: Tolerances) -> list[Any]:
    """Expectations for the measurements table with ``CHECK_COLUMNS`` appended."""
    import great_expectations as gx

    e = gx.expectations
    columns = list(MEASUREMENT_COLUMNS) + list(CHECK_COLUMNS)
    out: list[Any] = [_named(e.ExpectTableColumnsToMatchOrderedList(column_list=columns), "schema_columns")]
    for column, dtype in MEASUREMENT_COLUMNS.items():
        out.append(
            _named(
                e.ExpectColumnValuesToBeOfType(column=column, type_=gx_type_name(dtype)), f"dtype_{column}"
            )
        )
    for column in NON_NULL_KEYS:
        out.append(_named(e.ExpectColumnValuesToNotBeNull(column=column), f"not_null_{column}"))
    out.append(_named(e.ExpectColumnValuesToNotBeNull(column="duration_us"), "not_null_duration_us"))
    # A duplicate key is ambiguous: GX flags every copy, and every copy goes to quarantine.
    out.append(_named(e.ExpectColumnValuesToBeUnique(column="measurement_id"), "unique_measurement_id"))
    out.append(
        _named(e.ExpectCompoundColumnsToBeUnique(column_list=list(MEASUREMENT_KEY)), "unique_measurement_key")
    )
    ranges: list[tuple[str, dict[str, Any], str]] = [
        ("duration_us", {"min_value": 0, "strict_min": True}, "duration_us_positive"),
        ("duration_std_us", {"min_value": 0}, "duration_std_us_nonnegative"),
        ("n_trials", {"min_value": 1}, "n_trials_at_least_1"),
        ("dram_bytes", {"min_value": 0}, "dram_bytes_nonnegative"),
        ("achieved_gbps", {"min_value": 0}, "achieved_gbps_nonnegative"),
        ("gflops", {"min_value": 0}, "gflops_nonnegative"),
        ("fp32_gflops", {"min_value": 0}, "fp32_gflops_nonnegative"),
        ("fp64_gflops", {"min_value": 0}, "fp64_gflops_nonnegative"),
        ("int_gops", {"min_value": 0}, "int_gops_nonnegative"),
        ("flops", {"min_value": 0}, "flops_nonnegative"),
        ("arith_intensity", {"min_value": 0}, "arith_intensity_nonnegative"),
        ("l1_hit_rate", {"min_value": 0, "max_value": 1}, "l1_hit_rate_in_0_1"),
        ("l2_hit_rate", {"min_value": 0, "max_value": 1}, "l2_hit_rate_in_0_1"),
        # physical plausibility against the catalog
        (
            "chk_achieved_gbps_over_peak",
            {"max_value": tol.bandwidth_tolerance},
            "achieved_gbps_within_dram_peak",
        ),
        ("chk_fp32_gflops_over_peak", {"max_value": tol.flops_tolerance}, "fp32_gflops_within_fp32_peak"),
        ("chk_fp64_gflops_over_peak", {"max_value": tol.flops_tolerance}, "fp64_gflops_within_fp64_peak"),
        ("chk_gflops_over_peak", {"max_value": tol.flops_tolerance}, "gflops_within_dtype_peak"),
        (
            "chk_arith_intensity_rel_err",
            {"max_value": tol.arith_intensity_rel_tol},
            "arith_intensity_consistent",
        ),
        (
            "chk_fp32_arith_intensity_rel_err",
            {"max_value": tol.arith_intensity_rel_tol},
            "fp32_arith_intensity_consistent",
        ),
        (
            "chk_fp64_arith_intensity_rel_err",
            {"max_value": tol.arith_intensity_rel_tol},
            "fp64_arith_intensity_consistent",
        ),
    ]
    for column, bounds, name in ranges:
        out.append(_named(e.ExpectColumnValuesToBeBetween(column=column, **bounds), name))
    out.append(
        _named(
            e.ExpectColumnValuesToBeInSet(column="device_id", value_set=sorted(device_ids)),
            "device_id_in_catalog",
        )
    )
    for column in ("roofline_class", "roofline_class_published"):
        out.append(
            _named(
                e.ExpectColumnValuesToBeInSet(column=column, value_set=list(ROOFLINE_CLASSES)),
                f"{column}_in_set",
            )
        )
    out.append(
        _named(
            e.ExpectColumnValuesToBeInSet(column="clock_mode", value_set=list(CLOCK_MODES)),
            "clock_mode_in_set",
        )
    )
    return out


def kernel_expectations() -> list[Any]:
    """Expectations for the kernels table."""
    import great_expectations as gx

    e = gx.expectations
    out: list[Any] = [
        _named(e.ExpectTableColumnsToMatchOrderedList(column_list=list(KERNEL_COLUMNS)), "schema_columns")
    ]
    for column, dtype in KERNEL_COLUMNS.items():
        out.append(
            _named(
                e.ExpectColumnValuesToBeOfType(column=column, type_=gx_type_name(dtype)), f"dtype_{column}"
            )
        )
    for column in ("kernel_id", "source", "family"):
        out.append(_named(e.ExpectColumnValuesToNotBeNull(column=column), f"not_null_{column}"))
    out.append(_named(e.ExpectColumnValuesToBeUnique(column="kernel_id"), "unique_kernel_id"))
    out.append(
        _named(e.ExpectColumnValuesToBeInSet(column="dtype", value_set=list(KERNEL_DTYPES)), "dtype_in_set")
    )
    out.append(
        _named(
            e.ExpectColumnValuesToBeInSet(column="language", value_set=list(KERNEL_LANGUAGES)),
            "language_in_set",
        )
    )
    return out


def build_suite(name: str, expectations: list[Any]) -> gx.ExpectationSuite:
    import great_expectations as gx

    return gx.ExpectationSuite(name=name, expectations=expectations)
