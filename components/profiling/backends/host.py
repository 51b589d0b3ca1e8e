"""``host``: wall-clock timing of the op suite through torch on the CPU (CI, no GPU).

Host rows are never mixed with GPU measurements: the CPU is not in the device catalog, so ingest
keeps them out of the canonical tables (they validate the platform, not a GPU).
"""

from __future__ import annotations

import platform
import time
from typing import Any

from components.profiling.backends.base import MeasureContext, base_row, unsupported
from components.profiling.cases import Case
from components.profiling.rows import timing_stats


class HostBackend:
    name = "host"
    kinds = frozenset({"op"})

    def check(self) -> None:
        import torch  # noqa: F401 -- the only requirement

    def environment(self) -> dict[str, Any]:
        import torch

        return {
            "device_name": f"host-cpu:{platform.processor() or platform.machine()}",
            "tool": "torch-cpu",
            "tool_version": f"torch {torch.__version__}",
            "clock_mode": "host",
            "can_flush": False,
        }

    def measure(self, cases: list[Case], ctx: MeasureContext) -> list[dict[str, Any]]:
        import torch

        torch.set_num_threads(1)  # one core per worker: stable timings, no oversubscription
        env = self.environment()
        rows = []
        for case in cases:
            if case.kind not in self.kinds:
                rows.append(
                    unsupported(ctx, env, self.name, case, f"host backend cannot measure {case.kind} cases")
                )
                continue
            row = base_row(ctx, env, self.name, case)
            try:
                call = case_call(case)
                for _ in range(ctx.warmup):
                    call()
                samples = []
                for _ in range(ctx.repeats):
                    start = time.perf_counter()
                    call()
                    samples.append((time.perf_counter() - start) * 1e6)
                row.update(timing_stats(samples))
            except Exception as exc:  # a failing case is recorded, not dropped
                row["error"] = f"{type(exc).__name__}: {exc}"
            rows.append(row)
        return rows


def case_call(case: Case):
    from components.profiling.launch import build_callable

    return build_callable(case, "cpu")
