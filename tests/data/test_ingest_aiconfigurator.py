"""The aiconfigurator adapter on a small real subset: a few of upstream's parquet files copied into an
upstream-layout tree (tmp_path), plus corrupted copies for the error paths.

The subset: A100 bf16 GEMMs measured twice (vLLM 0.14.0 and SGLang 0.5.9: the same 9,240 shapes, so every
kernel has two repeats), A100 TRT-LLM context and generation attention, L40S SGLang MoE, H100 NCCL and L40S
TRT-LLM custom all-reduce under two version folders (a copied table, not repeats).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from components.ingest.schema import KERNEL_COLUMNS, MEASUREMENT_COLUMNS, with_measurement_ids
from kernelcast.settings import DEFAULT_DATASETS_DIR

AIC = DEFAULT_DATASETS_DIR / "aiconfigurator"
SYSTEMS = Path("aic-core/src/aiconfigurator_core/systems")
FILES = [
    "a100_sxm/gemm/vllm/0.14.0/gemm_perf.parquet",
    "a100_sxm/gemm/sglang/0.5.9/gemm_perf.parquet",
    "a100_sxm/attention/trtllm/1.0.0/context_attention_perf.parquet",
    "a100_sxm/attention/trtllm/1.0.0/generation_attention_perf.parquet",
    "l40s/moe/sglang/0.5.12/moe_perf.parquet",
    "a100_sxm/comm/nccl/2.27.3/nccl_perf.parquet",
    "l40s/comm/trtllm/1.3.0rc15/custom_allreduce_perf.parquet",
    "l40s/comm/trtllm/1.3.0rc20/custom_allreduce_perf.parquet",
]
SHEETS = ["a100_sxm.yaml", "h100_sxm.yaml", "l40s.yaml"]

pytestmark = pytest.mark.skipif(not (AIC / SYSTEMS).is_dir(), reason="aiconfigurator bundle not present")


def make_tree(root: Path, files: list[str] = FILES) -> Path:
    for rel in files:
        dst = root / SYSTEMS / "data" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(AIC / SYSTEMS / "data" / rel, dst)
    (root / SYSTEMS / "data").mkdir(parents=True, exist_ok=True)
    for sheet in SHEETS:
        shutil.copyfile(AIC / SYSTEMS / sheet, root / SYSTEMS / sheet)
    return root


def raw(rel: str) -> pd.DataFrame:
    return pd.read_parquet(AIC / SYSTEMS / "data" / rel)


@pytest.fixture(scope="module")
def catalog():
    from components.devices import load_catalog

    return load_catalog(user_dir=None)


def run(root: Path, catalog, max_kernels: int | None = None):
    from components.ingest.aiconfigurator_canonical import ingest

    out = ingest(root, catalog, max_kernels=max_kernels)
    out.check_balance()
    return out


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tree(tmp_path_factory.mktemp("aic") / "aiconfigurator")


@pytest.fixture(scope="module")
def out(tree: Path, catalog):
    return run(tree, catalog)


def _rows(out, rel: str) -> pd.DataFrame:
    m = out.measurements
    return m[m["upstream_file"] == (SYSTEMS / "data" / rel).as_posix()]


def test_registered_and_canonical(out) -> None:
    from components.ingest.registry import SOURCES, UPSTREAMS, get_adapter

    assert "aiconfigurator" in SOURCES and UPSTREAMS["aiconfigurator"].repo == "ai-dynamo/aiconfigurator"
    assert get_adapter("aiconfigurator").__module__ == "components.ingest.aiconfigurator_canonical"
    m, k = out.measurements, out.kernels
    assert list(m.columns) == list(MEASUREMENT_COLUMNS) and list(k.columns) == list(KERNEL_COLUMNS)
    # Every row of the subset, except the NCCL table's other collectives (all-gather, reduce-scatter, ...).
    expected = sum(
        int((raw(f)["op_name"] == "all_reduce").sum()) if "/comm/" in f else len(raw(f)) for f in FILES[:7]
    )
    assert len(out.rejects) == 0 and out.rows_in == len(m) == expected
    assert set(m["device_id"]) == {"a100-sxm4-80gb", "l40s"}
    assert set(m["source"]) == {"aiconfigurator"} and set(m["profiler"]) == {"cuda_event"}
    assert with_measurement_ids(m)["measurement_id"].is_unique and m["kernel_id"].isin(k["kernel_id"]).all()
    assert set(zip(k["family"], k["op"], strict=True)) == {
        ("gemm", "gemm"),
        ("attention", "prefill"),
        ("attention", "decode"),
        ("moe", "moe"),
        ("allreduce", "nccl"),
        ("allreduce", "custom"),
    }
    assert set(k["language"]) == {"op"} and k["kernel_id"].is_unique


def test_units_and_provenance_match_upstream(out) -> None:
    rel = "a100_sxm/gemm/sglang/0.5.9/gemm_perf.parquet"
    upstream = raw(rel).iloc[17]
    rows = _rows(out, rel)
    row = rows[rows["upstream_row"] == 17].iloc[0]
    assert row["duration_us"] == pytest.approx(upstream["latency"] * 1000.0)  # ms -> us
    params = json.loads(row["params_json"])
    assert (params["M"], params["N"], params["K"]) == (upstream["m"], upstream["n"], upstream["k"])
    assert (params["framework"], params["version"], params["kernel_source"]) == (
        upstream["framework"],
        upstream["version"],
        upstream["kernel_source"],
    )
    assert row["run_id"] == f"{upstream['framework']}/{upstream['version']}/{upstream['kernel_source']}"
    assert row["device_name_raw"] == upstream["device"] and row["device_id"] == "a100-sxm4-80gb"
    flops = 2.0 * upstream["m"] * upstream["n"] * upstream["k"]
    assert row["flops"] == pytest.approx(flops)
    assert row["gflops"] == pytest.approx(flops / row["duration_us"] / 1e3)


def test_decode_kv_is_isl_plus_step_and_prefill_is_square(out) -> None:
    for table, phase in (("generation", "decode"), ("context", "prefill")):
        rel = f"a100_sxm/attention/trtllm/1.0.0/{table}_attention_perf.parquet"
        upstream = raw(rel)
        rows = _rows(out, rel).sort_values("upstream_row")
        shapes = pd.DataFrame([json.loads(p) for p in rows["params_json"]])
        up = upstream.iloc[rows["upstream_row"].to_numpy()].reset_index(drop=True)
        kv = up["isl"] + up["step"]
        assert (shapes["KV"] == kv).all()
        assert (shapes["S"] == (1 if phase == "decode" else up["isl"])).all()
        assert (shapes["B"] == up["batch_size"] * up["beam_width"]).all()
        assert (shapes["D"] == up["head_dim"]).all()
        assert (shapes["kv_dtype"].isin(["bf16", "fp8", "fp16"])).all()
        kernels = out.kernels.set_index("kernel_id").loc[rows["kernel_id"]]
        assert set(kernels["op"]) == {phase}
    decode = _rows(out, "a100_sxm/attention/trtllm/1.0.0/generation_attention_perf.parquet")
    # isl = 1 in this table: the step is the context
    assert json.loads(decode.iloc[0]["params_json"])["KV"] > 1


def test_repeats_share_one_kernel_id(out) -> None:
    m = out.measurements
    gemm = m[m["upstream_file"].str.contains("/gemm/")]
    per_kernel = gemm.groupby("kernel_id")["run_id"].agg(["size", "nunique"])
    # The same 9,240 shapes measured under vLLM 0.14.0 and SGLang 0.5.9: two repeats of each kernel.
    assert len(per_kernel) == len(raw(FILES[0]))
    assert (per_kernel["size"] == 2).all() and (per_kernel["nunique"] == 2).all()
    # Upstream's 1.3.0rc15 and rc20 custom all-reduce folders hold the same table (version column 1.0.0, same
    # latencies): a copy is not a repeat, so only the first file's rows are kept, and the copies are counted.
    custom = m[m["upstream_file"].str.contains("custom_allreduce")]
    assert len(custom) == len(raw(FILES[6])) and custom["upstream_file"].str.contains("1.3.0rc15").all()
    assert custom.groupby("kernel_id").size().eq(1).all()
    assert any(note.startswith("allreduce:") and f"{len(raw(FILES[7]))} copies" in note for note in out.notes)
    from components.ingest.aiconfigurator_canonical import noise_floor

    assert 0.0 <= noise_floor(gemm) < 1.0
    # vLLM 0.14.0 (kernel source vllm_default) and SGLang 0.5.9 (sglang): no two repeats of this subset
    # share a kernel source, so the within-source spread has no pairs to measure.
    assert pd.isna(noise_floor(gemm, same_kernel_source=True))
    assert any("median relative spread" in note for note in out.notes)


def test_sample_is_deterministic_capped_and_keeps_every_repeat(tree: Path, catalog, out) -> None:
    first, second = run(tree, catalog, max_kernels=300), run(tree, catalog, max_kernels=300)
    assert len(first.kernels) == 300
    assert first.kernels["kernel_id"].tolist() == second.kernels["kernel_id"].tolist()
    assert (
        first.measurements["measurement_id"].equals(second.measurements["measurement_id"])
        or with_measurement_ids(first.measurements)["measurement_id"].tolist()
        == with_measurement_ids(second.measurements)["measurement_id"].tolist()
    )
    # Every measurement of a chosen kernel is kept (both GEMM repeats), and only those.
    full = out.measurements
    chosen = set(first.kernels["kernel_id"])
    assert len(first.measurements) == int(full["kernel_id"].isin(chosen).sum())
    # Small (family, op) groups are taken whole; the budget is shared between groups.
    counts = first.kernels.groupby(["family", "op"]).size()
    full_counts = out.kernels.groupby(["family", "op"]).size()
    for group in counts.index:
        assert counts[group] == min(full_counts[group], counts.max())


def test_group_quotas_water_fill() -> None:
    from components.ingest.aiconfigurator_canonical import group_quotas

    assert group_quotas({"a": 10, "b": 1000, "c": 1000}, 310) == {"a": 10, "b": 150, "c": 150}
    assert group_quotas({"a": 10, "b": 20}, 100) == {"a": 10, "b": 20}
    assert group_quotas({"a": 100, "b": 100, "c": 100}, 10) == {"a": 4, "b": 3, "c": 3}


def test_unknown_dtype_is_dropped_and_counted(tmp_path: Path, catalog) -> None:
    root = make_tree(tmp_path / "aic", FILES[:1])
    path = root / SYSTEMS / "data" / FILES[0]
    frame = pd.read_parquet(path)
    frame.loc[[3, 4, 5], "gemm_dtype"] = "w4a16_mxfp4"  # a dtype the readers do not map
    frame.to_parquet(path, index=False)
    result = run(root, catalog)
    assert len(result.measurements) == len(frame) - 3
    assert not result.measurements["upstream_row"].isin([3, 4, 5]).any()
    assert any(note.startswith("gemm:") and "readers dropped 3" in note for note in result.notes)


def test_gemm_without_work_is_rejected_with_its_row(tmp_path: Path, catalog) -> None:
    root = make_tree(tmp_path / "aic", FILES[:1])
    path = root / SYSTEMS / "data" / FILES[0]
    frame = pd.read_parquet(path)
    frame.loc[[7, 8], "m"] = 0  # upstream's H100 TRT-LLM tables hold such M = 0 rows
    frame.to_parquet(path, index=False)
    result = run(root, catalog)
    assert sorted(result.rejects["upstream_row"].tolist()) == [7, 8]
    assert result.rejects["reason"].str.startswith("gemm: M = 0").all()
    assert result.rows_in == len(frame) and len(result.measurements) == len(frame) - 2


def test_gpu_not_in_catalog_taken_from_its_sheet(tmp_path: Path, catalog) -> None:
    """A GPU folder the catalog lacks: h20_3e with upstream's H20-3e sheet figures (systems/h20_3e.yaml); its
    table is the L40S MoE table relabelled, a stand-in for data the bundle does not have."""
    root = make_tree(tmp_path / "aic", [])
    path = root / SYSTEMS / "data/h20_3e/moe/sglang/0.5.12/moe_perf.parquet"
    path.parent.mkdir(parents=True)
    raw(FILES[4]).assign(device="NVIDIA H20-3e").to_parquet(path, index=False)
    sheet = (
        "gpu:\n  mem_bw: 4917000000000\n  mem_capacity: 151397597184\n"
        "  float16_tc_flops: 148000000000000\n  int8_tc_flops: 296000000000000\n"
        "  fp8_tc_flops: 296000000000000\n  power: 500\n  sm_version: 90\n"
        "node:\n  intra_node_bw: 450000000000\n"
    )
    (root / SYSTEMS / "h20_3e.yaml").write_text(sheet)
    result = run(root, catalog)
    (spec,) = result.devices
    assert spec.id == "h20-3e" and spec.link_gbps == 450
    assert spec.peak_tflops.fp8_tensor == pytest.approx(296.0)
    assert "'h20'" in (spec.notes or "")  # the same-architecture template with the closest tensor peak
    assert set(result.measurements["device_id"]) == {"h20-3e"} and len(result.rejects) == 0
    assert any("h20_3e.yaml" in note and "h20-3e" in note for note in result.notes)
    # No sheet: the rows are rejected as an unknown device, named as the tables spell it.
    (root / SYSTEMS / "h20_3e.yaml").unlink()
    result = run(root, catalog)
    assert len(result.measurements) == 0
    assert set(result.rejects["reason"]) == {"unknown device 'NVIDIA H20-3e'"}
    assert any("no spec sheet h20_3e.yaml" in note for note in result.notes)


def test_unknown_folder_of_a_catalog_gpu_resolves_by_its_device_name(tmp_path: Path, catalog) -> None:
    root = make_tree(tmp_path / "aic", [])
    path = root / SYSTEMS / "data/h20_sxm/moe/sglang/0.5.12/moe_perf.parquet"
    path.parent.mkdir(parents=True)
    raw(FILES[4]).assign(device="NVIDIA H20").to_parquet(path, index=False)
    result = run(root, catalog)
    assert set(result.measurements["device_id"]) == {"h20"} and result.devices == []


def test_not_upstream_layout_is_a_clear_error(tmp_path: Path, catalog) -> None:
    from components.ingest.base import IngestError

    (tmp_path / "empty").mkdir()
    with pytest.raises(IngestError, match="systems/data"):
        run(tmp_path / "empty", catalog)


def test_evaluate_reads_a_tree_in_upstream_layout_per_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``kernelcast evaluate --source aiconfigurator --from DIR``: every table of the tree scored per GPU (the
    training-free roofline as the predictor), a sheet-only GPU added to the catalog, and every row not
    answered counted with its reason (no analytical formula yet, or a GPU nobody describes)."""
    from typer.testing import CliRunner

    from kernelcast.cli import app

    root = make_tree(tmp_path / "aic", [FILES[2], FILES[4]])
    path = root / SYSTEMS / "data/h20_3e/gemm/vllm/0.14.0/gemm_perf.parquet"
    path.parent.mkdir(parents=True)
    # A100 rows as a stand-in for an H20-3e's, 3x slower (its 148 TFLOP/s tensor peak is half the A100's
    # 312: the A100's own times would be faster than this GPU's peak and be quarantined, rightly).
    stand_in = raw(FILES[0]).head(40)
    stand_in.assign(device="NVIDIA H20-3e", latency=stand_in["latency"] * 3).to_parquet(path, index=False)
    (root / SYSTEMS / "h20_3e.yaml").write_text(
        "gpu:\n  mem_bw: 4917000000000\n  mem_capacity: 151397597184\n"
        "  float16_tc_flops: 148000000000000\n  power: 500\n  sm_version: 90\n"
    )
    unknown = root / SYSTEMS / "data/zz_gpu/gemm/vllm/0.14.0/gemm_perf.parquet"
    unknown.parent.mkdir(parents=True)
    raw(FILES[0]).head(7).assign(device="Acme Z1").to_parquet(unknown, index=False)
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    out = tmp_path / "eval.json"
    result = CliRunner().invoke(
        app,
        [
            "evaluate",
            "--model",
            "roofline",
            "--source",
            "aiconfigurator",
            "--from",
            str(root),
            "--out",
            str(out),
            "--no-log",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    by_device = report["coverage_by_device"]
    assert report["devices_from_source"] == ["h20-3e"]
    assert by_device["h20-3e"] == {"n_asked": 40, "n_answered": 40, "not_answered": {}}
    a100 = by_device["a100-sxm4-80gb"]
    assert a100["n_answered"] == a100["n_asked"] == len(raw(FILES[2]))
    assert by_device["l40s"]["n_answered"] == 0 and by_device["l40s"]["not_answered"] == {
        "family 'moe'/op 'moe': no formula, or its shape lacks the dims it needs": len(raw(FILES[4]))
    }
    assert by_device["Acme Z1"] == {
        "n_asked": 7,
        "n_answered": 0,
        "not_answered": {"rejected at ingest: unknown device (not in the catalog, no spec sheet)": 7},
    }
    assert report["per_device"]["h20-3e"]["duration_us"]["n"] == 40


def test_validate_and_features_accept_the_new_families(out, catalog) -> None:
    """GX suites pass the subset (quantised dtypes and the attention/moe/allreduce families are known); the
    feature table keeps every row: decode attention costed over its KV context, MoE and all-reduce (no
    analytical formula yet) with NaN features and a note, never dropped."""
    from components.features.stage import features_from_tables
    from components.platform.config import load_params
    from components.validation.run import validate_kernels, validate_measurements

    params = load_params()
    measurements = with_measurement_ids(out.measurements)  # as the ingest stage's merge fills them
    checked = validate_measurements(measurements, catalog, params, kernels=out.kernels)
    assert len(checked.quarantine) == 0 and len(checked.valid) == len(measurements)
    assert len(validate_kernels(out.kernels, params).quarantine) == 0
    table = features_from_tables(checked.valid, out.kernels, catalog, None)
    assert len(table) == len(out.measurements)
    decode = table[(table["family"] == "attention") & (table["op"] == "decode")]
    assert len(decode) and decode["f_flops"].notna().all()
    # One query token over KV keys: 4 * B * H * D * KV FLOPs by the analytical formula (KV read from "KV").
    valid = checked.valid.set_index("measurement_id")
    kv = valid.loc[decode["measurement_id"], "params_json"].map(json.loads)
    expected = [4.0 * p["B"] * p["H"] * p["D"] * p["KV"] for p in kv]
    assert decode["f_flops"].to_numpy() == pytest.approx(expected)
    for family in ("moe", "allreduce"):
        rows = table[table["family"] == family]
        assert len(rows) and rows["f_roofline_time_us"].isna().all()
        assert rows["feature_note"].str.contains("no formula").all()


def test_sample_cap_is_a_params_key() -> None:
    from components.platform.config import ParamsError, ingest_max_kernels

    assert ingest_max_kernels({"ingest": {"aiconfigurator_max_kernels": 500}}, "aiconfigurator") == 500
    assert ingest_max_kernels({"ingest": {"sources": ["neusight"]}}, "aiconfigurator") is None
    with pytest.raises(ParamsError, match="aiconfigurator_max_kernels must be a positive integer"):
        ingest_max_kernels({"ingest": {"aiconfigurator_max_kernels": 0}}, "aiconfigurator")
