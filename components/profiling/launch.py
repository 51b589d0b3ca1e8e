"""Turn any case (op, CUDA source, Triton, KernelBench program) into a zero-argument call on a device.

Operands are allocated once, outside the call, so timing and counters see only the kernel work.
Heavy imports (torch, cuda-python, triton) happen inside the builders.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from components.profiling.cases import Case

# Bytes zeroed between timed repeats to evict the L2 (larger than any GPU's L2: H100 50 MB,
# MI300X 256 MB Infinity Cache is not L2 but is flushed too).
L2_FLUSH_BYTES = 512 * 1024 * 1024


def build_callable(case: Case, device: str, datasets_dir: Path | None = None) -> Callable[[], Any]:
    """``device``: ``cpu`` or ``cuda`` (ROCm builds of torch also say ``cuda``)."""
    if case.kind == "op":
        from components.profiling.suites import build

        return build(case.op_case(), device)
    if case.kind == "program":
        return build_program(case, device, datasets_dir)
    if device == "cpu":
        raise ValueError(f"case {case.case_id}: {case.kind} kernels need a GPU")
    if case.kind == "source":
        from components.profiling.kernels_cuda import build_source

        return build_source(case.spec)
    if case.kind == "triton":
        from components.profiling.kernels_triton import build_triton

        return build_triton(case.spec)
    raise ValueError(f"case {case.case_id}: unknown kind {case.kind!r}")


def build_program(case: Case, device: str, datasets_dir: Path | None) -> Callable[[], Any]:
    """A KernelBench program: ``Model(*get_init_inputs())`` called on ``get_inputs()``, on ``device``."""
    import importlib.util

    import torch

    if datasets_dir is None:
        from components.platform.config import get_settings

        datasets_dir = get_settings().datasets_dir
    path = Path(datasets_dir) / case.spec["path"]
    spec = importlib.util.spec_from_file_location(f"kc_program_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"case {case.case_id}: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # runs the program's module code: profiling workers only, never a server
    model = module.Model(*module.get_init_inputs()).to(device).eval()
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]

    def call() -> Any:
        with torch.no_grad():
            return model(*inputs)

    return call


def l2_flusher(device: str) -> Callable[[], None] | None:
    """A call that evicts the GPU L2 (zeroing a buffer larger than it); None on the CPU."""
    if device == "cpu":
        return None
    import torch

    scratch = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device=device)
    return lambda: scratch.zero_()
