"""The warm-L2 roofline (``components/physics/l2.py``): a working set the L2 holds is read at the L2's
bandwidth; never above the DRAM roofline, non-decreasing in the bytes; a runtime clamped at it may beat the
DRAM roofline by what the L2 holds (then its bound is ``l2``), never the warm one."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def catalog():
    from components.devices.catalog import load_catalog

    return load_catalog()


def test_the_warm_memory_side_reads_what_the_l2_holds_at_its_bandwidth() -> None:
    from components.physics.l2 import warm_memory_us

    mb = 1e6
    work = np.array([0.0, 10 * mb, 100 * mb, 200 * mb, 1000 * mb])
    dram, l2 = 1e12, 6e12
    got = warm_memory_us(work, dram, 100 * mb, l2)
    np.testing.assert_allclose(got[:3], work[:3] / l2 * 1e6)  # fits: all of it at the L2's bandwidth
    assert got[3] == pytest.approx((100 * mb / l2 + 100 * mb / dram) * 1e6)  # the L2's worth, the rest DRAM
    assert np.all(got <= work / dram * 1e6) and np.all(np.diff(got) > 0)
    fine = np.linspace(1.0, 1000 * mb, 5001)
    assert np.all(np.diff(warm_memory_us(fine, dram, 100 * mb, l2)) > 0)
    # no L2, or one no faster than the DRAM: the DRAM time
    np.testing.assert_allclose(warm_memory_us(work, dram, None, l2), work / dram * 1e6)
    np.testing.assert_allclose(warm_memory_us(work, dram, 100 * mb, 0.9e12), work / dram * 1e6)


def test_bad_dram_bandwidth_is_named() -> None:
    from components.physics.base import PhysicsError
    from components.physics.l2 import warm_memory_us

    with pytest.raises(PhysicsError, match="DRAM bandwidth"):
        warm_memory_us(np.array([1.0]), 0.0, 1e6, 1e12)


def test_the_clamp_reads_the_warm_roofline_and_names_the_l2(catalog) -> None:
    from components.opmodel.l2_resident import warm_roof
    from components.physics import roofline as physics

    l40s, mi308x = catalog.get("l40s"), catalog.get("mi308x")
    shape = {"M": np.array([1.0, 1.0, 8192.0]), "N": np.array([4096.0, 16384.0, 8192.0]), "K": 4096.0}
    roof = physics.roofline("gemm", "bf16", shape, l40s)
    warm = warm_roof(roof, l40s)
    assert warm.floor_us[0] < 0.3 * roof.time_us[0]  # 32 MB of weights, in L40S's 96 MB L2
    assert np.all(warm.floor_us <= roof.time_us) and warm.floor_us[2] == roof.time_us[2]  # compute-bound
    got = physics.clamp(np.zeros(3), warm)
    np.testing.assert_allclose(got, warm.floor_us)
    assert list(physics.bound_of(got, warm)) == ["l2", "l2", roof.bound_pipe[2]]
    assert list(physics.bound_of(roof.time_us, warm)) == list(roof.bound_pipe)
    # a GPU whose L2 is not known to outrun its DRAM keeps the DRAM roofline as its floor
    amd = physics.roofline("gemm", "bf16", shape, mi308x)
    np.testing.assert_array_equal(warm_roof(amd, mi308x).floor_us, amd.time_us)
