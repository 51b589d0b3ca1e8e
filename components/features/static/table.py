"""Static features (``s_*``) for every kernel whose CUDA source the datasets ship, keyed by kernel_id.

gpuFLOPBench kernels are matched by (program folder, kernel name) to the kernels NVRTC compiled
from that program's ``.cu`` files; kernels that do not compile keep no ``s_*`` row (the feature
builder leaves them NaN) and the reason is counted in the coverage summary. Compilation results
are cached by content hash, so a rerun costs seconds.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd


def _program_reports(folder: Path, arch: str) -> tuple[list, list[str]]:
    from components.features.static.analyze import analyze_program
    from components.features.static.compile import CompileError

    reports, failures = [], []
    for result in analyze_program(folder, arch):
        if isinstance(result, CompileError):
            failures.append(getattr(result, "reason", "compile error") or "compile error")
        else:
            reports.append(result)
    return reports, failures


def build_static_table(
    kernels: pd.DataFrame, datasets_dir: Path, arch: str = "sm_90", workers: int = 2
) -> tuple[pd.DataFrame, dict[str, int]]:
    """(one row per matched kernel_id with s_* columns, coverage counts)."""
    from components.features.static.frames import static_feature_frame
    from components.features.static.names import kernel_key

    cuda = kernels[
        (kernels["source"] == "gpuflopbench") & (kernels["language"] == "cuda") & kernels["program"].notna()
    ]
    root = datasets_dir / "gpuflopbench" / "src"
    programs = sorted(p for p in cuda["program"].unique() if (root / p).is_dir())
    coverage: Counter[str] = Counter(kernels_total=len(cuda), programs=len(programs))
    from components.features.static.compile_server import compile_servers
    from components.features.static.prefetch import two_passes

    # Each compile runs in a sandboxed subprocess (a long-lived one per thread for this sweep); threads only
    # wait on them. Two passes: compiles, then every cubin's nvdisasm in a few batched calls, then the
    # reports (static.prefetch).
    with compile_servers(), ThreadPoolExecutor(max_workers=workers) as pool:
        results = two_passes(
            lambda: list(pool.map(lambda p: _program_reports(root / p, arch), programs)), workers
        )
    reports = [r for rs, _ in results for r in rs]
    for _, failures in results:
        coverage.update(f"file_failed:{reason}" for reason in failures)
    frame = static_feature_frame(reports)
    if frame.empty:
        return pd.DataFrame(columns=["kernel_id"]), dict(coverage)
    # Several files/instances may define one kernel name: keep the first (non-template first).
    frame = frame.sort_values(["kernel_key", "instance"], na_position="first").drop_duplicates("kernel_key")
    keys = cuda.assign(
        kernel_key=[kernel_key(p, k) for p, k in zip(cuda["program"], cuda["op"], strict=False)]
    )
    joined = keys[["kernel_id", "kernel_key"]].merge(frame, on="kernel_key", how="inner")
    coverage["kernels_with_static"] = int(joined["kernel_id"].nunique())
    columns = ["kernel_id"] + [c for c in joined.columns if c.startswith("s_")]
    return joined[columns].drop_duplicates("kernel_id").reset_index(drop=True), dict(coverage)
