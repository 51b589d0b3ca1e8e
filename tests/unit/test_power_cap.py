"""The transfer tier's board power cap (components/opmodel/power.py) on real catalog specs."""

from __future__ import annotations

import numpy as np
import pytest

from components.devices.catalog import load_catalog
from components.opmodel import power
from components.opmodel.transfer import Carried, TransferModel
from components.opmodel.transfer_fit import PairGroup
from components.physics import roofline as physics


@pytest.fixture(scope="module")
def specs():
    catalog = load_catalog()
    return {d: catalog.get(d) for d in ("mi300x", "mi308x", "h100-sxm")}


def test_slowdown_binds_only_where_the_board_cannot_feed_the_peak(specs):
    # 0.4 W per 8-bit TFLOP/s: MI300X (2615 TF at 750 W) needs 1046 W, MI308X (688 TF) 275 W
    assert power.slowdown(specs["mi300x"], 0.4) == pytest.approx(2614.9 * 0.4 / 750)
    assert power.slowdown(specs["mi308x"], 0.4) == 1.0
    assert power.slowdown(specs["mi300x"], None) == 1.0


def test_capped_time_slows_compute_bound_rows_only(specs):
    shape = {"M": np.array([1.0, 8192.0]), "N": np.array([8192.0, 8192.0]), "K": np.array([8192.0, 8192.0])}
    roof = physics.roofline("gemm", "fp8_block", shape, specs["mi300x"])
    capped = power.capped_us(roof, 2.0)
    assert capped[0] == pytest.approx(roof.time_us[0])  # M = 1: memory-bound
    assert capped[1] == pytest.approx(2.0 * roof.compute_us[1])


def _groups(specs, energy: float | None) -> list[PairGroup]:
    """Each GPU's large GEMMs timed by physics under ``energy``'s cap, carried from the other without one."""
    shape = {k: np.array([4096.0, 8192.0, 16384.0]) for k in ("M", "N", "K")}
    model = TransferModel()
    out = []
    for x, y in (("mi300x", "mi308x"), ("mi308x", "mi300x"), ("h100-sxm", "mi308x")):
        roofs = [physics.roofline("gemm", "fp8_block", shape, specs[d]) for d in (x, y)]
        times = [
            power.capped_us(r, power.slowdown(specs[d], energy)) + 3.0
            for r, d in zip(roofs, (x, y), strict=True)
        ]
        carried = times[1] * (roofs[0].time_us + 3.0) / (roofs[1].time_us + 3.0)  # plain ratio
        c = Carried(y, 1.0, carried, np.zeros(3, bool), np.zeros((3, 5)))
        out.append(PairGroup(x, "gemm", times[0], [c], "fp8_block", shape, "fp8_block"))
    return out, model


def test_choose_energy_finds_the_cap_the_rows_were_timed_under(specs):
    groups, model = _groups(specs, 0.4)
    energy, scores = power.choose_energy(groups, ["h100-sxm", "mi300x", "mi308x"], specs, model)
    assert energy == pytest.approx(0.4)
    assert scores["0.4"] < 1e-9 < scores["none"]
    power.apply_energy(groups, specs, model)  # no energy on the model yet: nothing changes
    model.tensor_energy = energy
    power.apply_energy(groups, specs, model)
    assert np.allclose(groups[0].carried[0].duration_us, groups[0].actual)


def test_choose_energy_keeps_plain_physics_without_a_capped_gpu(specs):
    groups, model = _groups(specs, None)
    energy, _ = power.choose_energy(groups, ["h100-sxm", "mi300x", "mi308x"], specs, model)
    assert energy is None
