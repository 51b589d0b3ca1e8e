"""How much of a pipe's peak difference a regime's kernels realise, in the transfer tier's carried ratio
(``components/opmodel/pipe_elasticity.py``), on synthetic MoE stores whose times follow known physics
(catalog specs, synthetic latencies): the restated compute side lies between the relative's and the
roofline's; the elasticity is chosen per regime on the training GPUs (none where the times follow the
roofline's ratio); carried with it, A100's weight-only answers from H100 err far less than by the roofline's
ratio."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

GPUS = ("a100-sxm4-80gb", "h100-sxm", "h200", "l40s")
FLOOR_US = 5.0
TOKENS = 2.0 ** np.arange(0, 15)
SITES = ((8.0, 2.0, 4096.0, 14336.0), (64.0, 6.0, 2048.0, 1408.0), (128.0, 8.0, 4096.0, 1536.0))
REFERENCE_PEAK = 5e14  # FLOP/s: the synthetic kernel's math rate is REFERENCE ** (1 - a) * peak ** a
SIZES = ("T", "E", "topk", "H", "I", "tp", "ep")


@pytest.fixture(scope="module")
def catalog():
    from components.devices.catalog import load_catalog

    return load_catalog()


def moe_rows(catalog, dtype: str, power: float, gpus: tuple[str, ...] = GPUS) -> pd.DataFrame:
    """``dtype`` MoE rows per GPU (three sites, T = 1 .. 16384): ``(max(compute, memory) + FLOOR_US) / 0.8``
    with the compute side at a rate that follows the GPU's pipe peak to the power ``power`` (DRAM only)."""
    from components.physics import roofline as physics

    t, site = np.meshgrid(TOKENS, np.arange(len(SITES)), indexing="ij")
    e, k, h, i = (np.array([s[j] for s in SITES])[site.ravel()] for j in range(4))
    shape = {"T": t.ravel(), "E": e, "topk": k, "H": h, "I": i, "tp": np.ones(t.size), "ep": np.ones(t.size)}
    frames = []
    for device in gpus:
        roof = physics.roofline("moe", dtype, shape, catalog.get(device))
        rate = REFERENCE_PEAK ** (1.0 - power) * roof.peak_flops**power
        compute = roof.flops / rate * 1e6
        latency = (np.maximum(compute, roof.memory_us) + FLOOR_US) / 0.8
        extra = {"n_repeats": 1, "latency_min_us": latency, "latency_max_us": latency, "dtype": dtype}
        frames.append(
            pd.DataFrame(shape).assign(device_id=device, distribution="balanced", latency_us=latency, **extra)
        )
    return pd.concat(frames, ignore_index=True)


def test_the_restated_compute_side_lies_between_the_relatives_and_the_rooflines(catalog) -> None:
    from components.opmodel.pipe_elasticity import restated
    from components.physics import roofline as physics

    shape = {"T": TOKENS, "E": 64.0, "topk": 6.0, "H": 2048.0, "I": 1408.0}
    a100, h100, h200 = (
        physics.roofline("moe", "int4_wo", shape, catalog.get(d))
        for d in ("a100-sxm4-80gb", "h100-sxm", "h200")
    )
    assert restated(a100, h100, None) is a100 and restated(a100, h100, 1.0) is a100
    np.testing.assert_allclose(restated(a100, h100, 0.0).compute_us, h100.compute_us)  # the relative's rate
    half = restated(a100, h100, 0.5)
    assert (half.compute_us > h100.compute_us).all() and (half.compute_us < a100.compute_us).all()
    np.testing.assert_allclose(half.time_us, np.maximum(half.compute_us, a100.memory_us))
    # one peak on both sides (H200 from H100): nothing to restate
    np.testing.assert_allclose(restated(h200, h100, 0.25).compute_us, h200.compute_us)
    # more peak on the asked GPU is never slower
    assert (restated(h100, a100, 0.5).compute_us <= a100.compute_us).all()
    with pytest.raises(ValueError, match=r"elasticity -0\.5"):
        restated(a100, h100, -0.5)


def test_the_elasticity_is_chosen_per_regime_on_training_gpus_and_carries_a100(catalog, tmp_path) -> None:
    from components.opmodel.transfer import TransferModel, TransferSettings, TransferTier
    from components.opmodel.transfer_fit import fit_transfer
    from components.physics import roofline as physics

    specs = {d: catalog.get(d) for d in GPUS}
    floors = {"moe": FLOOR_US}
    train = [d for d in GPUS if d != "a100-sxm4-80gb"]
    # bf16 follows the roofline's ratio, int4_wo half of it (in log); A100 is never read
    rows = pd.concat(
        [moe_rows(catalog, "bf16", 1.0, tuple(train)), moe_rows(catalog, "int4_wo", 0.5, tuple(train))]
    )
    model = fit_transfer(_measured(specs, train), {"moe": rows}, train, 120, floors)
    assert model.elasticity == {"moe|int4_wo": 0.5}
    scores = model.meta["elasticity_scores"]
    assert scores["moe|int4_wo"]["0.5"] < scores["moe|int4_wo"]["1"]
    assert min(scores["moe|bf16"], key=scores["moe|bf16"].get) == "1"
    model.save(tmp_path)
    assert TransferModel.load(tmp_path).elasticity == {"moe|int4_wo": 0.5}
    # A100's int4_wo from H100 alone: close with the elasticity, off by the roofline's ratio without it
    truth_rows = moe_rows(catalog, "int4_wo", 0.5, ("a100-sxm4-80gb",))
    shape = {k: truth_rows[k].to_numpy() for k in SIZES}
    roof = physics.roofline("moe", "int4_wo", shape, specs["a100-sxm4-80gb"])
    h100 = rows[(rows["device_id"] == "h100-sxm") & (rows["dtype"] == "int4_wo")]
    errors = {}
    for elasticity in ({"moe|int4_wo": 0.5}, {}):
        carry = TransferModel(settings={"moe": TransferSettings()}, floors=floors, elasticity=elasticity)
        tier = TransferTier(_measured(specs, ["h100-sxm"]), {"moe": h100}, carry)
        answer, _ = tier.resolve("moe", "int4_wo", shape, specs["a100-sxm4-80gb"], roof)
        errors[bool(elasticity)] = np.abs(answer / truth_rows["latency_us"].to_numpy() - 1.0)
    assert errors[True].mean() < 0.5 * errors[False].mean()
    assert errors[False].max() > 0.3 > errors[True].max()


def _measured(specs: dict, devices: list[str]):
    from components.opmodel.measured import MeasuredTier

    return MeasuredTier({}, {d: specs[d] for d in devices})
