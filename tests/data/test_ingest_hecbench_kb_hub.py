"""gpuFLOPBench (HeCBench), KernelBench and benchmark_hub adapters: real files, excerpts cut into
tmp_path in the upstream layout, and corrupted copies. Complements the per-source test files."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from components.devices import load_catalog
from components.ingest import benchmark_hub, gpuflopbench, kernelbench
from components.ingest.base import AdapterOutput, IngestError
from kernelcast.settings import DEFAULT_DATASETS_DIR

DATA = DEFAULT_DATASETS_DIR
GFB_HEAD = "cuda-profiling/profiling-data.csv"
GFB_CONTAINER = "_history/b05059d9/cuda-profiling/profiling-data.csv"
KEY = ["kernel_id", "device_id", "params_json", "run_id"]


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def _balanced(out: AdapterOutput) -> AdapterOutput:
    assert out.rows_in == len(out.measurements) + len(out.rejects)
    assert not out.measurements.duplicated(KEY).any()
    return out


# ---------------------------------------------------------------- gpuFLOPBench ----------------


@pytest.fixture(scope="module")
def gfb(catalog) -> AdapterOutput:
    return _balanced(gpuflopbench.ingest(DATA / "gpuflopbench", catalog))


def test_gfb_both_profilings_and_source_coverage_match_the_manifest(gfb: AdapterOutput) -> None:
    m = gfb.measurements
    assert m.groupby("upstream_file").size().to_dict() == {GFB_HEAD: 3436, GFB_CONTAINER: 1931}
    assert set(m["device_id"]) == {"rtx-3080"} and m.groupby("upstream_file")["run_id"].nunique().eq(1).all()
    head = m[m["upstream_file"] == GFB_HEAD]
    assert head["roofline_class_published"].value_counts().to_dict() == {"bandwidth": 2409, "compute": 1027}
    # 29 programs' sources were dropped for size: their rows stay, with no source text (MANIFEST).
    with_source = m.merge(gfb.kernels[["kernel_id", "source_text"]], on="kernel_id")
    covered = (
        with_source.groupby("upstream_file")["source_text"].apply(lambda s: int(s.notna().sum())).to_dict()
    )
    assert covered == {GFB_HEAD: 3091, GFB_CONTAINER: 1660}
    assert len(gfb.rejects) == 0


def test_gfb_catalog_class_is_never_more_compute_bound_than_bolets(gfb: AdapterOutput) -> None:
    # The catalog ridges use the boost clock (higher peaks than Bolet's base clock), so a kernel
    # below Bolet's thresholds is also below the catalog's; the reverse need not hold.
    m = gfb.measurements
    published_bw = m["roofline_class_published"] == "bandwidth"
    assert (m.loc[published_bw, "roofline_class"] == "bandwidth").all()
    assert (m["roofline_class"] == m["roofline_class_published"]).mean() > 0.95


def test_gfb_launch_pairs_get_distinct_params_and_consistent_units(gfb: AdapterOutput) -> None:
    m = gfb.measurements
    launches = m["params_json"].map(lambda p: json.loads(p)["launch"])
    assert set(launches) == {0, 1}
    # gflops = fp32 + fp64 rates; flops = gflops * time; intensity = flops / bytes.
    assert (m["gflops"] - m["fp32_gflops"] - m["fp64_gflops"]).abs().max() < 1e-6
    assert (m["flops"] / (m["gflops"] * 1e3 * m["duration_us"]) - 1).abs().max() < 1e-9
    ai = m["arith_intensity"].dropna()
    assert ((ai - (m["flops"] / m["dram_bytes"])[ai.index]).abs() / ai.clip(lower=1e-9)).max() < 1e-9


def _gfb_excerpt(
    tmp_path: Path, programs: list[str], mutate: Callable[[list[dict]], None] | None = None
) -> Path:
    """The first rows of each named program from the real HEAD CSV, with its sources when bundled."""
    src = DATA / "gpuflopbench"
    with (src / GFB_HEAD).open(newline="") as handle:
        reader = csv.DictReader(handle)
        fields = list(reader.fieldnames or [])
        rows = [r for r in reader if r["targetName"] in programs]
    if mutate:
        mutate(rows)
    root = tmp_path / "gpuflopbench"
    (root / "cuda-profiling").mkdir(parents=True)
    with (root / GFB_HEAD).open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    for program in programs:
        if (src / "src" / program).is_dir():
            shutil.copytree(src / "src" / program, root / "src" / program)
    return root


def test_gfb_dropped_program_keeps_rows_without_source_and_kernel_body_comes_first(
    tmp_path: Path, catalog
) -> None:
    out = _balanced(gpuflopbench.ingest(_gfb_excerpt(tmp_path, ["lulesh-cuda", "haccmk-cuda"]), catalog))
    kernels = out.kernels.set_index("program")
    assert kernels.loc[["lulesh-cuda"], "source_text"].isna().all()  # dropped from the bundle
    assert (
        len(out.measurements[out.measurements["kernel_id"].isin(kernels.loc[["lulesh-cuda"], "kernel_id"])])
        == 30
    )
    haccmk = kernels.loc["haccmk-cuda"]
    assert haccmk["source_text"].startswith("// ==== kernel haccmk_kernel\n")
    assert "// ==== file: src/haccmk-cuda/" in haccmk["source_text"] and haccmk["language"] == "cuda"


def test_gfb_unknown_device_and_garbage_rows_are_rejected_not_dropped(tmp_path: Path, catalog) -> None:
    def corrupt(rows: list[dict]) -> None:
        rows[0]["device"] = "NVIDIA GeForce RTX 9999 Ti"
        rows[1]["xtime"] = "fast"

    out = _balanced(gpuflopbench.ingest(_gfb_excerpt(tmp_path, ["haccmk-cuda"], corrupt), catalog))
    reasons = out.rejects.set_index("upstream_row")["reason"].to_dict()
    assert reasons[0] == "unknown device 'NVIDIA GeForce RTX 9999 Ti'"
    assert "fast" in reasons[1] and len(out.measurements) == out.rows_in - 2


def test_gfb_truncated_file_rejects_the_cut_row(tmp_path: Path, catalog) -> None:
    root = _gfb_excerpt(tmp_path, ["haccmk-cuda"])
    path = root / GFB_HEAD
    text = path.read_text()
    path.write_text(text[: text.rstrip("\n").rfind(",")])  # the last row loses its final fields
    out = _balanced(gpuflopbench.ingest(root, catalog))
    assert len(out.rejects) == 1 and out.rejects.iloc[0]["reason"] == "short row: no value for ['kernelName']"


# ---------------------------------------------------------------- KernelBench -----------------


@pytest.fixture(scope="module")
def kb(catalog) -> AdapterOutput:
    return _balanced(kernelbench.ingest(DATA / "kernelbench", catalog))


def _null_entries(root: Path) -> int:
    total = 0
    for path in kernelbench.timing_files(root):
        data = json.loads(path.read_text())
        total += sum(entry is None for level in data.values() for entry in level.values())
    return total


def test_kb_full_bundle_rejects_only_failed_runs_and_the_unusable_file(kb: AdapterOutput) -> None:
    reasons = kb.rejects["reason"]
    assert (reasons == "run failed (null)").sum() == _null_entries(DATA / "kernelbench")
    unusable = kb.rejects[reasons.str.startswith("unusable file")]
    assert set(unusable["upstream_file"]) == {"results/timing/A6000_babel_new/baseline_time_torch.json"}
    assert len(unusable) == 198 and len(kb.rejects) == (reasons == "run failed (null)").sum() + 198
    assert len(kb.measurements) == 14558


def test_kb_entry_hardware_wins_over_the_folder_name(kb: AdapterOutput) -> None:
    m = kb.measurements
    a10_folder = m[m["upstream_file"] == "results/timing/A10G_modal/baseline_time_torch.json"]
    assert a10_folder["device_id"].value_counts().to_dict() == {"a10g": 66, "a10": 34}
    h100_modal = m[
        m["upstream_file"] == "_history/1e2c63f9/results/timing/H100_modal/baseline_time_torch.json"
    ]
    assert (h100_modal["device_id"] == "h200").sum() == 127


def test_kb_problem_sets_are_distinct_kernels_with_their_own_source(kb: AdapterOutput) -> None:
    k = kb.kernels[kb.kernels["program"] == "level1/1_Square_matrix_multiplication_.py"].set_index("name")
    v00, v01 = (
        k.loc["level1/1_Square_matrix_multiplication_@v0.0"],
        k.loc["level1/1_Square_matrix_multiplication_@v0.1+"],
    )
    assert v00["kernel_id"] != v01["kernel_id"]
    assert "N = 2048" in v00["source_text"] and "N = 2048 * 2" in v01["source_text"]
    assert v00["source_path"] == "_v0.0/KernelBench/level1/1_Square_matrix_multiplication_.py"
    # Files timed on unbundled intermediate trees carry the tree commit and no source.
    old = kb.kernels[kb.kernels["name"].str.endswith("@intermediate@cf8edaab")]
    assert len(old) > 0 and old["source_text"].isna().all()
    assert set(kb.kernels["language"]) == {"pytorch"} and set(kb.kernels["family"]) == {"program"}


def test_kb_config_from_the_file_name_is_in_params_and_run_id(kb: AdapterOutput) -> None:
    m = kb.measurements
    row = m[
        m["upstream_file"]
        == "_v0.0/results/timing/T4_modal/baseline_time_torch_compile_inductor_default.json"
    ]
    params = json.loads(row["params_json"].iloc[0])
    assert params == {
        "mode": "torch.compile",
        "backend": "inductor",
        "compile_mode": "default",
        "level": params["level"],
        "problem_set": "v0.0",
    }
    assert row["run_id"].iloc[0] == "_v0.0:T4_modal/baseline_time_torch_compile_inductor_default"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("baseline_time_torch.json", ("eager", None, None, None)),
        ("baseline_time.json", ("eager", None, None, None)),
        (
            "baseline_time_torch_compile_inductor_max-autotune-no-cudagraphs.json",
            ("torch.compile", "inductor", "max-autotune-no-cudagraphs", None),
        ),
        ("baseline_time_torch_compile_cudagraphs.json", ("torch.compile", "cudagraphs", None, None)),
        ("baseline_time_torch_compile.json", ("torch.compile", "inductor", "default", None)),
        (
            "baseline_time_torch_compile_mode_max-autotune.json",
            ("torch.compile", "inductor", "max-autotune", None),
        ),
        ("baseline_time_matx2.json", ("eager", None, None, "matx2")),
        ("baseline_time_torch_compile_cleaned.json", ("torch.compile", "inductor", "default", "cleaned")),
    ],
)
def test_kb_parse_config(name: str, expected: tuple) -> None:
    config = kernelbench.parse_config(name)
    assert (config.mode, config.backend, config.compile_mode, config.variant) == expected


def _kb_tree(tmp_path: Path, timing: object, raw: str | None = None) -> Path:
    root = tmp_path / "kernelbench"
    problem = "level1/19_ReLU.py"
    (root / "KernelBench/level1").mkdir(parents=True)
    shutil.copy(DATA / "kernelbench/KernelBench" / problem, root / "KernelBench" / problem)
    folder = root / "results/timing/L4_GCP"
    folder.mkdir(parents=True)
    (folder / "baseline_time_torch.json").write_text(raw if raw is not None else json.dumps(timing))
    return root


def test_kb_excerpt_units_and_bad_entries(tmp_path: Path, catalog) -> None:
    real = json.loads((DATA / "kernelbench/results/timing/L4_GCP/baseline_time_torch.json").read_text())
    relu = real["level1"]["19_ReLU.py"]
    timing = {
        "level1": {
            "19_ReLU.py": relu,
            "20_LeakyReLU.py": None,
            "21_Sigmoid.py": {**relu, "hardware": "NVIDIA Z9000"},
            "22_Tanh.py": {**relu, "mean": -1.0},
            "23_Softmax.py": "oops",
        }
    }
    out = _balanced(kernelbench.ingest(_kb_tree(tmp_path, timing), catalog))
    row = out.measurements.iloc[0]
    assert row["duration_us"] == pytest.approx(relu["mean"] * 1000) and row["n_trials"] == relu["num_trials"]
    assert row["duration_std_us"] == pytest.approx(relu["std"] * 1000) and row["device_id"] == "l4"
    assert "torch.relu" in out.kernels.iloc[0]["source_text"]
    reasons = out.rejects.set_index("upstream_row")["reason"].to_dict()
    assert reasons[1] == "run failed (null)"
    assert reasons[2] == "unknown device 'NVIDIA Z9000'"
    assert reasons[3].startswith("impossible timing") and reasons[4].startswith("malformed entry")


@pytest.mark.parametrize("raw", ['{"level1": {"19_ReLU.py": {"mean": 1', "[1, 2]", '{"level1": 3}'])
def test_kb_corrupted_file_names_the_file(tmp_path: Path, catalog, raw: str) -> None:
    with pytest.raises(IngestError, match=r"L4_GCP/baseline_time_torch\.json"):
        kernelbench.ingest(_kb_tree(tmp_path, None, raw=raw), catalog)


def test_kb_history_file_pairs_with_the_tree_named_in_provenance(tmp_path: Path, catalog) -> None:
    src = DATA / "kernelbench"
    relpaths = [
        "_history/47f78d7f/results/timing/T4_modal/baseline_time_torch.json",
        "_history/016b0859/results/timing/H100_PCIe_LambdaLabs/baseline_time_torch.json",
    ]
    root = tmp_path / "kernelbench"
    for relpath in relpaths:
        (root / relpath).parent.mkdir(parents=True)
        data = json.loads((src / relpath).read_text())
        (root / relpath).write_text(json.dumps({"level1": dict(list(data["level1"].items())[:2])}))
    shutil.copytree(src / "_v0.0/KernelBench/level1", root / "_v0.0/KernelBench/level1")
    with (DATA / "PROVENANCE.csv").open(newline="") as handle:
        rows = [
            r for r in csv.DictReader(handle) if r["bundle_path"] in {f"kernelbench/{p}" for p in relpaths}
        ]
    pd.DataFrame(rows).to_csv(tmp_path / "PROVENANCE.csv", index=False)
    out = _balanced(kernelbench.ingest(root, catalog))
    names = set(out.kernels["name"])
    assert "level1/1_Square_matrix_multiplication_@v0.0" in names
    assert "level1/1_Square_matrix_multiplication_@intermediate@181539ee" in names
    with_text = out.kernels.dropna(subset=["source_text"])
    assert set(with_text["name"].str.split("@").str[1]) == {"v0.0"}
    # Without the bundle's PROVENANCE.csv a _history tree is unknown: kept, but without source.
    (tmp_path / "PROVENANCE.csv").unlink()
    out = _balanced(kernelbench.ingest(root, catalog))
    assert out.kernels["source_text"].isna().all() and out.kernels["name"].str.contains("@unknown@").all()


# ---------------------------------------------------------------- benchmark_hub ---------------


def _hub_excerpt(
    tmp_path: Path, folder: str, gpu: str, entries: int, mutate: Callable[[dict], None] | None = None
) -> Path:
    src = DATA / "benchmark_hub"
    root = tmp_path / "benchmark_hub"
    shutil.copytree(src / "kernels", root / "kernels")
    with gzip.open(src / f"cachefiles/{folder}/{gpu}.json.gz", "rt") as handle:
        data = json.load(handle)
    data["cache"] = dict(list(data["cache"].items())[:entries])
    if mutate:
        mutate(data)
    (root / "cachefiles" / folder).mkdir(parents=True)
    with gzip.open(root / f"cachefiles/{folder}/{gpu}.json.gz", "wt") as handle:
        json.dump(data, handle)
    return root


def test_hub_dedispersion_excerpt_keeps_bandwidth_and_cuda_source(tmp_path: Path, catalog) -> None:
    root = _hub_excerpt(tmp_path, "dedispersion_milo", "A100", 5)
    out = _balanced(benchmark_hub.ingest(root, catalog))
    with gzip.open(DATA / "benchmark_hub/cachefiles/dedispersion_milo/A100.json.gz", "rt") as handle:
        data = json.load(handle)
    key, entry = next(iter(data["cache"].items()))
    row = out.measurements.iloc[0]
    assert row["achieved_gbps"] == pytest.approx(entry["GB/s"]) and pd.isna(row["gflops"])
    assert row["duration_us"] == pytest.approx(entry["time"] * 1000) and row["device_id"] == "a100-pcie-40gb"
    params = json.loads(row["params_json"])
    assert [str(params[k]) for k in data["tune_params_keys"]] == key.split(",")  # the cache key, parsed
    kernel = out.kernels.iloc[0]
    assert (kernel["language"], kernel["family"]) == ("cuda", "dedispersion")
    assert kernel["source_text"] == (DATA / "benchmark_hub/kernels/dedisp_milo/dedispersion.cu").read_text()


def test_hub_unknown_device_rejects_every_entry_with_the_name(tmp_path: Path, catalog) -> None:
    root = _hub_excerpt(
        tmp_path, "convolution_milo", "A4000", 7, lambda d: d.update(device_name="NVIDIA RTX Z1")
    )
    out = _balanced(benchmark_hub.ingest(root, catalog))
    assert len(out.measurements) == 0 and len(out.rejects) == 7
    assert set(out.rejects["reason"]) == {"unknown device 'NVIDIA RTX Z1'"}


@pytest.mark.parametrize("mutate", [lambda d: d.pop("tune_params_keys"), lambda d: d.update(cache=[1, 2])])
def test_hub_malformed_cache_names_the_file(tmp_path: Path, catalog, mutate) -> None:
    root = _hub_excerpt(tmp_path, "convolution_milo", "A4000", 3, mutate)
    with pytest.raises(IngestError, match=r"A4000\.json\.gz"):
        benchmark_hub.ingest(root, catalog)
