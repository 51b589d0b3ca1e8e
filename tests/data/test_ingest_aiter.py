"""The aiter adapter on the real files (MANIFEST section 8: AMD's tuned GEMM and fused-MoE tables, MI300X and
MI308X), read in place, plus small synthetic tables in upstream's layout for the error paths."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from components.ingest.schema import KERNEL_COLUMNS, MEASUREMENT_COLUMNS, with_measurement_ids
from kernelcast.settings import DEFAULT_DATASETS_DIR

AITER = DEFAULT_DATASETS_DIR / "aiter"
CONFIGS = AITER / "aiter/configs"

pytestmark = pytest.mark.skipif(not CONFIGS.is_dir(), reason="aiter bundle not present")


@pytest.fixture(scope="module")
def catalog():
    from components.devices import load_catalog

    return load_catalog(user_dir=None)


@pytest.fixture(scope="module")
def out(catalog):
    from components.ingest.registry import get_adapter

    output = get_adapter("aiter")(AITER, catalog)
    output.check_balance()
    return output


@pytest.fixture(scope="module")
def rows(out) -> pd.DataFrame:
    """Measurements with their kernel's family/dtype and shape."""
    m = out.measurements.merge(out.kernels[["kernel_id", "family", "dtype"]], on="kernel_id")
    shapes = pd.DataFrame([json.loads(p) for p in m["params_json"]], index=m.index)
    return pd.concat([m, shapes[[c for c in shapes if c not in m]]], axis=1)


@functools.cache
def raw_tables() -> dict[str, pd.DataFrame]:
    files = sorted(CONFIGS.rglob("*.csv"))  # every table of the bundle (it holds no untuned shape lists)
    return {f.relative_to(AITER).as_posix(): pd.read_csv(f) for f in files if "chunk_gdn" not in f.name}


def test_registered_and_every_row_is_kept_or_rejected(out) -> None:
    from components.ingest.registry import SOURCES, UPSTREAMS

    assert "aiter" in SOURCES and UPSTREAMS["aiter"].repo == "ROCm/aiter"
    m, k = out.measurements, out.kernels
    assert list(m.columns) == list(MEASUREMENT_COLUMNS) and list(k.columns) == list(KERNEL_COLUMNS)
    tables = raw_tables()
    assert out.rows_in == sum(len(t) for t in tables.values())
    for rel, table in tables.items():  # per table: measured + rejected = upstream's rows
        kept = int((m["upstream_file"] == rel).sum())
        rejected = int((out.rejects["upstream_file"] == rel).sum())
        assert kept + rejected == len(table), rel
    assert with_measurement_ids(m)["measurement_id"].is_unique and m["kernel_id"].isin(k["kernel_id"]).all()
    assert k["kernel_id"].is_unique and set(m["source"]) == {"aiter"}
    assert any("chunk_gdn" in note for note in out.notes)  # the tables left out are named


def test_devices_are_the_cu_count_of_gfx942(out) -> None:
    m = out.measurements
    assert set(m["device_id"]) == {"mi300x", "mi308x"}
    assert set(m.loc[m["device_id"] == "mi300x", "device_name_raw"]) == {"gfx942-304cu"}
    assert set(m.loc[m["device_id"] == "mi308x", "device_name_raw"]) == {"gfx942-80cu"}
    for rel, table in raw_tables().items():
        mine = m[m["upstream_file"] == rel]
        cu = table["cu_num"].to_numpy()[mine["upstream_row"].to_numpy()]
        assert (np.where(cu == 304, "mi300x", "mi308x") == mine["device_id"].to_numpy()).all(), rel


def test_dtypes_follow_the_table_and_its_columns(rows) -> None:
    assert set(rows["dtype"]) <= {"bf16", "int8", "fp8", "fp8_block"}
    blockscale = rows["upstream_file"].str.contains("blockscale") & (rows["family"] != "moe")
    assert (rows.loc[blockscale, "dtype"] == "fp8_block").all()
    bf16 = rows["upstream_file"].str.contains("bf16_tuned")
    assert (rows.loc[bf16, "dtype"] == "bf16").all() and bf16.any()
    for rel, table in raw_tables().items():
        if "q_dtype_w" not in table or "fmoe" in rel:
            continue
        mine = rows[rows["upstream_file"] == rel]
        weights = table["q_dtype_w"].to_numpy()[mine["upstream_row"].to_numpy()]
        expected = np.where(weights == "torch.int8", "int8", "fp8")
        assert (mine["dtype"].to_numpy() == expected).all(), rel
    moe = rows[rows["family"] == "moe"]
    assert set(moe["dtype"]) == {"bf16", "fp8", "fp8_block", "int8"}  # int8: one W8A8 per-tensor row
    batched = rows["upstream_file"].str.contains("batched")
    assert (rows.loc[batched, "family"] == "bmm").all() and (rows.loc[batched, "B"] >= 1).all()
    assert set(rows.loc[~batched, "family"]) == {"gemm", "moe"}


def test_times_are_positive_and_rates_from_the_one_work_definition(rows) -> None:
    assert rows["duration_us"].notna().all() and (rows["duration_us"] > 0).all()
    assert np.isfinite(rows["duration_us"]).all()
    gemm = rows[rows["family"].isin(["gemm", "bmm"])]
    expected = 2.0 * gemm["B"].fillna(1) * gemm["M"] * gemm["N"] * gemm["K"]
    assert np.allclose(gemm["flops"], expected)
    assert np.allclose(rows["gflops"], rows["flops"] / rows["duration_us"] / 1e3)


def test_times_match_upstream_us(out) -> None:
    rel = "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_qwen3_vl_32b.csv"
    table = pd.read_csv(AITER / rel)
    mine = out.measurements[out.measurements["upstream_file"] == rel].iloc[100]
    upstream = table.iloc[int(mine["upstream_row"])]
    assert mine["duration_us"] == upstream["us"]
    params = json.loads(mine["params_json"])
    assert (params["M"], params["N"], params["K"]) == (upstream["M"], upstream["N"], upstream["K"])
    assert params["kernelName"] == upstream["kernelName"]


def test_copies_across_m_are_rejected_and_the_smallest_m_kept(out, rows) -> None:
    copies = out.rejects[out.rejects["reason"].str.contains("copy across")]
    assert len(copies) > 0 and any(f"{len(copies)} rows copy" in note for note in out.notes)
    kernel = rows["params_json"].map(
        lambda p: json.loads(p).get("kernelName", json.loads(p).get("kernelName1"))
    )
    # no two kept rows of one GPU, dtype and kernel at one N/K share a time (the copies are gone) ...
    gemm = rows[rows["family"] == "gemm"].assign(kernel=kernel)
    assert not gemm.duplicated(["device_id", "dtype", "kernel", "N", "K", "duration_us"]).any()
    # ... and each copy names a kept row of smaller M with its time
    for reject in copies.itertuples():
        source_file, source_row = reject.reason.rsplit(" as ", 1)[1].rsplit(" row ", 1)
        row_no = int(source_row.split(" ")[0])
        kept = rows[(rows["upstream_file"] == source_file) & (rows["upstream_row"] == row_no)]
        assert len(kept) == 1, reject.reason
        copied = raw_tables()[reject.upstream_file].iloc[int(reject.upstream_row)]
        size = "T" if kept["family"].iloc[0] == "moe" else "M"
        column = "token" if size == "T" else "M"
        assert kept["duration_us"].iloc[0] == copied["us"] and kept[size].iloc[0] < copied[column]
    # the fMoE copies: e.g. DeepSeek-V3 bf16 on MI308X, 2048 and 4096 tokens timed at the same 275.4024 us
    ds = copies[copies["upstream_file"].str.endswith("a8w8_blockscale_tuned_fmoe_ds_v3.csv")]
    assert (ds["upstream_row"] == 1).any()


def _write(root: Path, name: str, frame: pd.DataFrame) -> None:
    path = root / "aiter/configs" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)


def test_unknown_gpu_and_bad_time_are_rejected_with_a_reason(tmp_path: Path, catalog) -> None:
    from components.ingest.aiter import ingest

    base = {"M": 64, "N": 4096, "K": 4096, "q_dtype_w": "torch.int8", "kernelName": "k", "splitK": 0}
    _write(
        tmp_path,
        "a8w8_tuned_gemm.csv",
        pd.DataFrame(
            [
                {"gfx": "gfx942", "cu_num": 304, **base, "us": 10.0},
                {"gfx": "gfx950", "cu_num": 256, **base, "us": 9.0},  # MI355X: not in this catalog by alias
                {"gfx": "gfx942", "cu_num": 304, **{**base, "M": 128}, "us": 0.0},
            ]
        ),
    )
    out = ingest(tmp_path, catalog)
    assert len(out.measurements) == 1 and out.rows_in == 3
    reasons = sorted(out.rejects["reason"])
    assert reasons == ["gemm: unknown device 'gfx950-256cu'", "gemm: us = 0.0: no measured time"]


def test_a_table_without_its_columns_names_the_file(tmp_path: Path, catalog) -> None:
    from components.ingest.aiter import ingest
    from components.ingest.base import IngestError

    _write(tmp_path, "bf16_tuned_gemm.csv", pd.DataFrame({"gfx": ["gfx942"], "cu_num": [80], "M": [1]}))
    with pytest.raises(IngestError, match=r"bf16_tuned_gemm.csv: missing columns \['K', 'N', 'us'\]"):
        ingest(tmp_path, catalog)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(IngestError, match=r"no tuned tables"):
        ingest(empty, catalog)
