"""The transfer tier on small synthetic stores whose times follow known physics (catalog specs, synthetic
latencies): a relative's measured time carried over by the roofline ratio reproduces the asked GPU exactly
when the physics holds; the learned correction is fitted leave-one-GPU-out and kept only when it beats plain
physics; the tier names its relatives; identical specs answer alike; the achievable peak caps the rates;
``unseen`` says what was not measured; the monotone envelope; the MoE curve table; the transfer model
round-trips as JSON."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

GPUS = ("a100-sxm4-80gb", "h100-sxm", "h200", "l40s")
FLOOR_US = 5.0
SIZES = 2.0 ** np.arange(0, 13)
SITES = (1024.0, 2048.0, 4096.0, 8192.0)
H100_CLOCK_MHZ = 1980.0


@pytest.fixture(scope="module")
def catalog():
    from components.devices.catalog import load_catalog

    return load_catalog()


def synthetic_gemm(catalog, gamma: float = 0.0, gpus=GPUS, cycles: bool = False) -> pd.DataFrame:
    """bf16 GEMM rows per GPU: ``(roofline + FLOOR_US) / 0.8``, times the bound pipe's peak (bf16 tensor or
    DRAM) over H100's to the power ``gamma`` (a spec-dependent efficiency shift the plain roofline ratio
    cannot carry); ``cycles``: the floor is FLOOR_US at H100's clock, a count of cycles on every GPU."""
    from components.physics import roofline as physics

    m, n, k = np.meshgrid(SIZES, SITES, SITES, indexing="ij")
    shape = {"M": m.ravel(), "N": n.ravel(), "K": k.ravel()}
    frames = []
    for device in gpus:
        spec = catalog.get(device)
        roof = physics.roofline("gemm", "bf16", shape, spec)
        compute = roof.compute_us >= roof.memory_us
        bound = np.where(compute, np.log(roof.peak_flops / 989e12), np.log(roof.peak_bps / 3.35e12))
        shift = np.exp(gamma * bound)
        floor = FLOOR_US * (H100_CLOCK_MHZ / spec.boost_clock_mhz if cycles else 1.0)
        latency = (roof.time_us + floor) / 0.8 * shift
        frames.append(
            pd.DataFrame(
                {
                    "device_id": device,
                    "dtype": "bf16",
                    **shape,
                    "latency_us": latency,
                    "n_repeats": 1,
                    "latency_min_us": latency,
                    "latency_max_us": latency,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def _model(**kwargs):
    from components.opmodel.transfer import TransferModel, TransferSettings

    return TransferModel(
        settings={"gemm": TransferSettings(1, 1.0, None)}, floors={"gemm": FLOOR_US}, **kwargs
    )


def test_a_relative_carried_over_by_the_roofline_ratio_reproduces_the_gpu(catalog) -> None:
    from components.opmodel.engine import OpEngine

    # A100 for H200: not its twin (H100 is, and carries its time beyond the roofline instead: the next tests)
    gemm = synthetic_gemm(catalog)
    engine = OpEngine.from_frames({"gemm": gemm[gemm["device_id"] == "a100-sxm4-80gb"]}, None, _model())
    h200 = gemm[gemm["device_id"] == "h200"]
    shape = {k: h200[k].to_numpy() for k in ("M", "N", "K")}
    times = engine.predict("gemm", "bf16", shape, catalog.get("h200"))
    assert (times.tier == "transfer").all()
    assert all(s == "carried over from a100-sxm4-80gb (measured) by roofline ratio" for s in times.support)
    np.testing.assert_allclose(times.duration_us, h200["latency_us"].to_numpy(), rtol=1e-9)
    assert all(u == "the GPU" for u in times.unseen)
    # the spec tier (here the bare fallback) would have answered otherwise
    bare = OpEngine().predict("gemm", "bf16", shape, catalog.get("h200"))
    assert (bare.tier == "spec").all()


def test_a_floor_of_cycles_carries_over_at_each_gpus_clock(catalog, tmp_path) -> None:
    """A kernel's fixed cost is cycles: stated at H100's clock, A100 (1410 MHz) pays it 1.4x longer and the
    carried answer is exact; a floor of one time in us on both GPUs (before) is not. Learned floors are
    stated at the training GPUs' median clock and round-trip with it."""
    from components.opmodel.engine import OpEngine
    from components.opmodel.measured import MeasuredTier
    from components.opmodel.transfer import TransferModel
    from components.opmodel.transfer_fit import fit_transfer

    gemm = synthetic_gemm(catalog, cycles=True)
    a100 = gemm[gemm["device_id"] == "a100-sxm4-80gb"]
    shape = {k: a100[k].to_numpy() for k in ("M", "N", "K")}
    relative = {"gemm": gemm[gemm["device_id"] == "h100-sxm"]}
    answers = {}
    for clock in (H100_CLOCK_MHZ, None):
        engine = OpEngine.from_frames(relative, None, _model(floor_clock_mhz=clock), monotone=False)
        answers[clock] = engine.predict("gemm", "bf16", shape, catalog.get("a100-sxm4-80gb")).duration_us
    truth = a100["latency_us"].to_numpy()
    np.testing.assert_allclose(answers[H100_CLOCK_MHZ], truth, rtol=1e-9)
    assert np.abs(answers[None] / truth - 1).max() > 0.1  # the tiny GEMMs: the floor is most of the time
    specs = {d: catalog.get(d) for d in GPUS}
    learned = fit_transfer(MeasuredTier({"gemm": gemm}, specs), {"gemm": gemm}, list(GPUS), per_group=120)
    assert learned.floor_clock_mhz == float(np.median([specs[d].boost_clock_mhz for d in GPUS]))
    learned.save(tmp_path)
    assert TransferModel.load(tmp_path).floor_clock_mhz == learned.floor_clock_mhz


def test_the_correction_is_kept_only_where_it_beats_plain_physics_leave_one_gpu_out(catalog) -> None:
    from components.opmodel.measured import MeasuredTier
    from components.opmodel.transfer_fit import fit_transfer

    specs = {d: catalog.get(d) for d in GPUS}
    plain_store = {"gemm": synthetic_gemm(catalog)}
    floors = {"gemm": FLOOR_US}  # the synthetic physics' own floor: plain carry-over is then exact
    plain = fit_transfer(MeasuredTier(plain_store, specs), plain_store, list(GPUS), 120, floors)
    assert plain.settings["gemm"].ridge is None and "gemm" not in plain.corrections
    assert plain.meta["devices"] == sorted(GPUS)
    assert max(plain.meta["inner_scores"]["gemm"]["far"].values()) < 1e-9
    learned = fit_transfer(MeasuredTier(plain_store, specs), plain_store, list(GPUS), per_group=120)
    assert learned.floors["gemm|tensor|bf16"] > 0
    shifted_store = {"gemm": synthetic_gemm(catalog, gamma=0.5)}
    shifted = fit_transfer(MeasuredTier(shifted_store, specs), shifted_store, list(GPUS), 120, floors)
    assert shifted.settings["gemm"].ridge is not None and len(shifted.corrections["gemm"]) > 0
    scores = shifted.meta["inner_scores"]["gemm"]["far"]
    best_plain = min(v for k, v in scores.items() if k.endswith("ridge=None"))
    assert min(scores.values()) < best_plain
    # leave one GPU out: the model of three GPUs names only them, and answers the fourth from them
    three = [d for d in GPUS if d != "h200"]
    store3 = {"gemm": shifted_store["gemm"][shifted_store["gemm"]["device_id"] != "h200"]}
    model3 = fit_transfer(MeasuredTier(store3, {d: specs[d] for d in three}), store3, three, per_group=120)
    assert model3.meta["devices"] == sorted(three) and "h200" not in model3.relative_error


def test_identical_specs_answer_alike_and_the_model_round_trips(catalog, tmp_path) -> None:
    from components.opmodel.engine import OpEngine
    from components.opmodel.store import save_store

    gemm = synthetic_gemm(catalog, gpus=("h100-sxm", "a100-sxm4-80gb"))
    save_store({"gemm": gemm}, tmp_path / "store")
    engine = OpEngine.from_store(tmp_path / "store", None, _model(achievable={"tensor|bf16": 0.7}))
    engine.save(tmp_path / "engine")
    loaded = OpEngine.load(tmp_path / "engine")
    l40 = catalog.get("l40")
    twin = l40.model_copy(update={"id": "l40-twin", "name": "L40 twin", "aliases": ()})
    shape = {"M": SIZES, "N": 4096.0, "K": 4096.0}
    first = engine.predict("gemm", "bf16", shape, l40).duration_us
    np.testing.assert_allclose(loaded.predict("gemm", "bf16", shape, l40).duration_us, first, rtol=1e-12)
    np.testing.assert_allclose(engine.predict("gemm", "bf16", shape, twin).duration_us, first, rtol=1e-12)
    assert loaded.transfer.model.achievable == {"tensor|bf16": 0.7}


def test_no_answer_above_the_achievable_share_of_a_peak(catalog) -> None:
    from components.opmodel.engine import OpEngine
    from components.physics import roofline as physics

    gemm = synthetic_gemm(catalog, gpus=("h100-sxm",))
    fast = gemm.assign(latency_us=gemm["latency_us"] * 0.2)  # faster than any datasheet allows
    engine = OpEngine.from_frames({"gemm": fast}, None, _model(achievable={"tensor|bf16": 0.7, "dram": 0.8}))
    shape = {"M": SIZES, "N": 8192.0, "K": 8192.0}
    times = engine.predict("gemm", "bf16", shape, catalog.get("h200"))
    rates = physics.derive(times.duration_us, times.roof)
    assert np.all(rates["gflops"] * 1e9 <= 0.7 * times.roof.peak_flops * (1 + 1e-9))
    assert np.all(rates["achieved_gbps"] * 1e9 <= 0.8 * times.roof.peak_bps * (1 + 1e-9))


def test_unseen_names_the_shape_the_gpu_or_the_dtype(catalog) -> None:
    from components.opmodel.engine import OpEngine

    engine = OpEngine.from_frames({"gemm": synthetic_gemm(catalog, gpus=("h100-sxm",))}, None, _model())
    h100, h200 = catalog.get("h100-sxm"), catalog.get("h200")
    near = engine.predict("gemm", "bf16", {"M": 64.0, "N": 4096.0, "K": 4096.0}, h100)
    far = engine.predict("gemm", "bf16", {"M": 64.0, "N": 3.0, "K": 3.0}, h100)
    other = engine.predict("gemm", "bf16", {"M": 64.0, "N": 4096.0, "K": 4096.0}, h200)
    new_dtype = engine.predict("gemm", "fp8", {"M": 64.0, "N": 4096.0, "K": 4096.0}, h200)
    assert near.tier[0] == "measured" and near.unseen[0] is None
    assert far.unseen[0] == "the shape"
    assert other.unseen[0] == "the GPU"
    assert new_dtype.tier[0] == "spec" and new_dtype.unseen[0] == "the GPU and the dtype"


def test_the_envelope_is_monotone_on_the_lattice_and_leaves_a_monotone_answer_as_it_is() -> None:
    from components.opmodel.envelope import Envelope

    def wiggly(shape):  # faster at some larger sizes: what measured kernels do
        m, n, k = (np.asarray(shape[a], dtype="float64") for a in ("M", "N", "K"))
        return m * n * k * 1e-6 * (1.0 + 0.6 * np.sin(np.log2(m) * 2.1)) + 3.0

    def smooth(shape):
        return np.asarray(shape["M"]) * np.asarray(shape["N"]) * np.asarray(shape["K"]) * 1e-6 + 3.0

    sizes = 2.0 ** np.arange(0, 12)
    for axis in ("M", "N", "K"):
        shape = {"M": 512.0, "N": 64.0, "K": 256.0, axis: sizes}
        full = {k: np.broadcast_to(np.asarray(v), sizes.shape) for k, v in shape.items()}
        raw = wiggly(full)
        got = Envelope().apply("gemm", full, raw, ("key",), wiggly)
        assert np.all(np.diff(got) >= 0), axis
        assert np.all(got <= np.maximum.accumulate(raw) * (1 + 1e-12)), axis  # never above the dominated max
        np.testing.assert_allclose(Envelope().apply("gemm", full, smooth(full), ("s",), smooth), smooth(full))
    assert np.any(np.diff(wiggly({"M": sizes, "N": 64.0, "K": 256.0})) < 0)  # the raw answer was not


def test_the_one_token_prefill_kernel_bounds_no_decode_in_the_envelope() -> None:
    """S = KV = 1 runs the context kernel (slow, launch-bound); a decode (S = 1, KV >= 2) that is faster is
    left as answered, and the one-token row itself sits on the prefill lattice."""
    from components.opmodel.envelope import Envelope

    def answer(shape):  # decodes at 8 us, the one-token prefill kernel at 16 us, prefills growing with KV
        s, kv = (np.asarray(shape[a], dtype="float64") for a in ("S", "KV"))
        return np.where((s == 1) & (kv > 1), 8.0, np.where(kv == 1, 16.0, 16.0 + kv * 1e-3))

    kv = np.array([1.0, 2.0, 4.0, 64.0, 1.0])
    s = np.array([1.0, 1.0, 1.0, 1.0, 1.0])
    shape = {"B": np.ones(5), "S": s, "KV": kv, "H": np.full(5, 8.0), "HKV": np.full(5, 8.0)}
    shape |= {"D": np.full(5, 128.0), "W": np.zeros(5)}
    got = Envelope().apply("attention", shape, answer(shape), ("key",), answer)
    np.testing.assert_allclose(got, answer(shape))


def test_the_envelope_answers_every_missing_lattice_of_a_question_in_one_call() -> None:
    """A question over several held groups (a model's TP sizes: heads per GPU; decode and prefill) asks the
    engine once for all their lattices, and each lattice is the one its group alone would have built."""
    from components.opmodel.envelope import Envelope

    calls: list[int] = []

    def answer(shape):  # row by row: heads, phase and context each change the answer
        calls.append(len(shape["KV"]))
        s, kv, h = (np.asarray(shape[a], dtype="float64") for a in ("S", "KV", "H"))
        return 3.0 + h * (0.5 + 0.1 * np.sin(kv)) * np.where(s == 1, 1.0, 0.02 * kv) + 0.3 * np.cos(3 * kv)

    heads = np.array([64.0, 32.0, 16.0, 8.0, 64.0, 16.0])
    kv = np.array([300.0, 2048.0, 4096.0, 16.0, 900.0, 777.0])
    s = np.array([1.0, 1.0, 2048.0, 16.0, 1.0, 777.0])  # decodes and prefills
    shape = {"B": np.ones(6), "S": s, "KV": kv, "H": heads, "HKV": heads / 8, "D": np.full(6, 128.0)}
    together = Envelope().apply("attention", shape, answer(shape), ("key",), answer)
    # the question, then its four groups' lattices of 11 x 21 points at once (two decodes share one group,
    # a chunk (S < KV, prefill) has none)
    assert calls == [6, 4 * 11 * 21]
    alone = np.array(
        [
            Envelope().apply(
                "attention",
                {k: v[[i]] for k, v in shape.items()},
                answer({k: v[[i]] for k, v in shape.items()}),
                ("key",),
                answer,
            )[0]
            for i in range(6)
        ]
    )
    assert np.array_equal(together, alone)
    assert not np.array_equal(together, answer(shape))  # the envelope moved some answers: the check bites


def test_moe_curve_table_returns_exact_hits_and_interpolates_tokens(catalog) -> None:
    from components.opmodel.transfer import CurveTable
    from components.physics import roofline as physics

    spec = catalog.get("h100-sxm")
    tokens = np.array([1.0, 4.0, 16.0, 64.0])
    dims = {"E": 64.0, "topk": 8.0, "H": 4096.0, "I": 1536.0}
    measured = physics.roofline("moe", "bf16", {"T": tokens, **dims}, spec).time_us * [1.6, 1.5, 1.4, 1.3]
    frame = pd.DataFrame({"T": tokens, **dims, "tp": 1.0, "ep": 1.0}).assign(
        distribution="balanced", latency_us=measured
    )
    table = CurveTable("moe", frame, spec, "bf16")
    ask = {"T": np.array([4.0, 8.0, 4096.0]), **dims}
    roof = physics.roofline("moe", "bf16", ask, spec)
    got, exact, near = table.resolve(ask, roof.time_us)
    assert exact.tolist() == [True, False, False] and got[0] == measured[1] and not near.any()
    assert 1.4 < got[1] / roof.time_us[1] < 1.5 and np.isnan(got[2])  # 6 octaves past the curve: none
    other = table.resolve({**ask, "distribution": "power_law_1.2"}, roof.time_us, nearest=True)[0]
    assert np.isnan(other).all()  # another routing distribution is another site, never a nearest one
    # another model (E = 128, top-4, H = 2048): no site matches; the nearest one's efficiency at the same
    # routed tokens per expert (T * topk / E: 4 tokens here are 1 token of the measured site, 1.6x)
    moved = {"T": np.array([4.0, 16.0]), "E": 128.0, "topk": 4.0, "H": 2048.0, "I": 1536.0}
    roof_moved = physics.roofline("moe", "bf16", moved, spec)
    assert np.isnan(table.resolve(moved, roof_moved.time_us)[0]).all()  # exact sites only by default
    got, exact, near = table.resolve(moved, roof_moved.time_us, nearest=True)
    assert near.all() and not exact.any()
    np.testing.assert_allclose(got / roof_moved.time_us, [1.6, 1.5])


def test_a_questions_few_rows_get_the_site_keys_the_factorized_table_gives(monkeypatch) -> None:
    """``curve_table._site_labels`` labels a few rows one by one (a lattice's batch) and a table's rows
    by their distinct sites: the same key for the same row either way, a question's broadcast scalars and
    integer sizes included; a NaN or -0.0 size takes the factorized path (its own mapping)."""
    from components.opmodel import curve_table

    rng = np.random.default_rng(7)
    n = 40
    cases = [
        {
            "E": rng.choice([8.0, 64.0, 128.0], n),
            "topk": rng.choice([1, 2, 8], n),
            "H": np.broadcast_to(np.asarray(4096.0), (n,)),
            "I": rng.choice([1536.0, 14336.0, 1e20], n),
            "tp": np.ones(n),
            "ep": rng.choice([1.0, 8.0], n),
            "distribution": np.broadcast_to(np.asarray("balanced"), (n,)),
        },
        {"E": np.array([64.0, np.nan, 64.0]), "distribution": np.array(["a", "b", "a"], dtype=object)},
        {"E": np.array([-0.0, 0.0, 3.0]), "distribution": np.array(["a", "a", "power_law_1.2"])},
    ]
    direct = [curve_table._site_labels(c).tolist() for c in cases]
    assert curve_table._row_labels(cases[0]) is not None and len(set(direct[0])) > 1
    assert curve_table._row_labels(cases[1]) is None and curve_table._row_labels(cases[2]) is None
    monkeypatch.setattr(curve_table, "DIRECT_ROWS", 0)  # every batch factorized, as a whole table is
    assert [curve_table._site_labels(c).tolist() for c in cases] == direct


def test_every_silent_unanswered_row_gets_a_reason() -> None:
    from components.evaluation.harness import silent_rows_reasoned
    from components.models.cuda_runtime import unpredicted_reasons

    frame = pd.DataFrame(
        {
            "family": ["gemm", "softmax", "gemm"],
            "dtype": ["bf16", "fp32", "bf16"],
            "duration_us": [10.0, 5.0, 3.0],
            "pred_duration_us": [np.nan, np.nan, 3.1],
            "pred_note": [None, None, None],
            "f_flops": [np.nan, 1.0, 1.0],
        }
    )
    reasons = unpredicted_reasons(silent_rows_reasoned(frame))
    assert "no reason given" not in reasons and sum(reasons.values()) == 2
    assert any("f_flops" in r for r in reasons) and any("softmax fp32" in r for r in reasons)


AIC_DATA = (
    Path(__file__).resolve().parents[2].parent
    / "shared"
    / "datasets"
    / "aiconfigurator"
    / "aic-core/src/aiconfigurator_core/systems/data"
)
REAL_TABLES = ("a100_sxm/gemm/vllm/0.14.0/gemm_perf.parquet", "h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet")


@pytest.mark.skipif(
    not all((AIC_DATA / t).is_file() for t in REAL_TABLES), reason="aiconfigurator tables not present"
)
def test_real_a100_gemms_answered_from_the_h100s_measured_table(catalog, tmp_path) -> None:
    """AIConfigurator's A100 bf16 GEMMs, the A100 out of the store: the transfer tier answers every row from
    the H100's measured table, far closer than the roofline (the issue's sibling rule: ~16-22%)."""
    from components.opmodel.engine import OpEngine
    from components.opmodel.spec import hash_fraction
    from components.opmodel.store import build_store, load_store

    root = tmp_path / "aic"
    for table in REAL_TABLES:
        link = root / "aic-core/src/aiconfigurator_core/systems/data" / table
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(AIC_DATA / table)
    build_store(root, tmp_path / "store", families=("gemm",))
    gemm = load_store(tmp_path / "store")["gemm"]
    engine = OpEngine.from_frames({"gemm": gemm[gemm["device_id"] == "h100-sxm"]})
    a100 = gemm[(gemm["device_id"] == "a100-sxm4-80gb") & (gemm["dtype"] == "bf16") & (gemm["M"] >= 1)]
    a100 = a100[hash_fraction(a100, ["M", "N", "K"]) < 300 / len(a100)]
    shape = {k: a100[k].to_numpy(dtype="float64") for k in ("M", "N", "K")}
    times = engine.predict("gemm", "bf16", shape, catalog.get("a100-sxm4-80gb"))
    true = a100["latency_us"].to_numpy()
    assert (times.tier == "transfer").all() and all("h100-sxm" in s for s in times.support)
    mape = np.mean(np.abs(times.duration_us - true) / true)
    roof = np.mean(np.abs(times.roof.time_us - true) / true)
    print(f"A100 bf16 GEMM from the H100: transfer {mape:.3f}, roofline {roof:.3f}")
    assert mape < 0.3 and mape < 0.5 * roof, (mape, roof)


def test_a_relative_answers_each_question_once_for_every_gpu_that_asks_it(catalog) -> None:
    from components.opmodel.engine import OpEngine

    gemm = synthetic_gemm(catalog)
    engine = OpEngine.from_frames({"gemm": gemm[gemm["device_id"] == "h100-sxm"]}, None, _model())
    asked = []
    tier = engine.transfer
    inner = tier._relative_answer

    def counting(*args, **kwargs):
        asked.append(args[0][1])
        return inner(*args, **kwargs)

    tier._relative_answer = counting
    shape = {"M": SIZES, "N": np.full(len(SIZES), 4096.0), "K": np.full(len(SIZES), 2048.0)}
    first = {"h200": engine.predict("gemm", "bf16", shape, catalog.get("h200")).duration_us}
    questions = len(asked)  # the shape and the monotone envelope's lattice, each asked of the H100
    assert questions >= 1 and set(asked) == {"h100-sxm"}
    first["l40s"] = engine.predict("gemm", "bf16", shape, catalog.get("l40s")).duration_us
    assert len(asked) == questions  # the second GPU's questions reused the relative's answers
    again = engine.predict("gemm", "bf16", shape, catalog.get("h200")).duration_us
    np.testing.assert_array_equal(again, first["h200"])
    assert first["h200"].tolist() != first["l40s"].tolist()  # carried by each GPU's own roofline ratio
    other = {**shape, "K": shape["K"] * 1.5}  # off the envelope's power-of-two lattice: rows not asked before
    engine.predict("gemm", "bf16", other, catalog.get("h200"))
    assert len(asked) > questions  # another shape is another question (its rows: row_memo)
    duration, _, _ = tier.relative_answer("gemm", "h100-sxm", "bf16", shape, None, None)
    with pytest.raises(ValueError):
        duration[0] = 0.0  # remembered answers are read-only: no caller changes another's


def test_a_relative_answers_past_its_reach_with_its_efficiency_held(catalog) -> None:
    """The H100's synthetic table covers M 1..4096, N and K 1024..8192; questions far past it (M = 2^17, N =
    K = 8 or 2^17) are answered by the transfer tier from the H100's table at the nearest measured extent,
    efficiency against roofline + floor held: on physics-exact rows that is the asked GPU's truth. Without
    holding, the tier has no answer there (the spec tier's lattice points pulled the envelope)."""
    from components.opmodel.engine import OpEngine
    from components.opmodel.transfer import TransferTier
    from components.physics import roofline as physics

    gemm = synthetic_gemm(catalog)
    engine = OpEngine.from_frames({"gemm": gemm[gemm["device_id"] == "h100-sxm"]}, None, _model())
    shape = {
        "M": np.array([2.0**17, 2.0**17, 1.0, 64.0, 2.0**15]),
        "N": np.array([8.0, 2.0**17, 8.0, 2.0**17, 4096.0]),
        "K": np.array([8.0, 2.0**17, 2.0**17, 8.0, 2048.0]),
    }
    h200 = catalog.get("a100-sxm4-80gb")  # not H100's twin: carried by the ratio, exact in this world
    times = engine.predict("gemm", "bf16", shape, h200)
    truth = (physics.roofline("gemm", "bf16", shape, h200).time_us + FLOOR_US) / 0.8
    assert (times.tier == "transfer").all(), times.tier
    assert all("h100-sxm (held past its measured range)" in s for s in times.support)
    np.testing.assert_allclose(times.duration_us, truth, rtol=1e-9)
    strict = TransferTier(engine.measured, {}, engine.transfer.model, hold=False)
    roof = physics.roofline("gemm", "bf16", shape, h200)
    assert np.isnan(strict.resolve("gemm", "bf16", shape, h200, roof)[0]).all()


def test_moe_answers_with_a_routing_distribution_are_non_decreasing_in_tokens(catalog) -> None:
    """H100's measured MoE sweep dips (T = 16 faster than T = 4, another kernel won); B200, answered from it,
    asked with the routing distribution (a label column), gets a runtime non-decreasing in T, per
    distribution: each label keeps its own lattice."""
    from components.opmodel.engine import OpEngine
    from components.physics import roofline as physics

    spec = catalog.get("h100-sxm")
    tokens = 2.0 ** np.arange(0, 11, 2)
    dims = {"E": 8.0, "topk": 2.0, "H": 4096.0, "I": 14336.0}
    roof = physics.roofline("moe", "bf16", {"T": tokens, **dims}, spec).time_us
    dip = np.array([1.0, 1.3, 0.9, 1.2, 1.2, 1.2])  # T = 16 below T = 4
    frames = [
        pd.DataFrame({"T": tokens, **dims, "tp": 1.0, "ep": 1.0}).assign(
            device_id="h100-sxm", dtype="bf16", distribution=name, latency_us=(roof + 200.0) * dip * slow
        )
        for name, slow in (("balanced", 1.0), ("power_law_1.2", 1.5))
    ]
    engine = OpEngine.from_frames({"moe": pd.concat(frames, ignore_index=True)}, None)
    n = len(tokens)
    ask = {"T": tokens, **{k: np.full(n, v) for k, v in dims.items()}, "tp": np.ones(n), "ep": np.ones(n)}
    ask["distribution"] = np.array(["balanced"] * 3 + ["power_law_1.2"] * 3, dtype=object)
    ask = {
        k: np.concatenate([v, v]) if k != "distribution" else np.concatenate([v, v[::-1]])
        for k, v in ask.items()
    }
    got = engine.predict("moe", "bf16", ask, catalog.get("b200"))
    assert (got.tier == "transfer").all()
    for name in ("balanced", "power_law_1.2"):
        rows = np.flatnonzero(ask["distribution"] == name)
        order = rows[np.argsort(ask["T"][rows], kind="stable")]
        assert (np.diff(got.duration_us[order]) >= -1e-9).all(), name
    balanced = ask["distribution"] == "balanced"
    assert (
        got.duration_us[balanced & (ask["T"] == 1024.0)] < got.duration_us[~balanced & (ask["T"] == 1024.0)]
    )


def _carried(device: str, distance: float, duration: np.ndarray, near: bool):
    from components.opmodel.transfer import Carried

    n = len(duration)
    return Carried(device, distance, duration, np.zeros(n, bool), np.zeros((n, 5)), None, near)


def test_near_relatives_answer_alone_where_they_answer_and_the_k_nearest_elsewhere() -> None:
    from components.opmodel.transfer import TransferSettings, blend

    truth = np.array([10.0, 20.0, 30.0])
    own = _carried("h100-sxm", 0.8, np.array([10.0, 20.0, np.nan]), near=True)
    other = _carried("a100-sxm4-80gb", 2.6, truth * 2.0, near=False)
    mixed, _ = blend([own, other], TransferSettings(k=2, tau=2.0), None, {})
    alone, used = blend([own, other], TransferSettings(k=2, tau=2.0, near=True), None, {})
    assert (mixed[:2] > truth[:2] * 1.1).all()  # the far relative's other kernels dilute the blend
    np.testing.assert_allclose(alone, [10.0, 20.0, 60.0])  # the last row: only the far one answers
    assert used.tolist() == [[True, True, False], [False, False, True]]


def test_settings_are_chosen_for_a_family_some_training_gpu_lacks() -> None:
    """Attention measured on two of three GPUs (no AMD GPU measured it): its settings are still chosen by the
    inner leave-one-GPU-out (the count of GPUs to score was that of every family's, so none was)."""
    from components.opmodel.transfer_fit import PairGroup, choose_settings

    truth = np.array([10.0, 20.0, 40.0])
    groups = []
    for family, targets in (("gemm", GPUS[:3]), ("attention", GPUS[1:3])):
        for target in targets:
            carried = [
                _carried(d, 0.5 + i, truth * (1.0 + 0.5 * i), near=False)
                for i, d in enumerate(x for x in targets if x != target)
            ]
            groups.append(PairGroup(target, family, truth, carried, "bf16"))
    for family in ("gemm", "attention"):
        settings, near, scores = choose_settings(groups, list(GPUS[:3]), family)
        assert scores["far"] and min(scores["far"].values()) < 1e-9 and settings.k == 1
        assert near is None and not scores["near"]  # no inner answer had a relative of its generation


def test_a_gpu_with_a_relative_of_its_generation_takes_the_near_settings(catalog, tmp_path) -> None:
    """The far settings (here a blend of two) answer L40S; H200, with H100 measured, is answered by H100
    alone (no near settings learned: plain physics of the near relative), and the settings round-trip."""
    from components.opmodel.engine import OpEngine
    from components.opmodel.transfer import NEAR_PLAIN, TransferModel, TransferSettings

    gemm = synthetic_gemm(catalog, gpus=("h100-sxm", "a100-sxm4-80gb"))
    model = TransferModel(settings={"gemm": TransferSettings(2, 2.0, None)}, floors={"gemm": FLOOR_US})
    engine = OpEngine.from_frames({"gemm": gemm}, None, model, monotone=False)
    shape = {"M": np.array([64.0]), "N": np.array([4096.0]), "K": np.array([4096.0])}
    far = engine.predict("gemm", "bf16", shape, catalog.get("l40s")).support[0]
    near = engine.predict("gemm", "bf16", shape, catalog.get("h200")).support[0]
    assert "h100-sxm" in far and "a100-sxm4-80gb" in far
    assert near == "carried over from h100-sxm (measured) (a twin: its time beyond the roofline kept)"
    assert model.settings_of("gemm", near=True) == NEAR_PLAIN
    model.near_settings = {"gemm": TransferSettings(1, 0.5, 0.3, True)}
    model.save(tmp_path)
    assert TransferModel.load(tmp_path).near_settings == model.near_settings


def test_a_twin_answers_alone_with_its_time_beyond_the_roofline_carried(catalog) -> None:
    """H200 asked, H100 (its twin: the same SMs, clock, L2 and tensor peaks; less DRAM bandwidth) and A100
    measured, the near settings a blend of three (as chosen on MI300X <-> MI308X, 80 of 304 CUs, in H200's
    fold): every row is H100's alone, its measured time with the roofline's difference (0 on the
    compute-bound row, the DRAM time saved on the memory-bound one). Before, both rows were diluted by A100's
    other kernels."""
    from components.opmodel.engine import OpEngine
    from components.opmodel.transfer import TransferModel, TransferSettings, identical_pipe
    from components.physics import roofline as physics

    gemm = synthetic_gemm(catalog, gamma=0.5, gpus=("h100-sxm", "a100-sxm4-80gb"))
    blend3 = TransferSettings(3, 2.0, None)
    model = TransferModel(
        settings={"gemm": blend3}, near_settings={"gemm": blend3}, floors={"gemm": FLOOR_US}
    )
    engine = OpEngine.from_frames({"gemm": gemm}, None, model, monotone=False)
    shape = {"M": np.array([4096.0, 1.0]), "N": np.array([8192.0, 8192.0]), "K": np.array([8192.0, 8192.0])}
    h100, h200, a100 = catalog.get("h100-sxm"), catalog.get("h200"), catalog.get("a100-sxm4-80gb")
    got = engine.predict("gemm", "bf16", shape, h200)
    roof_x, roof_y = (physics.roofline("gemm", "bf16", shape, s) for s in (h200, h100))
    assert identical_pipe(h200, h100, roof_x, roof_y).all()
    assert not identical_pipe(h200, a100, roof_x, physics.roofline("gemm", "bf16", shape, a100)).any()
    site = gemm[(gemm.device_id == "h100-sxm") & (gemm.N == 8192) & (gemm.K == 8192)].set_index("M")
    measured = site.loc[[4096.0, 1.0], "latency_us"].to_numpy()
    np.testing.assert_allclose(got.duration_us, measured + roof_x.time_us - roof_y.time_us, rtol=1e-9)
    assert roof_x.time_us[0] == roof_y.time_us[0] and roof_x.time_us[1] < roof_y.time_us[1]
    twin = "carried over from h100-sxm (measured) (a twin: its time beyond the roofline kept)"
    assert (got.support == twin).all()
    # a copy with twice every peak is no one's twin: it is blended, and never slower
    faster = h200.model_copy(
        update={
            "id": "h200-x2",
            "dram_gbps": h200.dram_gbps * 2,
            "peak_tflops": h200.peak_tflops.model_copy(
                update={k: v * 2 for k, v in h200.peak_tflops.model_dump().items() if v is not None}
            ),
        }
    )
    doubled = engine.predict("gemm", "bf16", shape, faster)
    assert (doubled.duration_us <= got.duration_us).all() and "a100-sxm4-80gb" in doubled.support[0]


def synthetic_attention(catalog, device: str, window: float) -> pd.DataFrame:
    """bf16 decode and prefill rows of one GPU at one sliding window (0: none), ``(roofline + 3 us) / 0.8``:
    B 1..64, H = 32, HKV = 8, D = 128, KV (decode) and S = KV (prefill) 64..16384."""
    from components.physics import roofline as physics

    b, kv = (a.ravel() for a in np.meshgrid(2.0 ** np.arange(0, 7), 2.0 ** np.arange(6, 15), indexing="ij"))
    frames = []
    for s in (np.ones_like(kv), kv):
        shape = {"B": b, "S": s, "KV": kv, "H": 32.0, "HKV": 8.0, "D": 128.0, "W": window}
        roof = physics.roofline("attention", "bf16", shape, catalog.get(device), "bf16")
        latency = (roof.time_us + 3.0) / 0.8
        rows = {k: np.broadcast_to(v, b.shape) for k, v in shape.items()}
        kinds = {"device_id": device, "dtype": "bf16", "kv_dtype": "bf16"}
        frames.append(pd.DataFrame({**kinds, **rows, "latency_us": latency}))
    out = pd.concat(frames, ignore_index=True)
    return out.assign(n_repeats=1, latency_min_us=out["latency_us"], latency_max_us=out["latency_us"])


def test_a_window_the_relative_never_measured_is_its_full_kernel_at_the_keys_read(catalog) -> None:
    """H100 measured full attention only; A100 is asked decodes and prefills under a 1024-token window, within
    it and past it. Its answer is H100's full kernel at the keys the window reads (a decode's KV cut to W),
    carried back by the roofline ratio: exact in this world, where every kernel runs at 0.8 of roofline +
    floor. A decode past its window is not the full kernel at the full KV (that would be ~4x slower at KV =
    4096); the strict tier (``hold=False``: the fit's pairs, the sibling rule) still has no answer."""
    from components.opmodel.engine import OpEngine
    from components.opmodel.transfer import TransferModel, TransferTier
    from components.physics import roofline as physics

    model = TransferModel(settings={}, floors={"attention": 3.0})
    engine = OpEngine.from_frames({"attention": synthetic_attention(catalog, "h100-sxm", 0.0)}, None, model)
    a100 = catalog.get("a100-sxm4-80gb")
    kv = np.array([256.0, 1024.0, 4096.0, 16384.0, 512.0, 4096.0])
    s = np.array([1.0, 1.0, 1.0, 1.0, 512.0, 4096.0])
    shape = {"B": np.full(6, 8.0), "S": s, "KV": kv, "H": 32.0, "HKV": 8.0, "D": 128.0, "W": 1024.0}
    roof = physics.roofline("attention", "bf16", shape, a100, "bf16")
    duration, support = engine.transfer.resolve("attention", "bf16", shape, a100, roof, "bf16")
    np.testing.assert_allclose(duration, (roof.time_us + 3.0) / 0.8, rtol=1e-6)
    assert all("held past its measured range" in text for text in support)
    full = physics.roofline("attention", "bf16", {**shape, "W": 0.0}, a100, "bf16").time_us
    assert duration[2] < 0.5 * (full[2] + 3.0) / 0.8  # past the window: not the full KV's time
    strict = TransferTier(engine.measured, {}, model, hold=False)
    assert np.isnan(strict.resolve("attention", "bf16", shape, a100, roof, "bf16")[0]).all()
