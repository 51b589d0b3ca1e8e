"""The ``aiter`` ingest adapter: AMD's tuned GEMM and fused-MoE tables (ROCm/aiter) -> the canonical tables.

Upstream keeps ``aiter/configs/*_tuned_*.csv`` and ``aiter/configs/model_configs/*_tuned_*.csv``: per shape
the fastest kernel of a tuning sweep and its time ``us`` (microseconds), keyed by ``gfx`` (ISA) and
``cu_num``.
Read in place from upstream's layout (the repository root, or its ``aiter/configs`` folder).

Tables (by file name, as upstream names them):
- GEMM ``bf16`` (hipBLASLt/asm/opus winners; ``dtype`` column), ``a8w8`` row-wise (``q_dtype_w``: torch.int8 =
  W8A8 ``int8``, float8 = ``fp8``; batched a8w8 is int8), ``a8w8_blockscale`` (fp8 with 1x128x128 scales =
  ``fp8_block``); ``bpreshuffle`` tables use a pre-shuffled weight layout (a kernel variant of the same GEMM:
  a repeat of its kernel, told apart by ``kernel_source``). ``*_batched_gemm`` tables add ``B``: family
  ``bmm``.
- Fused MoE (``*fmoe*``): token/model_dim/inter_dim/expert/topk -> T/H/I/E/topk (tp = ep = 1); dtype from
  ``q_dtype_w`` and ``q_type`` (per_1x128 = ``fp8_block``). The tuner routes random tokens (top-k of random
  scores), so the distribution is ``balanced`` in aiconfigurator's vocabulary.
- Gated delta-net state tables (``*chunk_gdn*``) are no op family kernelcast models: left out, noted.

Devices: ``<gfx>-<cu_num>cu`` resolves through the catalog's aliases (gfx942 with 304 CUs = MI300X, with 80
CUs = MI308X); fMoE tables without a ``gfx`` column are gfx942 (upstream's copy keeps only gfx942 fMoE rows).
Copies: tuning keeps one kernel config per (N, K) and upstream copies its time across large M; a row with the
same GPU, dtype, kernel (name and split-K), N/K (MoE: H/I/E/topk) and ``us`` as a row of smaller M is a copy,
not a measurement: the smallest-M row is kept, each copy goes to ``rejects`` naming the row it copies.
A row with no positive time is rejected too. ``rows_in`` counts every row of the GEMM/MoE tables.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.ingest.base import AdapterOutput, IngestError, require_dir
from components.ingest.schema import KERNEL_COLUMNS, MEASUREMENT_COLUMNS, RAW_LIMIT, conform, stable_id

SOURCE = "aiter"
CONFIGS = "aiter/configs"
COMMIT = "e4048607a535ace3a2b51ded31b1c8c2d45c0879"
PROFILER = "aiter_tuner"  # aiter's tuners time every candidate kernel with torch events, keep the fastest
LEFT_OUT = ("chunk_gdn",)  # table kinds that are no op family here
# Shapes per family (physics.SHAPE_KEYS names); the MoE's tp/ep/distribution are fixed by the tuner's setup.
SHAPES: dict[str, tuple[str, ...]] = {
    "gemm": ("M", "N", "K"),
    "bmm": ("B", "M", "N", "K"),
    "moe": ("T", "E", "topk", "H", "I", "tp", "ep"),
}
# What identifies a kernel config besides M (T): two rows sharing these and ``us`` are one measurement.
COPY_KEYS: dict[str, tuple[str, ...]] = {
    "gemm": ("device_name_raw", "dtype", "kernel", "N", "K"),
    "bmm": ("device_name_raw", "dtype", "kernel", "B", "N", "K"),
    "moe": ("device_name_raw", "dtype", "kernel", "H", "I", "E", "topk", "act_type", "doweight_stage1"),
}
TORCH_DTYPES: dict[str, str] = {
    "torch.bfloat16": "bf16",
    "torch.float16": "fp16",
    "torch.int8": "int8",
    "torch.float8_e4m3fnuz": "fp8",
    "torch.float8_e4m3fn": "fp8",
}
# Extra columns kept in params_json (the tuned kernel's configuration), when a table has them.
GEMM_PARAMS: tuple[str, ...] = ("libtype", "kernelName", "kernelId", "solidx", "splitK", "bias")
MOE_PARAMS: tuple[str, ...] = (
    "act_type",
    "q_type",
    "use_g1u1",
    "doweight_stage1",
    "block_m",
    "ksplit",
    "run_1stage",
    "kernelName1",
    "kernelName2",
    "us1",
    "us2",
)


def configs_dir(root: Path) -> Path:
    """``root`` is the repository root (``<datasets>/aiter``) or already its ``aiter/configs`` folder."""
    root = Path(root)
    return root / CONFIGS if (root / CONFIGS).is_dir() else root


def table_files(root: Path) -> list[Path]:
    """Every tuned table under the configs folder (``tuned_fmoe.csv``, ``*_tuned_*.csv``; not the ``untuned``
    shape lists), sorted (deterministic order)."""
    folder = configs_dir(root)
    files = [*folder.glob("*tuned*.csv"), *folder.glob("model_configs/*tuned*.csv")]
    return sorted(f for f in files if "untuned" not in f.name)


def _family(name: str) -> str | None:
    if any(kind in name for kind in LEFT_OUT):
        return None
    if "fmoe" in name:
        return "moe"
    return "bmm" if "batched" in name else "gemm"


def _gemm_dtype(name: str, frame: pd.DataFrame) -> pd.Series:
    if "blockscale" in name:
        return pd.Series("fp8_block", index=frame.index)
    for column in ("q_dtype_w", "dtype"):
        if column in frame:
            return frame[column].astype(str).map(TORCH_DTYPES)
    # the batched tuners have no dtype column: bf16 by name; a8w8 is int8 row-wise (a8w8_batched_rowwise_*)
    named = "bf16" if name.startswith("bf16") else "int8" if "a8w8" in name else pd.NA
    return pd.Series(named, index=frame.index)


def _moe_dtype(frame: pd.DataFrame) -> pd.Series:
    weight = frame["q_dtype_w"].astype(str).map(TORCH_DTYPES)
    block = frame["q_type"].astype(str).eq("QuantType.per_1x128") & weight.eq("fp8")
    return weight.mask(block, "fp8_block")


def _read_table(path: Path, root: Path) -> pd.DataFrame:
    """One table's rows in the adapter's frame (family, dtype, shape, us, kernel, provenance)."""
    name = path.name
    family = _family(name)
    try:
        frame = pd.read_csv(path)
    except (pd.errors.ParserError, UnicodeDecodeError, OSError) as exc:
        raise IngestError(f"{SOURCE}: {path}: unreadable table ({exc})") from None
    upstream = path.relative_to(configs_dir(root).parent.parent).as_posix()
    needed = {"cu_num", "us", *(("M", "N", "K") if family != "moe" else ("token", "model_dim", "inter_dim"))}
    missing = sorted(needed - set(frame.columns))
    if missing:
        raise IngestError(f"{SOURCE}: {upstream}: missing columns {missing} (upstream's layout changed?)")
    gfx = frame["gfx"].astype(str) if "gfx" in frame else pd.Series("gfx942", index=frame.index)
    out = pd.DataFrame(
        {
            "family": family,
            "upstream_file": upstream,
            "upstream_row": np.arange(len(frame), dtype="int64"),
            "device_name_raw": gfx + "-" + frame["cu_num"].astype(str) + "cu",
            "latency_us": pd.to_numeric(frame["us"], errors="coerce"),
        }
    )
    if family == "moe":
        out["dtype"] = _moe_dtype(frame)
        for ours, theirs in (("T", "token"), ("E", "expert"), ("topk", "topk"), ("H", "model_dim")):
            out[ours] = frame[theirs]
        out["I"], out["tp"], out["ep"], out["distribution"] = frame["inter_dim"], 1, 1, "balanced"
        names = frame["kernelName1"].astype(str) + "+" + frame["kernelName2"].fillna("").astype(str)
        out["kernel"] = names
        out["act_type"], out["doweight_stage1"] = frame["act_type"].astype(str), frame["doweight_stage1"]
        stages = np.where(frame.get("run_1stage", pd.Series(0, index=frame.index)) == 1, "1stage", "2stage")
        out["kernel_source"] = "fmoe/" + pd.Series(stages, index=frame.index)
        extra = MOE_PARAMS
    else:
        out["dtype"] = _gemm_dtype(name, frame)
        out["B"] = frame["B"] if family == "bmm" else 1
        out["M"], out["N"], out["K"] = frame["M"], frame["N"], frame["K"]
        split = frame["splitK"].astype(str) if "splitK" in frame else ""
        out["kernel"] = frame["kernelName"].astype(str) + "/splitK=" + split
        variant = "bpreshuffle" if "bpreshuffle" in name else family
        # tables without ``libtype`` come from the CK tuners (their kernel names are CK instances)
        lib = frame["libtype"].astype(str) if "libtype" in frame else "ck"
        out["kernel_source"] = variant + "/" + lib
        extra = GEMM_PARAMS
    out["extra_json"] = [
        json.dumps({k: _plain(v) for k, v in row.items()}, sort_keys=True, separators=(",", ":"))
        for row in frame[[c for c in extra if c in frame]].to_dict("records")
    ]
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value.item() if hasattr(value, "item") else value


def read_rows(root: Path) -> tuple[pd.DataFrame, list[str]]:
    """Every GEMM/bmm/MoE row of the tuned tables (before any check), and the tables left out."""
    frames, skipped = [], []
    for path in table_files(root):
        if _family(path.name) is None:
            skipped.append(path.name)
            continue
        frames.append(_read_table(path, root))
    if not frames:
        raise IngestError(f"{SOURCE}: {configs_dir(root)}: no tuned tables (*tuned*.csv in {CONFIGS}/)")
    return pd.concat(frames, ignore_index=True), skipped


def row_problems(frame: pd.DataFrame) -> pd.Series:
    """Per row its first problem (no positive time, unknown dtype, a dimension < 1), <NA> where none."""
    problem = pd.Series(pd.NA, index=frame.index, dtype="object")
    us = frame["latency_us"]
    bad = ~np.isfinite(us.to_numpy(dtype="float64")) | (us <= 0).to_numpy()
    problem[bad] = "us = " + us[bad].astype(str) + ": no measured time"
    problem[problem.isna() & frame["dtype"].isna()] = "dtype not recognised"
    for family, keys in SHAPES.items():
        mine = frame["family"] == family
        if not mine.any():
            continue
        for key in keys:
            values = pd.to_numeric(frame[key], errors="coerce")
            bad = mine & problem.isna() & (values.isna() | (values < 1))
            problem[bad] = f"{key} = " + values[bad].astype(str) + " (expected >= 1): no work to time"
    return problem


def copies(frame: pd.DataFrame) -> pd.Series:
    """Per row, where it copies a smaller-M row's time (``upstream_file`` row r, M = m), <NA> for kept rows.
    Within one (family, copy key, us) group the smallest M (T) is the measurement; the others are copies."""
    out = pd.Series(pd.NA, index=frame.index, dtype="object")
    for family, keys in COPY_KEYS.items():
        part = frame[frame["family"] == family]
        if part.empty:
            continue
        size = "T" if family == "moe" else "M"
        part = part.sort_values(
            [size, "upstream_file", "upstream_row"], kind="mergesort"
        )  # smallest M first, then file order
        group = [*keys, "latency_us"]
        first = part.groupby(group, sort=False, dropna=False).cumcount() == 0
        origin = part.groupby(group, sort=False, dropna=False)[["upstream_file", "upstream_row", size]]
        head = origin.transform("first")
        text = (
            f"copy across {size}: same GPU, dtype, kernel, shape but {size} and us as "
            + head["upstream_file"].astype(str)
            + " row "
            + head["upstream_row"].astype(str)
            + f" ({size} = "
            + head[size].astype(str)
            + ")"
        )
        out[part.index[~first.to_numpy()]] = text[~first.to_numpy()].to_numpy()
    return out


def resolve_devices(names: pd.Series, catalog: Any) -> pd.Series:
    """Catalog id per ``<gfx>-<cu>cu`` string (<NA> where the catalog names no such GPU)."""
    ids = {}
    for name in sorted(set(names.astype(str))):
        try:
            ids[name] = catalog.resolve(name).id
        except LookupError:
            ids[name] = pd.NA
    return names.astype(str).map(ids).astype("string")


def tables(root: Path, catalog: Any) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(measured rows with ``device_id``, rejected rows with ``reason``, tables left out): the one reader the
    adapter and the op engine's measured store share."""
    rows, skipped = read_rows(root)
    reason = row_problems(rows)
    good = reason.isna()
    reason[good] = copies(rows[good])
    rows["device_id"] = resolve_devices(rows["device_name_raw"], catalog)
    unknown = reason.isna() & rows["device_id"].isna()
    reason[unknown] = "unknown device '" + rows.loc[unknown, "device_name_raw"] + "'"
    bad = reason.notna()
    rejected = rows[bad].assign(reason=rows["family"][bad] + ": " + reason[bad].astype(str))
    return rows[~bad].reset_index(drop=True), rejected.reset_index(drop=True), skipped


def _shape_json(frame: pd.DataFrame, family: str) -> list[str]:
    keys = sorted((*SHAPES[family], *(("distribution",) if family == "moe" else ())))
    numbers = {k: pd.to_numeric(frame[k]).round().astype("int64") for k in SHAPES[family]}
    records = frame[keys].assign(**numbers).to_dict("records")
    return [
        json.dumps({k: _plain(v) for k, v in r.items()}, sort_keys=True, separators=(",", ":"))
        for r in records
    ]


def _flops(family: str, frame: pd.DataFrame) -> np.ndarray:
    """FLOPs by the one op-work definition (``components.physics.roofline.op_work``)."""
    from components.physics.roofline import op_work

    out = np.full(len(frame), np.nan)
    physics_family = "gemm" if family == "bmm" else family
    for dtype, index in frame.groupby("dtype", sort=True).indices.items():
        shape = {k: frame[k].to_numpy("float64")[index] for k in SHAPES[family]}
        out[index] = op_work(physics_family, str(dtype), shape).flops
    return out


def _canonical(family: str, rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(measurements, kernels) of one family's rows."""
    shape = _shape_json(rows, family)
    op = family
    kernel_id = [stable_id(SOURCE, family, op, d, s) for d, s in zip(rows["dtype"], shape, strict=True)]
    params = [
        json.dumps({**json.loads(s), **json.loads(e)}, sort_keys=True, separators=(",", ":"))
        for s, e in zip(shape, rows["extra_json"], strict=True)
    ]
    base = f"aiter@{COMMIT[:8]}/" + rows["upstream_file"].str.rsplit("/", n=1).str[-1].str.removesuffix(
        ".csv"
    )
    run = base + "/" + rows["kernel_source"]
    occurrence = (
        pd.DataFrame({"k": kernel_id, "d": rows["device_id"], "r": run}).groupby(["k", "d", "r"]).cumcount()
    )
    run = run + np.where(occurrence.to_numpy() > 0, "/rep" + occurrence.astype(str), "")
    flops = _flops(family, rows)
    duration = rows["latency_us"].to_numpy("float64")
    measurements = pd.DataFrame(
        {
            "kernel_id": kernel_id,
            "device_id": rows["device_id"],
            "device_name_raw": rows["device_name_raw"],
            "source": SOURCE,
            "upstream_file": rows["upstream_file"],
            "upstream_row": rows["upstream_row"],
            "profiler": PROFILER,
            "clock_mode": "unknown",
            "run_id": run,
            "params_json": params,
            "duration_us": duration,
            "flops": flops,
            "gflops": flops / duration / 1e3,
        }
    )
    kernels = pd.DataFrame(
        {"kernel_id": kernel_id, "family": family, "op": op, "shape_json": shape, "dtype": rows["dtype"]}
    ).drop_duplicates("kernel_id")
    kernels = kernels.assign(
        source=SOURCE,
        name=family + "/" + op + kernels["shape_json"] + "[" + kernels["dtype"] + "]",
        language="op",
    )
    return measurements, kernels


def ingest(root: Path, catalog: Any, progress: Callable[[str], None] | None = None) -> AdapterOutput:
    """Read every tuned GEMM/bmm/fMoE table under ``root`` (upstream's repository root, or its
    ``aiter/configs`` folder) into the canonical tables."""
    root = require_dir(Path(root), SOURCE)
    good, rejected, skipped = tables(root, catalog)
    parts = [
        _canonical(family, good[good["family"] == family])
        for family in SHAPES
        if (good["family"] == family).any()
    ]
    measurements = conform(pd.concat([p[0] for p in parts], ignore_index=True), MEASUREMENT_COLUMNS)
    kernels = conform(pd.concat([p[1] for p in parts], ignore_index=True), KERNEL_COLUMNS)
    raw = rejected["device_name_raw"] + "," + rejected["dtype"].astype(str) + "," + rejected["extra_json"]
    rejects = pd.DataFrame(
        {
            "source": SOURCE,
            "upstream_file": rejected["upstream_file"],
            "upstream_row": rejected["upstream_row"],
            "reason": rejected["reason"],
            "raw": raw.str.slice(0, RAW_LIMIT),
        }
    )
    n_copies = int(rejected["reason"].str.contains(": copy across ").sum())
    counts = measurements.groupby("device_id").size().to_dict()
    notes = [
        f"us (microseconds upstream) = duration_us: the fastest kernel of aiter's tuning sweep per shape "
        f"(a lower envelope), profiler={PROFILER}, clock_mode=unknown; ROCm/aiter @ {COMMIT[:8]}",
        f"measurements per GPU: {counts}",
        f"{n_copies} rows copy a smaller-M row's time (same GPU, dtype, kernel, N/K, us): rejected as "
        "copies, the smallest-M row kept",
        f"{len(rejects) - n_copies} rows rejected otherwise (no positive time, unknown GPU or dtype)",
        f"left out (no op family here): {', '.join(skipped) or 'none'}",
    ]
    output = AdapterOutput.conformed(SOURCE, measurements, kernels, rejects, notes=notes)
    if progress:
        progress(f"{SOURCE}: {len(measurements)} measurements of {len(kernels)} kernels")
    return output
