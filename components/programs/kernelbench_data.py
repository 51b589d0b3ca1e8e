"""KernelBench programs as training/evaluation data: traced once (content-addressed cache), joined
with their timings.

The trace cache is a parquet under ``<KERNELCAST_HOME>/cache/programs/traces.parquet`` keyed by
the sha256 of (tracer version, module text): a problem is traced once whatever tree or GPU it
appears under, and only new texts are traced on a later run.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.ingest.kernelbench_profiled import FLUSH_KEY
from components.programs.trace import DEFAULT_MEMORY_BYTES, TRACER_VERSION, ModuleJob, TraceResult, trace_many

SOURCE = "kernelbench"
TRACE_WORKERS = 2
CACHE_NAME = "traces.parquet"
PER_MODULE_S = 120.0  # bundled problems: generous, a loaded 2-core machine traces a ResNet in ~20 s
# Failures that depend on the machine's load, not on the module: never cached, retried next run.
TRANSIENT_REASONS = frozenset({"timeout", "memory", "crashed"})
CACHE_COLUMNS = ("content_hash", "name", "ok", "reason", "error", "ops_json", "seconds")


def content_hash(text: str) -> str:
    return hashlib.sha256(f"{TRACER_VERSION}\x1f{text}".encode()).hexdigest()


def cache_path(cache_dir: Path) -> Path:
    return Path(cache_dir) / "programs" / CACHE_NAME


def _read_cache(path: Path) -> pd.DataFrame:
    if path.is_file():
        try:
            return pd.read_parquet(path)
        except (OSError, ValueError):
            pass  # a corrupt cache is rebuilt, never trusted
    return pd.DataFrame(columns=list(CACHE_COLUMNS))


def cached_traces(
    texts: dict[str, str],
    cache_dir: Path,
    *,
    per_module_s: float = PER_MODULE_S,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, TraceResult]:
    """name -> TraceResult for every module text, tracing (in the sandbox) only texts not cached."""
    from components.common.atomic import atomic_write

    path = cache_path(cache_dir)
    cache = _read_cache(path)
    known = dict(zip(cache["content_hash"], range(len(cache)), strict=False))
    hashes = {name: content_hash(text) for name, text in texts.items()}
    missing: dict[str, str] = {}
    transient: dict[str, TraceResult] = {}
    for name, digest in hashes.items():
        if digest not in known and digest not in missing:
            missing[digest] = name
    if missing:
        log(f"tracing {len(missing)} KernelBench modules in the sandbox ({len(known)} cached)")
        jobs = [ModuleJob(name, text=texts[name]) for name in missing.values()]
        # Two children side by side: importing torch and tracing are single-threaded each.
        results = trace_many(
            jobs,
            per_module_s=per_module_s,
            memory_bytes=DEFAULT_MEMORY_BYTES,
            workers=min(TRACE_WORKERS, os.cpu_count() or 1),
        )
        new = pd.DataFrame(
            [
                {
                    "content_hash": digest,
                    "name": r.name,
                    "ok": r.ok,
                    "reason": r.reason,
                    "error": r.error,
                    "ops_json": json.dumps(r.ops, separators=(",", ":")),
                    "seconds": r.seconds,
                }
                for digest, r in zip(missing, results, strict=False)
            ],
            columns=list(CACHE_COLUMNS),
        )
        transient = {
            digest: r
            for digest, r in zip(missing, results, strict=False)
            if not r.ok and r.reason in TRANSIENT_REASONS
        }
        new = new[~new["content_hash"].isin(set(transient))]
        cache = pd.concat([cache, new], ignore_index=True) if len(cache) else new
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda tmp: cache.to_parquet(tmp, index=False))
        known = dict(zip(cache["content_hash"], range(len(cache)), strict=False))
    out: dict[str, TraceResult] = {}
    for name, digest in hashes.items():
        if digest not in known:  # a transient failure of this run
            out[name] = transient[digest]
            continue
        row = cache.iloc[known[digest]]
        out[name] = TraceResult(
            name,
            bool(row["ok"]),
            ops=json.loads(row["ops_json"] or "[]"),
            error=None if pd.isna(row["error"]) else str(row["error"]),
            reason=None if pd.isna(row["reason"]) else str(row["reason"]),
            seconds=float(row["seconds"] or 0.0),
        )
    return out


@dataclass
class KernelBenchData:
    """Timed KernelBench programs in scope: one row per (program, device, config) with its target."""

    rows: (
        pd.DataFrame
    )  # kernel_id, device_id, level, mode, config, duration_us, n_files, program, problem_set,
    # flush_bytes (the L2 flush before each timed call, mean over the files: kernelcast's own harness)
    traces: dict[str, TraceResult]  # kernel_id -> trace
    reasons: pd.DataFrame  # kernel_id, device_id, config, reason: rows with no prediction and why


def config_name(params: dict[str, Any]) -> str:
    """``eager`` or the torch.compile setting.

    One of ``inductor-default``, ``inductor-max-autotune``, ``cudagraphs``.
    """
    if params.get("mode") != "torch.compile":
        return "eager"
    backend = params.get("backend") or "inductor"
    return backend if backend != "inductor" else f"inductor-{params.get('compile_mode') or 'default'}"


def module_texts(kernel_ids: Iterable[str], kernels: pd.DataFrame) -> dict[str, str]:
    """kernel id -> its bundled module source, for ids that have one (``kernels`` indexed by kernel_id)."""
    texts = {}
    for kid in kernel_ids:
        text = kernels["source_text"].get(kid) if "source_text" in kernels.columns else None
        if isinstance(text, str) and text.strip():
            texts[kid] = text
    return texts


def load_kernelbench(
    measurements: pd.DataFrame,
    kernels: pd.DataFrame,
    cache_dir: Path,
    *,
    log: Callable[[str], None] = lambda _: None,
    kernel_ids: Sequence[str] | None = None,
) -> KernelBenchData:
    """KernelBench timings (mean over repeated runs of a program on a GPU and config) with traces.

    Every timing row is kept: those without a bundled source or whose module cannot be traced go
    to ``reasons`` with why, never silently dropped.
    """
    m = measurements[measurements["source"] == SOURCE].copy()
    k = kernels[kernels["source"] == SOURCE].drop_duplicates("kernel_id").set_index("kernel_id")
    if kernel_ids is not None:
        m = m[m["kernel_id"].isin(set(kernel_ids))]
    params = m["params_json"].map(lambda t: json.loads(t) if isinstance(t, str) else {})
    m["config"] = params.map(config_name)
    m["level"] = params.map(lambda p: str(p.get("level", "")).removeprefix("level"))
    m["problem_set"] = params.map(lambda p: p.get("problem_set"))
    m["l2_flush_bytes"] = params.map(lambda p: float(p.get(FLUSH_KEY) or 0))  # kernelcast's harness
    m = m[np.isfinite(pd.to_numeric(m["duration_us"], errors="coerce"))]
    grouped = m.groupby(["kernel_id", "device_id", "config"], as_index=False).agg(
        duration_us=("duration_us", "mean"),
        n_files=("duration_us", "size"),
        level=("level", "first"),
        problem_set=("problem_set", "first"),
        flush_bytes=("l2_flush_bytes", "mean"),  # bytes flushed before each timed call, over the files
    )
    texts = module_texts(grouped["kernel_id"].unique(), k)
    traces = cached_traces(texts, cache_dir, log=log)
    grouped["program"] = grouped["kernel_id"].map(
        lambda kid: k["program"].get(kid) if "program" in k else None
    )
    reason = pd.Series([None] * len(grouped), index=grouped.index, dtype=object)
    no_source = ~grouped["kernel_id"].isin(set(texts))
    reason[no_source] = "no bundled module source (problem tree not in the bundle)"
    failed = grouped["kernel_id"].map(lambda kid: kid in traces and not traces[kid].ok)
    reason[failed] = grouped.loc[failed, "kernel_id"].map(lambda kid: f"cannot trace: {traces[kid].error}")
    grouped["reason"] = reason
    rows = grouped[grouped["reason"].isna()].drop(columns="reason").reset_index(drop=True)
    reasons = grouped[grouped["reason"].notna()][["kernel_id", "device_id", "config", "level", "reason"]]
    ok_traces = {kid: t for kid, t in traces.items() if t.ok}
    return KernelBenchData(rows, ok_traces, reasons.reset_index(drop=True))
