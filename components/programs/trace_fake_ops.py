"""Fake-tensor stand-ins the tracer's recorder needs where a meta kernel is narrower than the GPU op.

Imported by ``components.programs.trace_worker`` inside its sandboxed child (torch imported lazily).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def grouped_mm_any_dtype(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func(*args, **kwargs)``; for ``aten._grouped_mm`` on FP32/FP16 fake tensors, its output shape
    inferred in BF16 and cast back. Why: the fake (meta) kernel checks CUDA's BF16-only fast path, so an
    FP32 Hugging Face MoE (``experts_implementation="grouped_mm"``, the default) failed to trace with
    "Expected inputs of BF16 type" though its GEMMs' shapes are known; the recorded op keeps its dtype."""
    import torch

    try:
        return func(*args, **kwargs)
    except RuntimeError as exc:
        if func.overloadpacket is not torch.ops.aten._grouped_mm or "Expected inputs of BF16" not in str(exc):
            raise
    a, b, *rest = args
    dtype = kwargs.get("out_dtype") or a.dtype
    bf16 = {k: v for k, v in kwargs.items() if k != "out_dtype"}
    return func(a.to(torch.bfloat16), b.to(torch.bfloat16), *rest, **bf16).to(dtype)


def out_of_memory(text: str) -> bool:
    """An error text that says an allocation failed (C++ ``bad_alloc``, torch's CPU allocator, CUDA's)."""
    lowered = text.lower()
    return "bad_alloc" in text or "out of memory" in lowered or "can't allocate memory" in lowered


@contextmanager
def real_weights_memory(fake_error: str) -> Iterator[None]:
    """Around the retry with real CPU weights: running out of memory there names why the fake trace
    failed first (before: a bare allocator error, or "ran out of memory" without the fake failure)."""
    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and not out_of_memory(str(exc)):
            raise
        why = f"not traceable on fake tensors ({fake_error}); its real weights ran out of memory"
        raise MemoryError(why) from exc
