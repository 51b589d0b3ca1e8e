"""The measured tier's fast ``SiteTable.resolve`` (candidates found by search on the site grid, only the
sites that can matter kept) against the former algorithm kept as ``_reference_resolve`` (every site of the
category a candidate), on real H100 tables (GEMM bf16 and fp8_block, attention): exact hits, own-site curve
points, off-grid and held-out sites, sites past the gate, unknown categories, batched GEMMs, one-question
batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

DATASETS = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
AIC = DATASETS / "aiconfigurator"
DATA = "aic-core/src/aiconfigurator_core/systems/data/h100_sxm"
TABLES = (
    "gemm/vllm/0.24.0/gemm_perf.parquet",
    "attention/vllm/0.24.0/context_attention_perf.parquet",
    "attention/vllm/0.24.0/generation_attention_perf.parquet",
)

pytestmark = pytest.mark.skipif(
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


def _same(got, ref) -> None:
    for field in ("duration_us", "exact", "neighbours", "distance", "spread"):
        a, b = getattr(got, field), getattr(ref, field)
        if a.dtype.kind == "f":
            np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=field)
            np.testing.assert_allclose(a[~np.isnan(a)], b[~np.isnan(b)], rtol=1e-12, atol=0, err_msg=field)
        else:
            np.testing.assert_array_equal(a, b, err_msg=field)


def _check(table, family: str, dtype: str, shape: dict, spec, kv_dtype=None):
    from components.physics import roofline as physics

    roof = physics.roofline(family, dtype, shape, spec, kv_dtype).time_us
    got = table.resolve(shape, roof)
    _same(got, table._reference_resolve(shape, roof))
    for i in (0, len(roof) // 2, len(roof) - 1):  # one-question batches: the small-width path
        one = {k: np.asarray(v)[i : i + 1] for k, v in shape.items()}
        _same(table.resolve(one, roof[i : i + 1]), table._reference_resolve(one, roof[i : i + 1]))
    return got


def _kept_path(table, shape: dict, family: str) -> bool:
    """Whether the batch takes the kept-sites path (many sites within the gate), checking the exact counts."""
    from components.opmodel.measured import NEAREST_KEPT, _question_columns

    n = len(next(iter(shape.values())))
    columns = _question_columns(family, shape, n, table.dtype)
    codes = table._category_codes(columns, n)
    rows = np.flatnonzero(np.isfinite(codes))
    axes = table.layout.site_axes
    q = np.log2(np.column_stack([np.asarray(columns[a], dtype="float64")[rows] for a in axes]))
    distinct = np.unique(np.column_stack([codes[rows], q]), axis=0)
    everything = table.cat_sites[distinct[:, 0].astype("int64")]
    offset = table.site_coords[np.maximum(everything, 0)] - distinct[:, None, 1:]
    within = (everything >= 0) & (np.sqrt((offset**2).sum(axis=2)) <= table.layout.gate)
    counts = within.sum(axis=1)
    np.testing.assert_array_equal(table._within_counts(distinct), counts)
    threshold = NEAREST_KEPT + 4 * len(table.layout.site_axes)
    for cut in (threshold, 2, 40):  # the bounded counts tell the same sites apart at any cut
        np.testing.assert_array_equal(table._within_counts(distinct, cut) > cut, counts > cut)
    return int(counts.max()) > threshold


def test_gemm_fast_resolve_matches_the_reference(store) -> None:
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
        assert _kept_path(table, shape, "gemm")
        got = _check(table, "gemm", dtype, shape, h100)
        single = shape["B"] == 1
        assert got.exact[:300][single[:300]].all() and not got.exact[300:].any()
        assert np.isnan(got.duration_us[~single]).all()
        assert np.isfinite(got.duration_us).mean() > 0.3 and (got.neighbours > 1).any()


def test_attention_fast_resolve_matches_the_reference(store) -> None:
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
        _kept_path(table, shape, "attention")
        kept = ~(off | odd_d | chunk)
        assert got.exact[:200][kept[:200]].mean() > 0.8 and not got.exact[200:][kept[200:]].any()
        assert np.isfinite(got.duration_us[200:]).any()
        assert np.isnan(got.duration_us[shape["D"] == 96]).all()
