"""A memory-bound kernel's time beyond its roofline carried as cycles (``opmodel/beyond_carry.py``),
on synthetic decode-attention stores whose times follow known physics (catalog specs, synthetic latencies):
the carry keeps the answer at or above the asked GPU's roofline and never slower with more bandwidth; it is
chosen on the training GPUs only where their times say so (the ratio where they follow the ratio); carried
so, A100's answer from H100 is exact where the roofline's ratio errs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

GPUS = ("a100-sxm4-80gb", "h100-sxm", "h200")
CYCLES = 20_000.0  # a decode kernel's fixed cost, in cycles of the SM clock
FLOOR_US = 4.0
KV = 2.0 ** np.arange(7, 17)
BATCH = (1.0, 8.0, 64.0)


@pytest.fixture(scope="module")
def catalog():
    from components.devices.catalog import load_catalog

    return load_catalog()


def decode_shape() -> dict[str, np.ndarray]:
    kv, b = np.meshgrid(KV, np.array(BATCH), indexing="ij")
    n = kv.size
    ones = np.ones(n)
    return {
        "B": b.ravel(),
        "S": ones,
        "KV": kv.ravel(),
        "H": 32 * ones,
        "HKV": 8 * ones,
        "D": 128 * ones,
        "W": 0 * ones,
    }


def decode_rows(catalog, law: str, gpus: tuple[str, ...] = GPUS) -> pd.DataFrame:
    """bf16 decode rows per GPU: the DRAM roofline plus ``CYCLES`` at the GPU's boost clock
    (``law`` "cycles"), or that time on H100 carried to each GPU by the roofline ratio (``law`` "ratio")."""
    from components.physics import roofline as physics

    shape = decode_shape()
    h100 = catalog.get("h100-sxm")
    roof_h = physics.roofline("attention", "bf16", shape, h100, "bf16").time_us
    t_h = roof_h + CYCLES / float(h100.boost_clock_mhz)
    frames = []
    for device in gpus:
        spec = catalog.get(device)
        roof = physics.roofline("attention", "bf16", shape, spec, "bf16").time_us
        if law == "cycles":
            latency = roof + CYCLES / float(spec.boost_clock_mhz)
        else:
            latency = t_h * (roof + FLOOR_US) / (roof_h + FLOOR_US)
        extra = {"n_repeats": 1, "latency_min_us": latency, "latency_max_us": latency}
        frames.append(
            pd.DataFrame(shape).assign(
                device_id=device, phase="decode", dtype="bf16", kv_dtype="bf16", latency_us=latency, **extra
            )
        )
    return pd.concat(frames, ignore_index=True)


def test_the_cycles_beyond_the_roofline_carry_at_the_clock_ratio(catalog) -> None:
    from components.opmodel.l2_resident import carry_times
    from components.physics import roofline as physics

    shape = decode_shape()
    a100, h100 = catalog.get("a100-sxm4-80gb"), catalog.get("h100-sxm")
    roofs = tuple(physics.roofline("attention", "bf16", shape, s, "bf16") for s in (a100, h100))
    beyond_y = np.full(len(shape["KV"]), 7.0)
    t_y = roofs[1].time_us + beyond_y
    got, non_twin, twin = carry_times(t_y, roofs, (a100, h100), (FLOOR_US, FLOOR_US), None, True, None, True)
    assert not twin.any()
    ratio = float(h100.boost_clock_mhz) / float(a100.boost_clock_mhz)
    np.testing.assert_allclose(got, roofs[0].time_us + beyond_y * ratio)
    np.testing.assert_array_equal(got, non_twin)  # what the fit's statistics read is the carry itself
    assert (got >= roofs[0].time_us).all()
    by_ratio, _, _ = carry_times(t_y, roofs, (a100, h100), (FLOOR_US, FLOOR_US), None, True, None, False)
    np.testing.assert_allclose(by_ratio, t_y * (roofs[0].time_us + FLOOR_US) / (roofs[1].time_us + FLOOR_US))
    # a row faster than the relative's roofline keeps the ratio
    fast, _, _ = carry_times(roofs[1].time_us * 0.5, roofs, (a100, h100), (0.0, 0.0), None, True, None, True)
    np.testing.assert_allclose(fast, roofs[0].time_us * 0.5)


def test_more_bandwidth_is_never_slower_with_the_cycles_carry() -> None:
    from components.opmodel.beyond_carry import beyond_at_clock

    t_y = np.array([10.0, 20.0, 40.0])
    eff_y = np.array([8.0, 15.0, 30.0])
    bound = np.ones(3, bool)
    slow = beyond_at_clock(t_y, t_y * 3, (eff_y * 2, eff_y), bound, 1.4)
    fast = beyond_at_clock(t_y, t_y * 3, (eff_y * 1.5, eff_y), bound, 1.4)
    assert (fast <= slow).all() and (fast >= eff_y * 1.5).all()
    np.testing.assert_array_equal(beyond_at_clock(t_y, t_y * 3, (eff_y, eff_y), ~bound, 1.4), t_y * 3)
    np.testing.assert_array_equal(beyond_at_clock(t_y, t_y * 3, (eff_y, eff_y), bound, None), t_y * 3)


def test_the_carry_is_chosen_on_training_gpus_and_carries_a100_from_h100(catalog, tmp_path) -> None:
    from components.opmodel.measured import MeasuredTier
    from components.opmodel.transfer import TransferModel, TransferSettings, TransferTier
    from components.opmodel.transfer_fit import fit_transfer
    from components.physics import roofline as physics

    specs = {d: catalog.get(d) for d in GPUS}
    floors = {"attention": FLOOR_US}
    # times that follow the roofline ratio: the ratio stays
    ratio = {"attention": decode_rows(catalog, "ratio")}
    plain = fit_transfer(MeasuredTier(ratio, specs), ratio, list(GPUS), 60, floors)
    assert plain.beyond == []
    scores = plain.meta["beyond_scores"]["attention"]
    assert scores["ratio"] < scores["cycles"]
    # times whose fixed cost is a count of cycles: the cycles carry is chosen
    cycles = {"attention": decode_rows(catalog, "cycles")}
    model = fit_transfer(MeasuredTier(cycles, specs), cycles, list(GPUS), 60, floors)
    assert model.beyond == ["attention"]
    scores = model.meta["beyond_scores"]["attention"]
    assert scores["cycles"] < 0.5 * scores["ratio"]  # (the L2 share chosen first reads both carries)
    model.save(tmp_path)
    assert TransferModel.load(tmp_path).beyond == ["attention"]
    # A100 from H100 alone: exact with the cycles carry, off by the ratio without it
    shape = decode_shape()
    a100 = specs["a100-sxm4-80gb"]
    roof = physics.roofline("attention", "bf16", shape, a100, "bf16")
    h100 = {"attention": cycles["attention"][cycles["attention"]["device_id"] == "h100-sxm"]}
    answers = {}
    for beyond in (["attention"], []):
        carry = TransferModel(settings={"attention": TransferSettings()}, floors=floors, beyond=beyond)
        tier = TransferTier(MeasuredTier(h100, {"h100-sxm": specs["h100-sxm"]}), {}, carry)
        answers[bool(beyond)], _ = tier.resolve("attention", "bf16", shape, a100, roof, "bf16")
    truth = decode_rows(catalog, "cycles", ("a100-sxm4-80gb",))["latency_us"].to_numpy()
    np.testing.assert_allclose(answers[True], truth, rtol=1e-6)
    assert np.abs(answers[False] / truth - 1).max() > 0.05
