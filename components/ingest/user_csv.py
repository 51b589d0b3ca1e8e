"""The ``csv`` ingest adapter: a team's own timings, one CSV row per measured op, -> the canonical tables.

Most teams first bring a GPU as timings they already have, not as ``kernelcast profile`` run folders. The
columns are the ones a person writes, the op and shape spelled as ``kernelcast predict`` takes them::

    op,shape,dtype,device,duration_us
    gemm,"M=4096,N=4096,K=4096",bf16,H100,1234.5

Required: ``op``, ``shape``, ``dtype``, ``device`` and the runtime as exactly one of ``duration_us``,
``duration_ms``, ``duration_ns``. Optional (a blank cell is "not measured", never a guess):
``duration_std_us``, ``n_trials``, ``dram_bytes``, ``l1_hit_rate`` and ``l2_hit_rate`` (fractions 0-1),
``clock_mode`` (locked|base|boost|unknown), ``profiler`` (how it was timed; default ``user_csv``). Any
other column is an error naming it: a misspelt metric must not vanish silently.

A row that cannot be read becomes a reject with its row number and the reason (rows in = canonical + rejects);
a device the catalog does not know stops the ingest with one error naming each spelling and its closest
catalog ids (a new GPU is a catalog entry first, ``docs/devices.md``). FLOPs come from the one op-work
definition (``components.physics`` for GEMM/attention/MoE/all-reduce, ``components.ingest.derived`` for the
rest); rates derive from the one measured runtime. Each file is one partition of the canonical folder
(``run_id`` = the file name): ingesting it again replaces its rows, other files' rows are kept.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.ingest import csv_rows
from components.ingest.base import AdapterOutput, IngestError
from components.ingest.schema import (
    KERNEL_COLUMNS,
    MEASUREMENT_COLUMNS,
    canonical_json,
    conform,
    stable_id,
    with_measurement_ids,
)
from components.physics.shape_rules import ZERO_DIMS

SOURCE = "csv"
REQUIRED: tuple[str, ...] = ("op", "shape", "dtype", "device")
DURATION_SCALE: dict[str, float] = {"duration_us": 1.0, "duration_ms": 1e3, "duration_ns": 1e-3}
NUMERIC_OPTIONAL: tuple[str, ...] = (
    "duration_std_us",
    "n_trials",
    "dram_bytes",
    "l1_hit_rate",
    "l2_hit_rate",
)
TEXT_OPTIONAL: tuple[str, ...] = ("clock_mode", "profiler")
CLOCK_MODES: frozenset[str] = frozenset({"locked", "base", "boost", "unknown"})
DEFAULT_PROFILER = "user_csv"

_ELEMENTWISE = ("add", "mul", "gelu", "relu", "tanh", "sub", "div", "pow", "silu", "sigmoid", "exp", "log")
# op as written -> (family, op) as the canonical kernels table names them: the ``kernelcast predict --op``
# vocabulary (tests/unit/test_ingest_user_csv.py keeps the two equal).
OPS: dict[str, tuple[str, str]] = {
    "gemm": ("gemm", "matmul"),
    "matmul": ("gemm", "matmul"),
    "linear": ("linear", "linear"),
    "bmm": ("bmm", "bmm"),
    "softmax": ("softmax", "softmax"),
    "layernorm": ("layernorm", "layer_norm"),
    "rmsnorm": ("rmsnorm", "rmsnorm"),
    "attention": ("attention", "attention"),
    "moe": ("moe", "moe"),
    "allreduce": ("allreduce", "allreduce"),
    "all_reduce": ("allreduce", "allreduce"),
    "conv2d": ("conv", "conv2d"),
    "conv": ("conv", "conv2d"),
    **{op: ("elementwise", op) for op in (*_ELEMENTWISE, "sqrt", "rsqrt", "neg", "abs", "copy")},
}
# The physics family whose shape keys (required, optional) a canonical family takes.
_PHYSICS_FAMILY: dict[str, str] = {
    "gemm": "gemm",
    "linear": "gemm",
    "bmm": "gemm",
    "attention": "attention",
    "moe": "moe",
    "allreduce": "allreduce",
    "conv": "conv",
}
# The other families: the dimension sets their FLOP formulas read (numel, or rows x columns).
_ROW_SHAPES: dict[str, tuple[frozenset[str], ...]] = {
    "elementwise": (frozenset({"N"}), frozenset({"B", "H"})),
    "softmax": (frozenset({"B", "H"}),),
    "layernorm": (frozenset({"B", "H"}),),
    "rmsnorm": (frozenset({"B", "H"}),),
}


def parse_shape(text: str) -> dict[str, int] | str:
    """``M=4096,N=4096,K=4096`` -> {"M": 4096, ...}, or the reason it is not a shape."""
    shape: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in str(text).split(","))):
        name, sep, value = item.partition("=")
        value = value.strip()
        smallest = 0 if name.strip() in ZERO_DIMS else 1  # a convolution's padding may be 0
        if not sep or not name.strip() or not value.isdigit() or int(value) < smallest:
            return f"shape item {item!r}: expected NAME=positive integer, e.g. M=4096"
        if name.strip() in shape:
            return f"shape names {name.strip()} twice"
        shape[name.strip()] = int(value)
    return shape or "shape is empty (e.g. M=4096,N=4096,K=4096)"


def shape_problem(family: str, shape: dict[str, int]) -> str | None:
    """Why ``shape`` is not a shape of ``family`` (missing or unknown dimensions), or None."""
    from components.physics.roofline import SHAPE_KEYS

    given = set(shape)
    if family in _PHYSICS_FAMILY:
        from components.physics.registry import family as physics_family

        name = _PHYSICS_FAMILY[family]
        required, optional = SHAPE_KEYS.get(name) or (
            physics_family(name).required,
            physics_family(name).optional,
        )
        missing = [d for d in required if d not in given]
        unknown = sorted(given - set(required) - set(optional))
        if missing or unknown:
            return (
                f"{family} shape: "
                + "; ".join(
                    ([f"missing {', '.join(missing)}"] if missing else [])
                    + ([f"unknown {', '.join(unknown)}"] if unknown else [])
                )
                + f" (takes {', '.join(required)}"
                + (f", optional {', '.join(optional)})" if optional else ")")
            )
        return None
    accepted = _ROW_SHAPES[family]
    if given in accepted:
        return None
    return (
        f"{family} shape: takes {' or '.join(','.join(sorted(s)) for s in accepted)}, got {','.join(shape)}"
    )


def canonical_row_dtype(text: str) -> str | None:
    """The canonical dtype of a cell (``bfloat16`` -> ``bf16``; quantised GEMM formats as named), or None."""
    from components.physics.dtypes import canonical_dtype

    spelled = str(text).strip()
    try:
        return canonical_dtype(spelled) if spelled else None
    except ValueError:
        return None


def _check_columns(frame: pd.DataFrame, path: Path) -> str:
    """The duration column; IngestError naming missing, doubled or unknown columns."""
    columns = [str(c).strip() for c in frame.columns]
    missing = [c for c in REQUIRED if c not in columns]
    durations = [c for c in DURATION_SCALE if c in columns]
    accepted = (*REQUIRED, *DURATION_SCALE, *NUMERIC_OPTIONAL, *TEXT_OPTIONAL)
    unknown = [c for c in columns if c not in accepted]
    problems = (
        ([f"missing column(s) {', '.join(missing)}"] if missing else [])
        + ([f"no runtime column (one of {', '.join(DURATION_SCALE)})"] if not durations else [])
        + ([f"{' and '.join(durations)}: give the runtime once"] if len(durations) > 1 else [])
        + ([f"unknown column(s) {', '.join(unknown)}"] if unknown else [])
    )
    if problems:
        raise IngestError(
            f"{SOURCE}: {path}: {'; '.join(problems)}. Columns: {', '.join(REQUIRED)}, one of "
            f"{'/'.join(DURATION_SCALE)}; optional {', '.join((*NUMERIC_OPTIONAL, *TEXT_OPTIONAL))}"
        )
    return durations[0]


def _unknown_devices_error(frame: pd.DataFrame, device_id: pd.Series, catalog: Any, label: str) -> None:
    """One error naming every device spelling the catalog lacks, its rows and the closest catalog ids."""
    unknown = frame.loc[device_id.isna(), "device"].str.strip()
    unknown = unknown[unknown != ""]
    if unknown.empty:
        return
    parts = []
    for name, rows in unknown.groupby(unknown, sort=True):
        closest = catalog.closest(name) if hasattr(catalog, "closest") else []
        shown = ", ".join(str(r + 2) for r in rows.index[:5]) + (", ..." if len(rows) > 5 else "")
        hint = f"; closest catalog ids: {', '.join(closest)}" if closest else ""
        parts.append(f"{name!r} ({len(rows)} rows, lines {shown}{hint})")
    raise IngestError(
        f"{SOURCE}: {label}: device(s) not in the catalog: {'; '.join(parts)}. Fix the spelling or add the "
        "GPU to components/devices/catalog.yaml (docs/devices.md), then ingest again"
    )


def _numbers(frame: pd.DataFrame, column: str) -> pd.Series:
    """A column as floats: NaN for a blank cell and for text that is not a number (``_metric_checks`` tells
    the two apart)."""
    if column not in frame.columns:
        return pd.Series(np.nan, index=frame.index, dtype="float64")
    return pd.to_numeric(frame[column].str.strip().replace("", np.nan), errors="coerce").astype("float64")


_RULES: dict[str, str] = {
    "n_trials": "a positive integer",
    "l1_hit_rate": "a fraction 0-1",
    "l2_hit_rate": "a fraction 0-1",
}


def _metric_checks(frame: pd.DataFrame, values: dict[str, pd.Series]) -> list:
    """(failed mask, reason) of each optional metric: text where a number belongs, or out of its range."""
    checks = []
    for column, value in values.items():
        if column not in frame.columns:
            continue
        blank = frame[column].str.strip() == ""
        lo_ok = value >= 0 if column != "n_trials" else (value >= 1) & (value == value.round())
        hi_ok = value <= 1 if column.endswith("hit_rate") else pd.Series(True, index=value.index)
        bad = ~blank & ~(value.notna() & np.isfinite(value.fillna(0)) & lo_ok & hi_ok)
        checks.append(
            (
                bad,
                lambda idx, c=column: (
                    f"{c} must be {_RULES.get(c, 'a number >= 0')}, got "
                    + frame.loc[idx, c].str.slice(0, 40).map(repr)
                ),
            )
        )
    return checks


def _read_file(path: Path, catalog: Any) -> tuple[pd.DataFrame, list[dict], int]:
    """One CSV -> (good rows with parsed fields, reject records, rows in)."""
    label = path.name
    frame, rejects = csv_rows.read_csv_strings(path, SOURCE, path.parent)
    frame.columns = [str(c).strip() for c in frame.columns]
    rows_in = len(frame) + len(rejects)
    duration_column = _check_columns(frame, path)
    op = frame["op"].str.strip().str.lower()
    family_op = op.map(OPS)
    family = family_op.map(lambda v: v[0] if isinstance(v, tuple) else None)
    shapes = frame["shape"].map(parse_shape)
    shape_bad = shapes.map(lambda s: s if isinstance(s, str) else None)
    family_shape_bad = pd.Series(
        [
            shape_problem(f, s) if isinstance(s, dict) and isinstance(f, str) else None
            for f, s in zip(family, shapes, strict=True)
        ],
        index=frame.index,
        dtype="object",
    )
    dtype = frame["dtype"].map(canonical_row_dtype)
    duration = _numbers(frame, duration_column) * DURATION_SCALE[duration_column]
    metrics = {c: _numbers(frame, c) for c in NUMERIC_OPTIONAL}
    device_id = csv_rows.resolve_devices(frame["device"].str.strip(), catalog)
    _unknown_devices_error(frame, device_id, catalog, label)
    clock = frame["clock_mode"].str.strip().str.lower() if "clock_mode" in frame.columns else None

    reason = pd.Series(pd.NA, index=frame.index, dtype="object")
    checks: list = [
        (
            family.isna(),
            lambda idx: "unknown op " + op[idx].map(repr) + f" (one of {', '.join(sorted(OPS))})",
        ),
        (shape_bad.notna(), lambda idx: shape_bad[idx]),
        (family_shape_bad.notna(), lambda idx: family_shape_bad[idx]),
        (dtype.isna(), lambda idx: "unknown dtype " + frame.loc[idx, "dtype"].map(repr)),
        (frame["device"].str.strip() == "", lambda idx: pd.Series("device is blank", index=idx)),
        (
            ~(duration.notna() & np.isfinite(duration.fillna(0)) & (duration > 0)),
            lambda idx: (
                f"{duration_column} must be a positive number, got "
                + frame.loc[idx, duration_column].str.slice(0, 40).map(repr)
            ),
        ),
        *_metric_checks(frame, metrics),
    ]
    if clock is not None:
        checks.append(
            (
                ~(clock.isin(CLOCK_MODES) | (clock == "")),
                lambda idx: (
                    "clock_mode must be one of "
                    + ", ".join(sorted(CLOCK_MODES))
                    + ", got "
                    + frame.loc[idx, "clock_mode"].map(repr)
                ),
            )
        )
    bad = csv_rows.apply_checks(frame, checks, reason, SOURCE, label, rejects)
    keep = ~bad
    good = pd.DataFrame(
        {
            "upstream_row": frame.index[keep].astype("int64"),
            "family": family[keep],
            "op": family_op[keep].map(lambda v: v[1]),
            "shape": shapes[keep],
            "dtype": dtype[keep],
            "device_id": device_id[keep],
            "device_name_raw": frame.loc[keep, "device"].str.strip(),
            "duration_us": duration[keep],
            **{c: v[keep] for c, v in metrics.items()},
            "clock_mode": (clock[keep].replace("", "unknown") if clock is not None else "unknown"),
            "profiler": (
                frame.loc[keep, "profiler"].str.strip().replace("", DEFAULT_PROFILER)
                if "profiler" in frame.columns
                else DEFAULT_PROFILER
            ),
        }
    )
    good["upstream_file"] = label
    return good.reset_index(drop=True), rejects, rows_in


def _work_flops(good: pd.DataFrame, shape_json: pd.Series) -> pd.Series:
    """FLOPs by the one op-work definition: physics for its families, derived formulas for the rest."""
    from components.physics.roofline import op_work

    flops = csv_rows.definition_flops(
        good["family"], good["op"], shape_json, dict(zip(shape_json, good["shape"], strict=True))
    )
    for index in good.index[good["family"].isin(list(_PHYSICS_FAMILY))]:
        work = op_work(
            _PHYSICS_FAMILY[good.at[index, "family"]], good.at[index, "dtype"], good.at[index, "shape"]
        )
        flops.at[index] = float(work.flops[0]) if float(work.flops[0]) > 0 else math.nan
    return flops


def _canonical(good: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    if good.empty:
        return csv_rows.empty_tables()
    shape_json = good["shape"].map(canonical_json)
    good = good.assign(
        kernel_id=[
            stable_id(SOURCE, f, o, d, s)
            for f, o, d, s in zip(good["family"], good["op"], good["dtype"], shape_json, strict=True)
        ],
        params_json=shape_json,
    )
    good["run_id"] = csv_rows.run_ids(good, "upstream_file")
    flops = _work_flops(good, shape_json)
    seconds_e3 = good["duration_us"] * 1e3  # rate per 1e9: X / (us * 1e3)
    measurements = pd.DataFrame(
        {
            **csv_rows.provenance(good, SOURCE, good["profiler"], good["clock_mode"], good["run_id"]),
            **{c: good[c] for c in ("params_json", "duration_us")},
            "duration_std_us": good["duration_std_us"],
            "n_trials": good["n_trials"].astype("Int64"),
            "dram_bytes": good["dram_bytes"],
            "achieved_gbps": good["dram_bytes"] / seconds_e3,
            "flops": flops,
            "gflops": flops / seconds_e3,
            "l1_hit_rate": good["l1_hit_rate"],
            "l2_hit_rate": good["l2_hit_rate"],
            "arith_intensity": flops / good["dram_bytes"].where(good["dram_bytes"] > 0),
        }
    )
    kernels = pd.DataFrame(
        {
            "kernel_id": good["kernel_id"],
            "source": SOURCE,
            "family": good["family"],
            "op": good["op"],
            "name": good["op"] + shape_json + "[" + good["dtype"] + "]",
            "language": "op",
            "shape_json": shape_json,
            "dtype": good["dtype"],
        }
    ).drop_duplicates("kernel_id")
    # Ids filled here too so the adapter's output is complete on its own (the runner fills them for all).
    return with_measurement_ids(conform(measurements, MEASUREMENT_COLUMNS)), conform(kernels, KERNEL_COLUMNS)


def csv_files(root: Path) -> list[Path]:
    """The CSV files ``root`` names: itself, or every ``*.csv`` directly inside a folder."""
    root = Path(root)
    if root.is_file():
        return [root]
    if root.is_dir():
        files = sorted(root.glob("*.csv"))
        if files:
            return files
        raise IngestError(f"{SOURCE}: no *.csv files in {root}")
    raise IngestError(f"{SOURCE}: no such file: {root}")


def ingest(root: Path, catalog: Any) -> AdapterOutput:
    """Read a team's timings CSV (or every CSV of a folder) into the canonical tables."""
    parts: list[pd.DataFrame] = []
    rejects: list[dict] = []
    rows_in = 0
    files = csv_files(root)
    names = [f.name for f in files]
    if len(set(names)) != len(names):
        raise IngestError(f"{SOURCE}: two files share a name in {root}: each file name is one partition")
    for path in files:
        good, bad, n = _read_file(path, catalog)
        parts.append(good)
        rejects += bad
        rows_in += n
    measurements, kernels = _canonical(pd.concat(parts, ignore_index=True) if parts else pd.DataFrame())
    return AdapterOutput.conformed(
        SOURCE,
        measurements,
        kernels,
        rejects,
        rows_in,
        notes=[f"files: {', '.join(names)} (run_id = file name; re-ingesting a file replaces its rows)"],
    )
