"""L2-resident working sets in the transfer tier (``components/opmodel/l2_resident.py``), on synthetic stores
whose times follow known physics (catalog specs, synthetic latencies): the memory side of a working set the
L2 holds is read at the L2's bandwidth; the usable share of the L2 is chosen on the training GPUs (none where
the times follow the DRAM alone); carried with it, L40S's answer from H100 is exact where the DRAM ratio
errs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

GPUS = ("a100-sxm4-80gb", "h100-sxm", "h200", "l40s")
FLOOR_US = 5.0
SIZES = 2.0 ** np.arange(0, 13)
SITES = (1024.0, 2048.0, 4096.0, 8192.0)


@pytest.fixture(scope="module")
def catalog():
    from components.devices.catalog import load_catalog

    return load_catalog()


def resident_gemm(catalog, capacity: float | None) -> pd.DataFrame:
    """bf16 GEMM rows per GPU: ``(roofline + FLOOR_US) / 0.8`` with the memory side served from the L2 for
    ``capacity`` of its size (None: the DRAM alone)."""
    from components.opmodel.l2_resident import effective_us
    from components.physics import roofline as physics

    m, n, k = np.meshgrid(SIZES, SITES, SITES, indexing="ij")
    shape = {"M": m.ravel(), "N": n.ravel(), "K": k.ravel()}
    frames = []
    for device in GPUS:
        roof = physics.roofline("gemm", "bf16", shape, catalog.get(device))
        latency = (effective_us(roof, catalog.get(device), capacity) + FLOOR_US) / 0.8
        repeats = {"n_repeats": 1, "latency_min_us": latency, "latency_max_us": latency, "dtype": "bf16"}
        frames.append(pd.DataFrame(shape).assign(device_id=device, latency_us=latency, **repeats))
    return pd.concat(frames, ignore_index=True)


def test_a_working_set_the_l2_holds_is_read_at_the_l2_bandwidth(catalog) -> None:
    """L40S (96 MB of L2, published for none of its sisters' but L40's and L20's Ada figures) serves a 32 MB
    working set from the L2 and a 1 GB one mostly from DRAM; no capacity, or a GPU whose L2 is no faster than
    its DRAM (MI308X's 80 CUs), leaves the roofline as it is; never above the roofline."""
    from components.opmodel.l2_resident import effective_us, l2_bandwidth_bps
    from components.physics import roofline as physics

    l40s = catalog.get("l40s")
    assert l40s.l2_gbps is None
    assert 4e12 < l2_bandwidth_bps(l40s) < 8e12  # Ada's bytes per clock per SM x 142 SMs x 2520 MHz
    assert l2_bandwidth_bps(catalog.get("h100-sxm")) == pytest.approx(catalog.get("h100-sxm").l2_gbps * 1e9)
    shape = {"M": np.array([1.0, 1.0]), "N": np.array([4096.0, 16384.0]), "K": np.array([4096.0, 32768.0])}
    roof = physics.roofline("gemm", "bf16", shape, l40s)
    np.testing.assert_array_equal(effective_us(roof, l40s, None), roof.time_us)
    got = effective_us(roof, l40s, 1.0)
    assert (got <= roof.time_us).all()
    assert got[0] == pytest.approx(roof.dram_bytes[0] / l2_bandwidth_bps(l40s) * 1e6)
    assert got[1] / roof.time_us[1] > 0.9  # 1 GB: the L2's 96 MB of it is a tenth
    mi308x = catalog.get("mi308x")
    roof_amd = physics.roofline("gemm", "bf16", shape, mi308x)
    np.testing.assert_array_equal(effective_us(roof_amd, mi308x, 1.0), roof_amd.time_us)


def test_a_carry_reads_the_l2_on_both_gpus_or_on_neither(catalog) -> None:
    """B200 (no published L2 bandwidth; Blackwell's published parts' bytes per clock give less than its
    DRAM) from H100 (its L2 known): carried by the DRAM on both sides, as without the L2; L40S from H100 by
    the L2 on both."""
    from components.opmodel.l2_resident import carry_times, pair_capacity, reads_l2
    from components.physics import roofline as physics

    h100, b200, l40s = catalog.get("h100-sxm"), catalog.get("b200"), catalog.get("l40s")
    assert reads_l2(h100) and reads_l2(l40s) and not reads_l2(b200)
    assert pair_capacity(0.5, (b200, h100)) is None and pair_capacity(0.5, (l40s, h100)) == 0.5
    shape = {"M": np.array([1.0, 16.0]), "N": np.array([4096.0, 4096.0]), "K": np.array([4096.0, 4096.0])}
    t_y = np.array([20.0, 25.0])
    for asked, moved in ((b200, False), (l40s, True)):
        roofs = tuple(physics.roofline("gemm", "bf16", shape, s) for s in (asked, h100))
        with_l2 = carry_times(t_y, roofs, (asked, h100), (3.0, 3.0), 0.5)[0]
        without = carry_times(t_y, roofs, (asked, h100), (3.0, 3.0), None)[0]
        assert (not np.allclose(with_l2, without)) == moved


def test_the_usable_l2_share_is_chosen_on_training_gpus_and_carries_l40s_from_h100(catalog, tmp_path) -> None:
    from components.opmodel.measured import MeasuredTier
    from components.opmodel.transfer import TransferModel, TransferSettings, TransferTier
    from components.opmodel.transfer_fit import fit_transfer
    from components.physics import roofline as physics

    specs = {d: catalog.get(d) for d in GPUS}
    floors = {"gemm": FLOOR_US}
    dram_only = {"gemm": resident_gemm(catalog, None)}
    plain = fit_transfer(MeasuredTier(dram_only, specs), dram_only, list(GPUS), 120, floors)
    assert plain.l2_capacity is None and plain.meta["l2_scores"]["none"] < 1e-9
    # L40S is never read: its time follows the L2 as the training GPUs' do
    store = {"gemm": resident_gemm(catalog, 0.5)}
    train = [d for d in GPUS if d != "l40s"]
    three = {"gemm": store["gemm"][store["gemm"]["device_id"] != "l40s"]}
    model = fit_transfer(MeasuredTier(three, {d: specs[d] for d in train}), three, train, 120, floors)
    assert model.l2_capacity == 0.5
    assert model.meta["l2_scores"]["0.5"] < model.meta["l2_scores"]["none"]
    model.save(tmp_path)
    assert TransferModel.load(tmp_path).l2_capacity == 0.5
    # the carried answer (the engine then keeps it at or above the DRAM roofline, ``physics.clamp``)
    h100 = {"gemm": store["gemm"][store["gemm"]["device_id"] == "h100-sxm"]}
    measured = MeasuredTier(h100, {"h100-sxm": specs["h100-sxm"]})
    l40s = store["gemm"][store["gemm"]["device_id"] == "l40s"]
    shape = {k: l40s[k].to_numpy() for k in ("M", "N", "K")}
    roof = physics.roofline("gemm", "bf16", shape, specs["l40s"])
    truth = l40s["latency_us"].to_numpy()
    answers = {}
    for capacity in (0.5, None):
        carry = TransferModel(settings={"gemm": TransferSettings()}, floors=floors, l2_capacity=capacity)
        tier = TransferTier(measured, None, carry)
        answers[capacity], support = tier.resolve("gemm", "bf16", shape, specs["l40s"], roof)
        assert (support == "carried over from h100-sxm (measured) by roofline ratio").all()
    np.testing.assert_allclose(answers[0.5], truth, rtol=1e-9)
    assert np.abs(answers[None] / truth - 1).max() > 0.5  # the DRAM ratio (3.9x) on L2-resident rows
