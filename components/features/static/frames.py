"""Static-analysis reports as feature frames: one row per compiled kernel with ``s_*`` columns."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from components.features.static.names import kernel_key
from components.features.static.sass import INSTRUCTION_CLASSES

if TYPE_CHECKING:
    import pandas as pd

    from components.features.static.analyze import KernelStatic, StaticReport


def launch_features(kernel: KernelStatic, grid: tuple[int, ...], block: tuple[int, ...]) -> dict[str, float]:
    """Static counts scaled by a launch: warps launched and per-block register/shared demand."""
    import math

    threads_per_block = math.prod(block)
    blocks = math.prod(grid)
    warps = blocks * math.ceil(threads_per_block / 32)
    return {
        "s_threads_per_block": threads_per_block,
        "s_blocks": blocks,
        "s_warps": warps,
        "s_regs_per_block": kernel.registers * threads_per_block,
        "s_warp_instructions": kernel.instructions["total"] * warps,  # one pass, loops not unrolled
    }


def static_feature_frame(
    reports: Iterable[StaticReport],
    launches: Mapping[str, tuple[tuple[int, ...], tuple[int, ...]]] | None = None,
) -> pd.DataFrame:
    """One row per compiled kernel with ``s_*`` feature columns.

    Key columns: ``kernel_key`` (see module doc), ``source_id``, ``kernel`` (short name),
    ``instance`` (template instantiation or None), ``symbol`` (mangled), ``arch``. Instruction
    counts also appear as fractions of the total (``s_frac_<class>``). ``launches`` maps a
    kernel_key to ``(grid, block)`` to add launch-scaled columns.
    """
    import pandas as pd

    return pd.DataFrame(static_feature_rows(reports, launches))


def static_feature_rows(
    reports: Iterable[StaticReport],
    launches: Mapping[str, tuple[tuple[int, ...], tuple[int, ...]]] | None = None,
) -> list[dict[str, Any]]:
    """``static_feature_frame``'s rows as dicts (a question's few kernels need no pandas)."""
    rows: list[dict[str, Any]] = []
    for report in reports:
        for k in report.kernels:
            key = kernel_key(report.source_id, k.short_name)
            total = max(k.instructions.get("total", 0), 1)
            row: dict[str, Any] = {
                "kernel_key": key,
                "source_id": report.source_id,
                "kernel": k.short_name,
                "instance": k.instance,
                "symbol": k.name,
                "arch": report.arch,
                "s_registers": k.registers,
                "s_shared_bytes": k.shared_bytes,
                "s_stack_bytes": k.stack_bytes,
                "s_spill_store_bytes": k.spills["store_bytes"],
                "s_spill_load_bytes": k.spills["load_bytes"],
                "s_barriers": k.barriers,
                "s_loops": k.loops["count"],
                "s_loop_depth": k.loops["max_depth"],
                "s_total": k.instructions.get("total", 0),
                "s_loop_total": k.loop_instructions.get("total", 0),
            }
            for cls in INSTRUCTION_CLASSES:
                row[f"s_{cls}"] = k.instructions.get(cls, 0)
                row[f"s_loop_{cls}"] = k.loop_instructions.get(cls, 0)
                row[f"s_frac_{cls}"] = k.instructions.get(cls, 0) / total
            if launches and key in launches:
                grid, block = launches[key]
                row.update(launch_features(k, grid, block))
            rows.append(row)
    return rows


__all__ = ["launch_features", "static_feature_frame", "static_feature_rows"]
