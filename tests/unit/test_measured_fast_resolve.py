"""The measured tier's candidate search (``SiteTable.candidates``: a ``cKDTree`` search, then only the sites
that can matter kept) against a brute-force scan of every site of the category written here, on real H100
tables (GEMM bf16 and fp8_block, attention): exact hits, own-site curve points, off-grid and held-out sites,
sites past the gate, unknown categories, batched GEMMs, one-question batches; and equally distant sites
ranked by site order, whatever order the measured rows came in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

DATASETS = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
AIC = DATASETS / "aiconfigurator"
DATA = "aic-core/src/aiconfigurator_core/systems/data/h100_sxm"
TABLES = (
    "gemm/vllm/0.24.0/gemm_perf.parquet",
    "attention/vllm/0.24.0/context_attention_perf.parquet",
    "attention/vllm/0.24.0/generation_attention_perf.parquet",
)
needs_tables = pytest.mark.skipif(
    not all((AIC / DATA / t).is_file() for t in TABLES), reason="aiconfigurator tables not present"
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    from components.opmodel.store import build_store, load_store

    root = tmp_path_factory.mktemp("aic")
    for table in TABLES:
        link = root / DATA / table
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(AIC / DATA / table)
    build_store(root, root / "store", families=("gemm", "attention"))
    return load_store(root / "store")


def _brute_force(table, distinct: np.ndarray) -> set[tuple[int, int]]:
    """Every site of the question's category within the gate; where the question site has more than
    NEAREST_KEPT + 4 per axis of them, only its NEAREST_KEPT nearest and the two nearest on each side along
    each axis's line -- ranked by (distance, site), one question site at a time."""
    from components.opmodel.measured import NEAREST_KEPT

    gate, axes = table.layout.gate, distinct.shape[1] - 1
    balls = []
    for row in distinct:
        sites = np.flatnonzero(table.site_cat == int(row[0]))
        offset = table.site_coords[sites] - row[1:]
        dist = np.sqrt((offset**2).sum(axis=1))
        inside = dist <= gate
        balls.append((sites[inside], offset[inside], dist[inside]))
    kept = set()
    for q, (sites, offset, dist) in enumerate(balls):
        if len(sites) <= NEAREST_KEPT + 4 * axes:  # per question site: no answer depends on the batch
            kept |= {(q, int(s)) for s in sites}
            continue
        kept |= {(q, int(s)) for s in sites[np.lexsort((sites, dist))[:NEAREST_KEPT]]}
        for a in range(axes):
            line = (np.abs(np.delete(offset, a, axis=1)) < 1e-9).all(axis=1)
            for side in (offset[:, a] < 0, offset[:, a] > 0):
                pick = np.flatnonzero(line & side)
                order = np.lexsort((sites[pick], np.abs(offset[pick, a])))
                kept |= {(q, int(s)) for s in sites[pick[order[:2]]]}
    return kept


def _distinct(table, shape: dict) -> np.ndarray:
    from components.opmodel.measured import _question_columns

    n = len(next(iter(shape.values())))
    columns = _question_columns(table.family, shape, n, table.dtype)
    codes = table._category_codes(columns, n)
    rows = np.flatnonzero(np.isfinite(codes))
    q = np.log2(
        np.column_stack([np.asarray(columns[a], dtype="float64")[rows] for a in table.layout.site_axes])
    )
    return np.unique(np.column_stack([codes[rows], q]), axis=0)


def _check(table, family: str, dtype: str, shape: dict, spec, kv_dtype=None):
    """The search keeps the brute-force sites (whole batch and one-question batches), in (question, site)
    order with the exact distances, and a question alone is answered as in the batch; returns the batch's
    answers."""
    from components.physics import roofline as physics

    n = len(next(iter(shape.values())))
    for batch in (shape, *({k: np.asarray(v)[i : i + 1] for k, v in shape.items()} for i in (0, n // 2))):
        distinct = _distinct(table, batch)
        site_q, site, dist = table.candidates(distinct)
        assert set(zip(site_q.tolist(), site.tolist(), strict=True)) == _brute_force(table, distinct)
        assert (np.diff(site_q * len(table.site_coords) + site) > 0).all()
        offset = table.site_coords[site] - distinct[site_q, 1:]
        np.testing.assert_array_equal(dist, np.sqrt((offset**2).sum(axis=1)))
    got = table.resolve(shape, physics.roofline(family, dtype, shape, spec, kv_dtype).time_us)
    for i in (0, n // 2):  # a question's answer is its own, whatever else the batch asked
        one = {k: np.asarray(v)[i : i + 1] for k, v in shape.items()}
        alone = table.resolve(one, physics.roofline(family, dtype, one, spec, kv_dtype).time_us)
        np.testing.assert_array_equal(alone.duration_us, got.duration_us[i : i + 1])
    return got


@needs_tables
def test_gemm_search_keeps_the_brute_force_sites(store) -> None:
    from components.devices.catalog import load_catalog
    from components.opmodel.measured import SiteTable
    from components.opmodel.spec import hash_fraction

    h100 = load_catalog().get("h100-sxm")
    gemm = store["gemm"]
    rng = np.random.default_rng(7)
    for dtype in ("bf16", "fp8_block"):
        part = gemm[(gemm["dtype"] == dtype) & (gemm["M"] >= 1)]
        held = hash_fraction(part, ["N", "K"]) < 0.2
        table = SiteTable("gemm", part[~held], h100, dtype, None)
        seen, unseen = part[~held].sample(300, random_state=1), part[held].sample(300, random_state=2)
        n = 400
        grid_n = rng.choice(part["N"].to_numpy(), n)
        # exact hits, held-out sites, random sizes, on-grid N with K past the grid
        shape = {
            "M": [seen["M"], unseen["M"], rng.integers(1, 16385, n), rng.integers(1, 4096, n)],
            "N": [seen["N"], unseen["N"], rng.integers(1, 16385, n), grid_n],
            "K": [seen["K"], unseen["K"], rng.integers(1, 16385, n), rng.integers(1, 70000, n)],
        }
        shape = {k: np.concatenate(v).astype("float64") for k, v in shape.items()}
        shape["B"] = np.where(rng.random(len(shape["M"])) < 0.1, 4.0, 1.0)  # batched: no measured answer
        got = _check(table, "gemm", dtype, shape, h100)
        single = shape["B"] == 1
        assert got.exact[:300][single[:300]].all() and not got.exact[300:].any()
        assert np.isnan(got.duration_us[~single]).all()
        assert np.isfinite(got.duration_us).mean() > 0.3 and (got.neighbours > 1).any()


@needs_tables
def test_attention_search_keeps_the_brute_force_sites(store) -> None:
    from components.devices.catalog import load_catalog
    from components.opmodel.measured import SiteTable

    h100 = load_catalog().get("h100-sxm")
    attention = store["attention"]
    rng = np.random.default_rng(11)
    for (dtype, kv), part in attention.groupby(["dtype", "kv_dtype"], sort=True):
        sites = part[["phase", "D", "W", "B", "H", "HKV"]].astype(str).agg("|".join, axis=1)
        held = sites.isin(sites.drop_duplicates().sample(frac=0.2, random_state=3))
        table = SiteTable("attention", part[~held], h100, dtype, kv)
        ask = np.concatenate([rng.choice(np.flatnonzero(~held), 200), rng.choice(np.flatnonzero(held), 200)])
        shape = {k: part[k].to_numpy(dtype="float64")[ask] for k in ("B", "S", "KV", "H", "HKV", "D", "W")}
        off = rng.random(len(ask)) < 0.4  # off-grid batch and heads
        shape["B"] = np.where(off, rng.integers(1, 300, len(ask)), shape["B"])
        shape["H"] = np.where(off, rng.choice([6, 12, 20, 40, 96], len(ask)), shape["H"])
        odd_d = rng.random(len(ask)) < 0.05
        shape["D"] = np.where(odd_d, 96.0, shape["D"])  # a head size never measured
        chunk = (rng.random(len(ask)) < 0.05) & (shape["S"] > 1)  # prefill chunks: no measured layout
        shape["S"] = np.where(chunk & (shape["S"] > 1), np.maximum(shape["S"] // 2, 2), shape["S"])
        got = _check(table, "attention", dtype, shape, h100, kv)
        kept = ~(off | odd_d | chunk)
        assert got.exact[:200][kept[:200]].mean() > 0.8 and not got.exact[200:][kept[200:]].any()
        assert np.isfinite(got.duration_us[200:]).any()
        assert np.isnan(got.duration_us[shape["D"] == 96]).all()


def test_equally_distant_sites_rank_by_site_order_whatever_the_row_order() -> None:
    """A square grid of GEMM sites with the question at the centre of a cell: four sites at one distance
    compete for the blend's places; the lower sites are blended, and shuffling the measured rows changes no
    answer (the former selection left that to ``np.argpartition``)."""
    from dataclasses import replace

    from components.devices.catalog import load_catalog
    from components.opmodel.measured import LAYOUTS, SiteTable
    from components.physics import roofline as physics

    h100 = load_catalog().get("h100-sxm")
    grid = 2 ** np.arange(9, 15)
    n, k, m = (a.ravel() for a in np.meshgrid(grid, grid, 2 ** np.arange(4, 12), indexing="ij"))
    shape = {"M": m.astype("float64"), "N": n.astype("float64"), "K": k.astype("float64")}
    roof = physics.roofline("gemm", "bf16", shape, h100).time_us
    rng = np.random.default_rng(0)
    latency = roof * rng.uniform(1.2, 3.0, len(roof))  # each site its own efficiency
    frame = pd.DataFrame(
        {**shape, "latency_us": latency, "latency_min_us": latency, "latency_max_us": latency}
    )
    idw = replace(LAYOUTS["gemm"], categorical=(), blend="idw", neighbours=2)
    ask = {"M": np.array([100.0]), "N": np.array([2**10.5]), "K": np.array([2**11.5])}
    ask_roof = physics.roofline("gemm", "bf16", ask, h100).time_us
    table = SiteTable("gemm", frame, h100, "bf16", None, layout=idw)
    got = table.resolve(ask, ask_roof)
    answers = [SiteTable("gemm", frame.sample(frac=1, random_state=s), h100, "bf16", None, layout=idw)
               .resolve(ask, ask_roof).duration_us for s in range(3)]  # fmt: skip
    np.testing.assert_array_equal(np.concatenate(answers), np.repeat(got.duration_us, 3))
    # the two blended: the lowest corners in site order, (N, K) = (2**10, 2**11) and (2**10, 2**12)
    lowest = {"M": np.full(2, 100.0), "N": np.full(2, 2.0**10), "K": np.array([2.0**11, 2.0**12])}
    own = table.resolve(lowest, physics.roofline("gemm", "bf16", lowest, h100).time_us)
    util = physics.roofline("gemm", "bf16", lowest, h100).time_us / own.duration_us
    expected = ask_roof / np.exp(np.log(util).mean())
    assert got.neighbours[0] == 2
    np.testing.assert_allclose(got.duration_us, expected, rtol=1e-12)


@needs_tables
def test_one_token_attention_rows_are_exact_hits_not_nan(store) -> None:
    """S = KV = 1 is a prefill row of the context tables; asked verbatim it must come back verbatim (it was
    filed as decode on the question side only: no site, NaN, and the transfer tier had nothing to carry)."""
    from components.devices.catalog import load_catalog
    from components.opmodel.measured import SiteTable
    from components.physics import roofline as physics

    h100 = load_catalog().get("h100-sxm")
    attention = store["attention"]
    one = attention[(attention["S"] == 1) & (attention["KV"] == 1)]
    assert len(one) > 0
    for (dtype, kv), part in attention.groupby(["dtype", "kv_dtype"], sort=True):
        asked = one[(one["dtype"] == dtype) & (one["kv_dtype"] == kv)]
        shape = {k: asked[k].to_numpy(dtype="float64") for k in ("B", "S", "KV", "H", "HKV", "D", "W")}
        roof = physics.roofline("attention", dtype, shape, h100, kv).time_us
        got = SiteTable("attention", part, h100, dtype, kv).resolve(shape, roof)
        assert got.exact.all(), (dtype, kv)
        np.testing.assert_allclose(got.duration_us, asked["latency_us"].to_numpy(), rtol=1e-12)
