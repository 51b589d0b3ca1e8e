"""Achievable peaks: the share of each pipe's datasheet peak that measured kernels reach, per pipe and per
(architecture, pipe), and the engine's cap at it.

A datasheet peak is not a rate kernels reach, and how far below it they stay is the architecture's (its
kernel library, its clocks under load), not the pipe's alone: on the measured store the int8 GEMMs of
Hopper (H200) reach 54% of the datasheet's 1,979 TOP/s while Ampere's (A100) and Ada's (L40S) reach 92% and
90% of theirs, and a lent H200's own sweep (``profiled-data/h200-2026-11-27-wide``: ``torch._int_mm``, 991
TOP/s) agrees. One share per pipe pooled over every GPU then lets a Hopper int8 answer claim ~90% of the
datasheet; pooled, it also sits below what the best architecture measured (fp8: 0.67 pooled, H200 0.72).

Learned (``achievable_peaks``): per pipe key ``"<pipe>|<dtype>"`` and ``"dram"`` (every measured GPU and
op family pooled, as before the per-architecture shares), and per
``"<architecture>:<family>:<pipe>|<dtype>"`` (that architecture's measured kernels of that family only: a
family's low share is its kernels', not the pipe's -- Hopper's int4_wo MoE kernels reach 28% of the bf16
peak, its int4_wo GEMMs 90%): the ACHIEVABLE_QUANTILE of achieved / peak over the rows bound on the pipe,
where at least MIN_ROWS rows measured it, capped at ACHIEVABLE_MAX. Used (``share_of``): the asked GPU's
architecture's share for the question's family where learned, else the pooled one, else the highest pooled
compute share.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from components.physics import roofline as physics

ACHIEVABLE_QUANTILE = 0.99
ACHIEVABLE_MAX = 0.98  # no answer at 100% of a datasheet peak, whatever a table's L2-resident rows reached
MIN_ROWS = 50  # fewer rows bound on a pipe: no share learned from them


def arch_key(architecture: str | None, family: str, pipe: str) -> str:
    """The key of an architecture's own share of ``pipe`` in ``family``'s kernels
    (``"hopper:gemm:tensor|int8"``)."""
    return f"{str(architecture or '').lower()}:{family}:{pipe}"


def achievable_peaks(
    store: dict[str, pd.DataFrame], specs: dict[str, Any], per_group: int = 4000, memo: dict | None = None
) -> dict[str, float]:
    """Per pipe (``"dram"``, ``"<pipe>|<dtype>"``) over every GPU of ``specs`` and op family, and per
    ``"<architecture>:<family>:<pipe>|<dtype>"`` over that architecture's GPUs' kernels of that family: the
    ACHIEVABLE_QUANTILE of achieved / peak over the measured rows bound on it (capped at ACHIEVABLE_MAX)."""
    from components.opmodel.transfer_fit import TRANSFER_FAMILIES

    shares: dict[str, list[np.ndarray]] = {}  # key -> achieved / peak
    for family in TRANSFER_FAMILIES:
        frame = store.get(family)
        if frame is None:
            continue
        for device in sorted(set(map(str, frame["device_id"].unique())) & set(specs)):
            for key, achieved in _device_shares(family, frame, device, specs[device], per_group, memo):
                shares.setdefault(key, []).append(achieved)
    out: dict[str, float] = {}
    for key, values in shares.items():
        v = np.concatenate(values)
        if len(v) >= MIN_ROWS:
            out[key] = float(min(np.quantile(v, ACHIEVABLE_QUANTILE), ACHIEVABLE_MAX))
    return out


def _device_shares(
    family: str, frame: pd.DataFrame, device: str, spec: Any, per_group: int, memo: dict | None
) -> list[tuple[str, np.ndarray]]:
    """(key, achieved / peak) of one GPU's measured rows of ``family``, in ``achievable_peaks``' order: kept
    in ``memo`` when given (a leave-one-GPU-out bench's folds: a GPU's rows, and so its shares, are the same
    in every fold that trains on it)."""
    from components.opmodel.transfer_fit import device_rows, groups_of, shape_of

    key = (family, device, per_group)
    kept = None if memo is None else memo.setdefault("peak_shares", {})
    if kept is not None and key in kept:
        return kept[key]
    architecture = getattr(spec, "architecture", None)
    out: list[tuple[str, np.ndarray]] = []
    for dtype, kv, rows in groups_of(family, device_rows(family, frame, device, per_group, "peak", memo)):
        numeric = {k: v for k, v in shape_of(family, rows).items() if k != "distribution"}
        roof = physics.roofline(family, dtype, numeric, spec, kv)
        latency = rows["latency_us"].to_numpy(dtype="float64")
        compute = roof.compute_us >= roof.memory_us
        pipe = f"{roof.choice.pipe}|{roof.choice.dtype}"
        achieved = roof.compute_us[compute] / latency[compute]
        out.append((pipe, achieved))
        if architecture:
            out.append((arch_key(architecture, family, pipe), achieved))
        out.append(("dram", roof.memory_us[~compute] / latency[~compute]))
    if kept is not None:
        kept[key] = out
    return out


def share_of(
    achievable: dict[str, float], architecture: str | None, family: str, pipe: str
) -> tuple[float, str]:
    """(share of the datasheet peak, whose measured kernels it was learned from) for ``pipe`` in ``family``'s
    kernels on a GPU of ``architecture``: its architecture's own kernels of the family where learned, else
    every GPU's (any family), else the highest compute share learned (1.0 where nothing was)."""
    own = achievable.get(arch_key(architecture, family, pipe))
    if own is not None:
        return own, f"{architecture}'s measured {family} kernels"
    if pipe in achievable:
        return achievable[pipe], "every measured GPU's kernels"
    compute = [v for k, v in achievable.items() if k != "dram" and ":" not in k]
    return (max(compute), "every measured GPU's kernels, any pipe") if compute else (1.0, "the datasheet")


def cap_achievable(
    duration: np.ndarray,
    roof: physics.Roofline,
    achievable: dict[str, float],
    architecture: str | None,
    family: str,
) -> tuple[np.ndarray, str]:
    """A runtime no shorter than each pipe's work at its achievable share of the peak (``share_of``; DRAM's
    for the bytes), and the note naming the compute pipe's achievable rate."""
    pipe = f"{roof.choice.pipe}|{roof.choice.dtype}"
    share, source = share_of(achievable, architecture, family, pipe)
    floor = np.maximum(roof.compute_us / share, roof.memory_us / achievable.get("dram", 1.0))
    capped = np.where(np.isfinite(duration), np.maximum(duration, floor), duration)
    rate = share * roof.peak_flops / 1e12
    unit = "TOP/s" if roof.choice.precision.startswith("int") else "TFLOP/s"
    note = (
        f"achievable {roof.choice.dtype} peak {rate:,.0f} {unit} ({share:.0%} of the datasheet's "
        f"{roof.peak_flops / 1e12:,.0f}; from {source})"
    )
    return capped, note
