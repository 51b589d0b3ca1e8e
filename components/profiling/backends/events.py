"""``events``: CUDA-event timing through torch (NVIDIA, and AMD through torch's HIP build).

Median and spread of ``repeats`` event pairs after ``warmup`` calls; with ``l2_flush`` the L2 is
evicted before every timed call (outside the event pair). Clocks are free-running (``boost``).
"""

from __future__ import annotations

from typing import Any

from components.profiling.backends.base import BackendUnavailable, MeasureContext, base_row, unsupported
from components.profiling.cases import Case
from components.profiling.rows import timing_stats


def gpu_environment(tool: str, tool_version: str, clock_mode: str) -> dict[str, Any]:
    import torch

    return {
        "device_name": torch.cuda.get_device_name(0),
        "tool": tool,
        "tool_version": tool_version,
        "clock_mode": clock_mode,
        "torch": torch.__version__,
        "runtime": f"HIP {torch.version.hip}" if torch.version.hip else f"CUDA {torch.version.cuda}",
    }


def require_gpu(backend: str) -> None:
    try:
        import torch
    except ImportError:
        raise BackendUnavailable(f"--backend {backend}: torch is not installed on this worker") from None
    if not torch.cuda.is_available():
        raise BackendUnavailable(
            f"--backend {backend}: no GPU visible to torch on this machine (use --backend host)"
        )


class EventsBackend:
    name = "events"
    kinds = frozenset({"op", "source", "triton", "program"})

    def check(self) -> None:
        require_gpu(self.name)

    def environment(self) -> dict[str, Any]:
        import torch

        runtime = f"HIP {torch.version.hip}" if torch.version.hip else f"CUDA {torch.version.cuda}"
        return gpu_environment("torch.cuda.Event", f"torch {torch.__version__}, {runtime}", "boost")

    def measure(self, cases: list[Case], ctx: MeasureContext) -> list[dict[str, Any]]:
        import torch

        from components.profiling.launch import build_callable, l2_flusher

        env = self.environment()
        flush = l2_flusher("cuda") if ctx.l2_flush else None
        rows = []
        for case in cases:
            row = base_row(ctx, env, self.name, case)
            try:
                call = build_callable(case, "cuda", ctx.datasets_dir)
                for _ in range(ctx.warmup):
                    call()
                torch.cuda.synchronize()
                samples = []
                for _ in range(ctx.repeats):
                    if flush is not None:
                        flush()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    call()
                    end.record()
                    end.synchronize()
                    samples.append(start.elapsed_time(end) * 1000.0)  # ms -> us
                row.update(timing_stats(samples))
            except Exception as exc:  # OOM, unsupported dtype: recorded, not dropped
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                torch.cuda.empty_cache()
            rows.append(row)
        return rows


__all__ = ["EventsBackend", "gpu_environment", "require_gpu", "unsupported"]
