"""How far a relative carries: a GPU with a relative of its generation is answered by the transfer tier; one
without is answered as the inner leave-one-GPU-out over the training GPUs without such a relative chose
(transfer, blend or spec), with real spec models fitted on synthetic rows following known physics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

GPUS = ("a100-sxm4-80gb", "h100-sxm", "h200", "l40s")


@pytest.fixture(scope="module")
def catalog():
    from components.devices.catalog import load_catalog

    return load_catalog()


def _store(catalog) -> dict[str, pd.DataFrame]:
    from components.physics import roofline as physics

    sizes = 2.0 ** np.arange(0, 12)
    frames = []
    for i, device in enumerate(GPUS):
        m, n = np.meshgrid(sizes, (1024.0, 2048.0, 4096.0, 8192.0), indexing="ij")
        shape = {"M": m.ravel(), "N": n.ravel(), "K": np.full(m.size, 4096.0)}
        t = (physics.roofline("gemm", "bf16", shape, catalog.get(device)).time_us + 4.0) * (1.2 + 0.3 * i)
        frames.append(pd.DataFrame({"device_id": device, "dtype": "bf16", **shape, "latency_us": t}))
    frame = pd.concat(frames, ignore_index=True).assign(n_repeats=1)
    frame["latency_min_us"] = frame["latency_max_us"] = frame["latency_us"]
    return {"gemm": frame}


def test_near_is_one_vendor_and_architecture_and_combine_blends_geometrically(catalog) -> None:
    from components.opmodel.tier_choice import combine, near

    assert near(catalog.get("h100-sxm"), catalog.get("h200"))
    assert not near(catalog.get("l40s"), catalog.get("h100-sxm"))
    transfer, spec = np.array([4.0, np.nan]), np.array([1.0, 2.0])
    assert combine("blend", transfer, spec)[0] == pytest.approx(2.0)
    assert combine("spec", transfer, spec)[0] == 1.0 and np.isnan(combine("spec", transfer, spec)[1])
    assert combine("transfer", transfer, spec) is transfer


def test_the_far_choice_is_made_on_far_training_gpus_and_used_only_without_a_near_relative(catalog) -> None:
    from components.opmodel import spec as spec_tier
    from components.opmodel.measured import MeasuredTier
    from components.opmodel.tier_choice import FAR_CHOICES
    from components.opmodel.transfer import TransferTier
    from components.opmodel.transfer_fit import fit_transfer

    store = _store(catalog)
    specs = {d: catalog.get(d) for d in GPUS}
    fitted: list[tuple[str, ...]] = []

    def spec_without(*held: str):
        fitted.append(held)
        rows = spec_tier.training_rows(
            {"gemm": store["gemm"][~store["gemm"]["device_id"].isin(held)]}, None, 500
        )
        return spec_tier.fit(rows, {d: s for d, s in specs.items() if d not in held}, rounds=5)

    measured = MeasuredTier(store, specs)
    model = fit_transfer(measured, store, list(GPUS), 40, spec_without=spec_without)
    # H100 and H200 have each other: only A100 and L40S are far, and only they got an inner spec fit (the kin
    # choice is measured on request only)
    assert sorted(fitted) == [("a100-sxm4-80gb",), ("l40s",)] and model.kin == {}
    assert model.far["gemm"]["gpus"] == ["a100-sxm4-80gb", "l40s"]
    assert model.far["gemm"]["tier"] in FAR_CHOICES
    assert set(FAR_CHOICES) <= set(model.far["gemm"])
    tier = TransferTier(measured.without("h200"), None, model)
    assert tier.far_choice("gemm", "bf16", None, catalog.get("h200")) == "transfer"  # H100 is near
    tier = TransferTier(measured.without("l40s"), None, model)
    assert tier.far_choice("gemm", "bf16", None, catalog.get("l40s")) == model.far["gemm"]["tier"]


def test_the_engine_answers_a_far_gpu_as_chosen(catalog) -> None:
    from components.opmodel import spec as spec_tier
    from components.opmodel.engine import OpEngine
    from components.opmodel.measured import MeasuredTier
    from components.opmodel.transfer import TransferModel, TransferTier

    store = _store(catalog)
    specs = {d: catalog.get(d) for d in GPUS}
    others = {"gemm": store["gemm"][store["gemm"]["device_id"] != "l40s"]}
    spec_model = spec_tier.fit(spec_tier.training_rows(others, None, 500), specs, rounds=5)
    measured = MeasuredTier(store, specs).without("l40s")
    shape = {"M": np.array([64.0, 512.0]), "N": np.array([4096.0, 4096.0]), "K": np.array([4096.0, 4096.0])}
    asked = catalog.get("l40s")

    def raw(choice: str):
        model = TransferModel(
            far={"gemm": {"tier": choice}} if choice else {}, intervals={"gemm": [-0.2, 0.1]}
        )
        engine = OpEngine(measured, spec_model, transfer=TransferTier(measured, None, model))
        return engine.raw_predict("gemm", "bf16", shape, asked)

    transfer, spec, blend = raw(""), raw("spec"), raw("blend")
    assert (transfer.tier == "transfer").all() and (spec.tier == "spec").all()
    assert (blend.tier == "transfer").all() and all("blended with the spec tier" in s for s in blend.support)
    np.testing.assert_allclose(blend.duration_us, np.sqrt(transfer.duration_us * spec.duration_us))
    # the transfer tier's interval is the learned one (inner residual quantiles), not the default +-0.3
    np.testing.assert_allclose(transfer.hi, transfer.duration_us * np.exp(0.1))
    assert (transfer.lo <= transfer.duration_us * np.exp(-0.2) + 1e-9).all()


def test_transfer_intervals_are_the_inner_residual_quantiles(catalog) -> None:
    from components.opmodel.measured import MeasuredTier
    from components.opmodel.transfer_fit import fit_transfer, inner_predictor, pair_groups

    store = _store(catalog)
    specs = {d: catalog.get(d) for d in GPUS}
    model = fit_transfer(MeasuredTier(store, specs), store, list(GPUS), 40)
    low, high = model.intervals["gemm"]
    # the GPUs differ by constant factors 1.2 .. 2.1: answers from slower and from faster relatives
    assert low < 0.0 < high
    from components.opmodel.transfer import TransferTier

    tier = TransferTier(MeasuredTier(store, specs), None, model)
    groups = pair_groups(tier, store, list(GPUS), 40, relatives=set(GPUS))
    predict = inner_predictor(groups, list(GPUS), model)
    logs = np.concatenate([np.log(g.actual / predict(g, g.target)) for g in groups])
    inside = np.mean((logs >= low - 1e-9) & (logs <= high + 1e-9))
    assert 0.8 <= inside <= 1.0  # a 5-95% interval of the inner residuals (per GPU weighed alike)


def test_a_regime_without_a_near_relative_is_far_though_its_gpu_has_one_in_another(catalog) -> None:
    """H200's int8 GEMMs with A100 and L40S as relatives (no H100 int8 table) are far, its bf16 GEMMs with
    H100 are not: the inner far choice is scored on the regimes the engine answers by it."""
    from components.opmodel.tier_choice import far_group, far_targets
    from components.opmodel.transfer import Carried
    from components.opmodel.transfer_fit import PairGroup

    specs = {d: catalog.get(d) for d in GPUS}
    one = np.ones(1)

    def group(regime: str, relatives: tuple[str, ...]) -> PairGroup:
        carried = [Carried(d, 1.0, one, np.zeros(1, bool), np.zeros((1, 5))) for d in relatives]
        return PairGroup("h200", "gemm", one, carried, regime)

    bf16, int8 = group("bf16", ("h100-sxm", "a100-sxm4-80gb")), group("int8", ("a100-sxm4-80gb", "l40s"))
    assert not far_group(bf16, list(GPUS), specs) and far_group(int8, list(GPUS), specs)
    assert far_targets([bf16, int8], list(GPUS), specs) == {"h200"}
    assert far_targets([bf16], list(GPUS), specs) == set()
    # a relative outside the training GPUs does not count: without H100, the bf16 GEMMs are far too
    assert far_group(bf16, [d for d in GPUS if d != "h100-sxm"], specs)


def test_a_generation_jump_within_one_line_is_kin_and_another_class_is_far(catalog) -> None:
    """Blackwell from Hopper and MI355X from MI300X are kin (one vendor, HBM both, another architecture);
    L40S (GDDR6) from the HBM GPUs and the Intel B60 from anything are far; H200 from H100 near."""
    from components.opmodel.tier_choice import kin, memory_class, standing

    get = catalog.get
    assert memory_class(get("b200")) == "hbm" and memory_class(get("l40s")) == "gddr"
    assert kin(get("b200"), get("h200")) and kin(get("mi355x"), get("mi300x"))
    assert not kin(get("h200"), get("h100-sxm")) and not kin(get("l40s"), get("h100-sxm"))
    assert not kin(get("mi300x"), get("h100-sxm"))
    assert standing(get("h200"), [get("h100-sxm"), get("l40s")]) == "near"
    assert standing(get("b200"), [get("h200"), get("l40s")]) == "kin"
    assert standing(get("l40s"), [get("a100-sxm4-80gb"), get("h100-sxm")]) == "far"
    assert standing(get("arc-pro-b60"), [get("l40s"), get("mi300x")]) == "far"


def test_the_kin_choice_is_measured_on_generation_jumps(catalog) -> None:
    """The kin cases: A100 (relatives Hopper), H100 with H200 left out and H200 with H100 left out (relative
    A100), each with a spec model fitted without the GPUs left out; L40S is no kin case. The choice is
    recorded with its nested test; the engine answers B200 (kin) by the far choice, as measured best."""
    from components.opmodel import spec as spec_tier
    from components.opmodel.measured import MeasuredTier
    from components.opmodel.tier_choice import KIN_CHOICES
    from components.opmodel.transfer import TransferTier
    from components.opmodel.transfer_fit import fit_transfer

    store = _store(catalog)
    specs = {d: catalog.get(d) for d in GPUS}
    fitted: list[frozenset[str]] = []

    def spec_without(*held: str):
        fitted.append(frozenset(held))
        rows = spec_tier.training_rows(
            {"gemm": store["gemm"][~store["gemm"]["device_id"].isin(held)]}, None, 500
        )
        return spec_tier.fit(rows, {d: s for d, s in specs.items() if d not in held}, rounds=5)

    measured = MeasuredTier(store, specs)
    model = fit_transfer(measured, store, list(GPUS), 40, spec_without=spec_without, kin=True)
    assert model.kin["gemm"]["gpus"] == ["a100-sxm4-80gb", "h100-sxm without h200", "h200 without h100-sxm"]
    kin_gemm = model.kin["gemm"]
    assert frozenset({"h100-sxm", "h200"}) in fitted and kin_gemm["own_choice"] in KIN_CHOICES
    assert set(kin_gemm["per_gpu"]) == set(kin_gemm["gpus"]) and set(KIN_CHOICES) <= set(kin_gemm)
    # kept apart only where the nested leave-one-case-out says it beats the far choice
    assert kin_gemm["separate"] == (kin_gemm["nested"]["kin"] < kin_gemm["nested"]["far"])
    assert kin_gemm["tier"] == (kin_gemm["own_choice"] if kin_gemm["separate"] else model.far["gemm"]["tier"])
    assert model.far["gemm"]["gpus"] == ["a100-sxm4-80gb", "l40s"]  # the far choice as before
    from components.opmodel.transfer import TransferModel

    # recorded, not applied: a kin GPU (B200) is answered by the far choice, as L40S
    loaded = TransferModel(far={"gemm": {"tier": "spec"}}, kin={"gemm": {"tier": "blend", "separate": True}})
    tier = TransferTier(measured.without("l40s"), None, loaded)
    assert tier.far_choice("gemm", "bf16", None, catalog.get("b200")) == "spec"
    assert tier.far_choice("gemm", "bf16", None, catalog.get("l40s")) == "spec"
    assert tier.far_choice("gemm", "bf16", None, catalog.get("h100-pcie")) == "transfer"


def test_the_kin_choice_survives_save_and_load(tmp_path) -> None:
    from components.opmodel.transfer import TransferModel

    TransferModel(kin={"attention": {"tier": "transfer", "blend": 0.2}}).save(tmp_path)
    assert TransferModel.load(tmp_path).kin == {"attention": {"tier": "transfer", "blend": 0.2}}


def test_a_kin_choice_is_kept_apart_only_where_it_wins_on_kin_cases_it_was_not_made_on() -> None:
    """Three kin cases that all prefer transfer over the far cases' spec: kept apart; the same kin cases
    with one that alone prefers transfer: the nested choice made without it picks spec, and loses."""
    from components.opmodel.tier_choice import KIN_CHOICES, nested

    def case(transfer: float, spec: float) -> dict[str, float]:
        return {
            o: (transfer if o.startswith("transfer") else spec if o == "spec" else 1.0) for o in KIN_CHOICES
        }

    far = {"tier": "spec", "per_gpu": {"l40s": {"transfer": 0.9, "blend": 0.6, "spec": 0.4}}}
    agree = {"per_gpu": {"a": case(0.2, 0.3), "b": case(0.25, 0.3), "c": case(0.2, 0.35)}}
    kin_score, far_score = nested(agree, far)
    assert kin_score == pytest.approx((0.2 + 0.25 + 0.2) / 3) and far_score == pytest.approx(0.95 / 3)
    lone = {"per_gpu": {"a": case(0.2, 0.5), "b": case(0.6, 0.3), "c": case(0.7, 0.3)}}
    kin_score, far_score = nested(lone, far)
    assert kin_score > far_score  # the kin choice made on b, c (spec) for a, on a+c / a+b for b, c
    assert nested({"per_gpu": {"a": case(0.2, 0.5)}}, far) is None  # one kin case: nothing to judge on


def test_an_inner_answer_from_some_relatives_only_blends_only_them(catalog) -> None:
    """``predict_without(..., only=...)``: the kin cases' answer from the line's relatives alone (``|kin``):
    H200 from A100 alone differs from H200 from A100 and L40S blended (k = 2), and equals A100's carry."""
    from components.opmodel.measured import MeasuredTier
    from components.opmodel.transfer import TransferModel, TransferSettings, TransferTier
    from components.opmodel.transfer_fit import inner_predictor, pair_groups

    store = _store(catalog)
    measured = MeasuredTier(store, {d: catalog.get(d) for d in GPUS})
    model = TransferModel(settings={"gemm": TransferSettings(k=2)})
    groups = pair_groups(TransferTier(measured, None, model), store, ["h200"], 40, relatives=set(GPUS))
    predict = inner_predictor(groups, list(GPUS), model)
    both = predict(groups[0], "h200", "h100-sxm")
    alone = predict(groups[0], "h200", "h100-sxm", only={"a100-sxm4-80gb"})
    carried = next(c.duration_us for c in groups[0].carried if c.device == "a100-sxm4-80gb")
    np.testing.assert_allclose(alone, carried)
    assert not np.allclose(both, alone)
