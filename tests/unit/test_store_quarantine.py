"""The measured store leaves out, with their reason, rows no kernel can have measured: an empty GEMM (M = 0)
and a time below the compute roofline; a memory-bound row below the DRAM roofline stays (an L2-resident
working set can beat DRAM). Real catalog and physics."""

from __future__ import annotations

import pandas as pd


def _frame() -> pd.DataFrame:
    from components.devices.catalog import load_catalog
    from components.physics import roofline as physics

    spec = load_catalog(user_dir=None).get("h100-sxm")
    big = physics.roofline("gemm", "bf16", {"M": 8192.0, "N": 8192.0, "K": 8192.0}, spec)
    thin = physics.roofline("gemm", "bf16", {"M": 16384.0, "N": 32.0, "K": 4096.0}, spec)
    rows = [
        (0, 4096, 4096, 5.0),  # empty: a launch, no work
        (8192, 8192, 8192, float(big.compute_us[0]) * 0.5),  # twice the bf16 tensor peak
        (8192, 8192, 8192 * 2, float(big.compute_us[0]) * 2.5),  # possible
        (16384, 32, 4096, float(thin.memory_us[0]) * 0.8),  # beats DRAM (L2-resident), not compute
    ]
    frame = pd.DataFrame(rows, columns=["M", "N", "K", "latency_us"])
    return frame.assign(device_id="h100-sxm", dtype="bf16")


def test_empty_and_faster_than_compute_rows_are_quarantined_with_their_reason() -> None:
    from components.devices.catalog import load_catalog
    from components.opmodel.store import COMPUTE_REASON, EMPTY_REASON, quarantine

    kept, counts = quarantine(_frame(), "gemm", load_catalog(user_dir=None))
    assert counts == {"h100-sxm": {EMPTY_REASON: 1, COMPUTE_REASON: 1}}
    assert sorted(kept["K"].tolist()) == [4096, 16384]
    assert (kept["M"] >= 1).all()


def test_a_gpu_the_catalog_lacks_is_judged_on_its_sizes_only() -> None:
    from components.devices.catalog import load_catalog
    from components.opmodel.store import EMPTY_REASON, quarantine

    frame = _frame().assign(device_id="no-such-gpu")
    kept, counts = quarantine(frame, "gemm", load_catalog(user_dir=None))
    assert counts == {"no-such-gpu": {EMPTY_REASON: 1}} and len(kept) == 3
