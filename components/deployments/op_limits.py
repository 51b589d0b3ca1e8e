"""The GPU's reachable rates (``physics.limits``: power-capped tensor rate, SM-fed DRAM rate) in the op times
every deployment is composed from.

An op-time function carries the limits (:func:`limited`); ``compose.time_ops`` keeps, per op line, its
op-tier times and their speed-of-light parts (``OpLine.parts``) and bounds them with :func:`line_times` --
the one place the limits meet an op time, for ``predict --llm`` (the simulation's step grids), the fitted
composition and the PipeWeave bench alike (its folds re-bound the same lines with the limits learned on
their training GPUs). Production's limits are data (``engines/constants.json``, ``framework.gpu_limits``),
learned on every PipeWeave run by ``fit_constants --framework``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from components.physics.limits import GpuLimits

LIMITS_KEY = "gpu_limits"  # the framework section's key in engines/constants.json


def limited(fn: Callable[..., Any], limits: GpuLimits) -> Callable[..., Any]:
    """``fn`` (an ``OpTimeFn``) carrying ``limits`` for ``compose.time_ops``; ``fn`` itself without any. An op
    engine's per-framework functions (``for_framework``) carry them too."""
    if not limits:
        return fn

    @functools.wraps(fn)  # the signature (kv_dtype taken or not) is fn's
    def op_time(*args: Any, **kw: Any) -> Any:
        return fn(*args, **kw)

    op_time.limits = limits  # type: ignore[attr-defined]
    per_framework = getattr(fn, "for_framework", None)
    if per_framework is not None:
        op_time.for_framework = lambda name: limited(per_framework(name), limits)  # type: ignore[attr-defined]
    return op_time


def limits_of(fn: Any) -> GpuLimits | None:
    return getattr(fn, "limits", None)


def line_times(parts: tuple[np.ndarray, ...], spec: Any, limits: GpuLimits | None) -> np.ndarray:
    """One op line's times per element (count included) from its ``parts`` (op-tier times at or above the
    speed of light, the tensor-pipe and DRAM parts of that floor, the op's time without its compute on the
    rows no kernel of the GPU measured -- NaN elsewhere --, which rows the GPU's own measured kernels
    answered), bounded by ``limits`` where given (``physics.limits.GpuLimits.bound``)."""
    times, tensor_us, memory_us, rest, measured = parts
    return times if not limits else limits.bound(times, tensor_us, memory_us, spec, measured, rest)


def production_limits(constants: Path | None = None) -> GpuLimits:
    """The limits an engines' constants file holds (a model's own, else the package's
    ``engines/constants.json``; none there: no limit)."""
    from components.deployments.engines.base import CONSTANTS_FILE, framework_constants

    return GpuLimits.from_json(framework_constants(constants or CONSTANTS_FILE).get(LIMITS_KEY))


def limit_notes(fn: Any, spec: Any) -> list[str]:
    """What an answer on ``spec`` states of the limits its op times carry (only those that bind)."""
    limits = limits_of(fn)
    return limits.notes(spec) if limits else []
