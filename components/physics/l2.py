"""The warm-L2 roofline: a working set the L2 holds is read at the L2's bandwidth, not the DRAM's.

The DRAM roofline (``roofline.Roofline.time_us``) reads every byte from DRAM: right for a cold cache, too slow
for a benchmark whose repeats find their working set in the L2. L40S (96 MB of L2 at ~6 TB/s over 864 GB/s of
GDDR6) runs its 8-128 MB GEMMs, decodes and MoE layers 1.2-2.6x faster than its DRAM peak allows; an answer
clamped at the DRAM roofline cannot say so. The warm roofline is the bound such a kernel cannot beat: the
share ``h = min(1, capacity x L2 bytes / bytes)`` of the working set at the L2's bandwidth, the rest at the
DRAM's, and the compute and link sides unchanged. It is never above the DRAM roofline (an L2 bandwidth at or
below the DRAM's, or none known, gives the DRAM roofline itself). One definition, read by the transfer tier's
carry (with a learned usable share, ``components.opmodel.l2_resident``) and by ``clamp`` where a roofline
carries it (the whole L2: a lower bound; the engine does not set it yet, docs/transfer-l2.md).

The L2 bandwidth comes from the caller (the catalog's published figure, else its estimate from SMs x clock:
``components.opmodel.l2_resident.l2_bandwidth_bps``); physics sits below the catalog.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from components.physics.base import PhysicsError

if TYPE_CHECKING:
    from components.physics.roofline import Roofline


def warm_memory_us(
    dram_bytes: np.ndarray,
    dram_bps: float,
    l2_bytes: float | None,
    l2_bps: float | None,
) -> np.ndarray:
    """Per row, the memory time with the share of ``dram_bytes`` the L2 holds (``l2_bytes``: its usable size)
    read at ``l2_bps`` and the rest at ``dram_bps``; the DRAM time where no L2 outruns the DRAM."""
    if not dram_bps or dram_bps <= 0:
        raise PhysicsError(f"DRAM bandwidth must be positive, got {dram_bps!r}")
    work = np.asarray(dram_bytes, dtype="float64")
    if not l2_bytes or not l2_bps or l2_bytes <= 0 or l2_bps <= dram_bps:
        return work / dram_bps * 1e6
    share = np.minimum(1.0, float(l2_bytes) / np.maximum(work, 1.0))
    return work * (share / float(l2_bps) + (1.0 - share) / dram_bps) * 1e6


def with_l2(roof: Roofline, l2_bytes: float | None, l2_bps: float | None) -> Roofline:
    """``roof`` with its warm-L2 memory side set (``Roofline.floor_us`` then the warm-L2 roofline): the whole
    ``l2_bytes`` usable, a lower bound. ``roof`` unchanged where no L2 outruns the DRAM."""
    from dataclasses import replace

    if not l2_bytes or not l2_bps or l2_bps <= roof.peak_bps:
        return roof
    return replace(roof, l2_memory_us=warm_memory_us(roof.dram_bytes, roof.peak_bps, l2_bytes, l2_bps))
