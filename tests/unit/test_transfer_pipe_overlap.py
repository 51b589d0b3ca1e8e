"""How far a kernel overlaps its pipes, in the transfer tier's carried ratio (``components/opmodel/
pipe_overlap.py``), on synthetic MoE stores whose times follow known physics (catalog specs, synthetic
latencies): the p-norm lies between the roofline's maximum and the sum of its sides; p is chosen on the
training GPUs (the maximum where the times follow the roofline); carried with it, A100's answer from H100 is
exact where the roofline's ratio errs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

GPUS = ("a100-sxm4-80gb", "h100-sxm", "h200", "l40s")
FLOOR_US = 5.0
TOKENS = 2.0 ** np.arange(0, 15)
SITES = ((8.0, 2.0, 4096.0, 14336.0), (64.0, 6.0, 2048.0, 1408.0), (128.0, 8.0, 4096.0, 1536.0))


@pytest.fixture(scope="module")
def catalog():
    from components.devices.catalog import load_catalog

    return load_catalog()


def moe_rows(catalog, overlap: float | None, gpus: tuple[str, ...] = GPUS) -> pd.DataFrame:
    """bf16 MoE rows per GPU (three sites, T = 1 .. 16384): ``(joined(compute, memory) + FLOOR_US) / 0.8``,
    DRAM only."""
    from components.opmodel.pipe_overlap import joined
    from components.physics import roofline as physics

    t, site = np.meshgrid(TOKENS, np.arange(len(SITES)), indexing="ij")
    e, k, h, i = (np.array([s[j] for s in SITES])[site.ravel()] for j in range(4))
    shape = {"T": t.ravel(), "E": e, "topk": k, "H": h, "I": i, "tp": np.ones(t.size), "ep": np.ones(t.size)}
    frames = []
    for device in gpus:
        roof = physics.roofline("moe", "bf16", shape, catalog.get(device))
        latency = (joined(roof.compute_us, roof.memory_us, overlap) + FLOOR_US) / 0.8
        extra = {"n_repeats": 1, "latency_min_us": latency, "latency_max_us": latency, "dtype": "bf16"}
        frames.append(
            pd.DataFrame(shape).assign(device_id=device, distribution="balanced", latency_us=latency, **extra)
        )
    return pd.concat(frames, ignore_index=True)


def test_the_joined_time_lies_between_the_maximum_and_the_sum() -> None:
    from components.opmodel.pipe_overlap import joined

    c, m = np.array([1.0, 3.0, 0.0, 5.0]), np.array([3.0, 1.0, 2.0, 5.0])
    np.testing.assert_array_equal(joined(c, m, None), np.maximum(c, m))
    np.testing.assert_allclose(joined(c, m, 1.0), c + m)
    two = joined(c, m, 2.0)
    assert (two >= np.maximum(c, m)).all() and (two <= c + m).all()
    np.testing.assert_allclose(two, np.hypot(c, m))
    bigger = joined(c + 1.0, m, 2.0)
    assert (bigger > two).all()  # more work on one pipe is never faster
    with pytest.raises(ValueError, match=r"overlap 0\.5"):
        joined(c, m, 0.5)


def test_the_overlap_is_chosen_on_training_gpus_and_carries_a100_from_h100(catalog, tmp_path) -> None:
    from components.opmodel.transfer import TransferModel, TransferSettings, TransferTier
    from components.opmodel.transfer_fit import fit_transfer
    from components.physics import roofline as physics

    specs = {d: catalog.get(d) for d in GPUS}
    floors = {"moe": FLOOR_US}
    train = [d for d in GPUS if d != "a100-sxm4-80gb"]
    # times that follow the roofline's maximum: no overlap is chosen
    plain = {"moe": moe_rows(catalog, None, tuple(train))}
    fitted = fit_transfer(_measured(specs, train), plain, train, 120, floors)
    assert fitted.overlap == {} and fitted.meta["overlap_scores"]["moe"]["max"] < 1e-9
    # times that add the two sides (no overlap at all); A100 is never read
    added = {"moe": moe_rows(catalog, 1.0, tuple(train))}
    model = fit_transfer(_measured(specs, train), added, train, 120, floors)
    assert model.overlap == {"moe": 1.0}
    scores = model.meta["overlap_scores"]["moe"]
    assert scores["1"] < 1e-9 < scores["max"]
    model.save(tmp_path)
    assert TransferModel.load(tmp_path).overlap == {"moe": 1.0}
    # A100 from H100 alone: exact with the overlap, off by the roofline's ratio without it
    truth_rows = moe_rows(catalog, 1.0, ("a100-sxm4-80gb",))
    shape = {k: truth_rows[k].to_numpy() for k in ("T", "E", "topk", "H", "I", "tp", "ep")}
    roof = physics.roofline("moe", "bf16", shape, specs["a100-sxm4-80gb"])
    h100 = {"moe": added["moe"][added["moe"]["device_id"] == "h100-sxm"]}
    answers = {}
    for overlap in ({"moe": 1.0}, {}):
        carry = TransferModel(settings={"moe": TransferSettings()}, floors=floors, overlap=overlap)
        tier = TransferTier(_measured(specs, ["h100-sxm"]), h100, carry)
        answers[bool(overlap)], _ = tier.resolve("moe", "bf16", shape, specs["a100-sxm4-80gb"], roof)
    truth = truth_rows["latency_us"].to_numpy()
    np.testing.assert_allclose(answers[True], truth, rtol=1e-9)
    assert np.abs(answers[False] / truth - 1).max() > 0.1


def _measured(specs: dict, devices: list[str]):
    from components.opmodel.measured import MeasuredTier

    return MeasuredTier({}, {d: specs[d] for d in devices})


def test_a_serving_frameworks_tier_reads_no_nearest_site_where_the_pooled_tier_does(catalog) -> None:
    """The nearest-site hold (chosen on the pooled tables) answers the pooled tier's unmeasured sites; a
    serving framework's tier (``framework_tables._with_tiers``) answers the sites its relatives measured
    only, so an unmeasured model falls through to the next tier, as before the hold."""
    from components.opmodel.engine import OpEngine
    from components.opmodel.framework_tables import _with_tiers
    from components.opmodel.transfer import TransferModel, TransferSettings, TransferTier
    from components.physics import roofline as physics

    specs = {d: catalog.get(d) for d in GPUS}
    h100 = {"moe": moe_rows(catalog, None, ("h100-sxm",))}
    carry = TransferModel(settings={"moe": TransferSettings()}, floors={"moe": FLOOR_US})
    pooled = TransferTier(_measured(specs, ["h100-sxm"]), h100, carry)
    engine = OpEngine(_measured(specs, ["h100-sxm"]), None, transfer=pooled)
    served = _with_tiers(engine, "vllm", engine.measured, pooled.curve_groups).transfer
    assert pooled.nearest and not served.nearest
    h200 = specs["h200"]
    measured_site = {"T": TOKENS[:4], "E": 64.0, "topk": 6.0, "H": 2048.0, "I": 1408.0}
    other_model = {"T": TOKENS[:4], "E": 128.0, "topk": 4.0, "H": 2880.0, "I": 2880.0}
    for shape in (measured_site, other_model):
        roof = physics.roofline("moe", "bf16", shape, h200)
        from_pooled, _ = pooled.resolve("moe", "bf16", shape, h200, roof)
        from_served, _ = served.resolve("moe", "bf16", shape, h200, roof)
        assert np.isfinite(from_pooled).all()
        if shape is measured_site:  # a site the relative measured: both tiers carry the same answer
            np.testing.assert_allclose(from_served, from_pooled)
        else:  # another model's site: the pooled tier holds the nearest one, the framework's answers none
            assert np.isnan(from_served).all()
