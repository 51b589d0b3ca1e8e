"""Analytical features against hand-computed cases, and the feature-table build (serial == Ray)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pytest

from components.features.analytical import analytical_features, parse_dims
from components.features.build import build_feature_table, build_features_parallel, write_features


@dataclass(frozen=True)
class Spec:
    """The DeviceSpec fields the formulas read, with vendor-sheet numbers."""

    sms: int
    boost_clock_mhz: float
    dram_gbps: float
    l2_mb: float
    l1_smem_per_sm_kb: float
    peaks: dict = field(default_factory=dict)  # (precision, tensor) -> FLOP/s

    def peak_flops(self, precision: str, tensor: bool) -> float:
        return self.peaks[(precision, tensor)]


A100 = Spec(
    108,
    1410,
    1555,
    40,
    192,
    {
        ("fp32", False): 19.5e12,
        ("fp64", False): 9.7e12,
        ("fp16", False): 78e12,
        ("fp16", True): 312e12,
        ("bf16", True): 312e12,
        ("tf32", True): 156e12,
        ("fp64", True): 19.5e12,
    },
)
H100 = Spec(
    132,
    1980,
    3350,
    50,
    256,
    {
        ("fp32", False): 67e12,
        ("fp64", False): 34e12,
        ("fp16", False): 134e12,
        ("fp16", True): 989e12,
        ("bf16", True): 989e12,
        ("fp8", True): 1979e12,
        ("tf32", True): 494e12,
        ("fp64", True): 67e12,
    },
)


class Catalog:
    def __init__(self, specs: dict[str, Spec]) -> None:
        self.specs = specs

    def get(self, device_id: str) -> Spec:
        return self.specs[device_id]


CATALOG = Catalog({"a100-pcie-40gb": A100, "h100-sxm": H100})


def vector(spec: Spec) -> dict[str, float]:
    return {"sms": spec.sms, "dram_gbps": spec.dram_gbps}


def rows(*specs: dict) -> pd.DataFrame:
    """Measurement rows already joined with their kernel."""
    base = {"device_id": "h100-sxm", "family": "gemm", "op": "matmul", "dtype": "fp32", "params_json": "{}"}
    out = []
    for spec in specs:
        row = {**base, **spec}
        row["shape_json"] = json.dumps(row.pop("shape", {}))
        out.append(row)
    return pd.DataFrame(out)


def test_gemm_4096_flops_and_min_bytes() -> None:
    f = analytical_features(rows({"shape": {"M": 4096, "N": 4096, "K": 4096}}), CATALOG).iloc[0]
    assert f["f_flops"] == 2 * 4096**3
    assert f["f_dram_bytes_min"] == 3 * 4096**2 * 4
    assert f["f_arith_intensity"] == pytest.approx(2 * 4096**3 / (3 * 4096**2 * 4))
    # 128x128 tiles: A is read once per column of tiles (32), B once per row of tiles (32), C written once.
    assert f["f_l2_bytes_tiled"] == 4 * (4096**2 * 32 + 4096**2 * 32 + 4096**2)
    assert f["f_ctas"] == 32 * 32 and f["f_ctas_measured"] == 0.0
    # fp32 matmul stays on the FMA pipe (PyTorch's allow_tf32 is off for matmul).
    assert f["f_uses_tensor"] == 0.0 and f["f_fma_flops"] == 2 * 4096**3 and f["f_tensor_flops"] == 0.0
    assert pd.isna(f["feature_note"])


def test_elementwise_bytes_and_scalar_variant() -> None:
    n = 1 << 20
    frame = rows(
        {"family": "elementwise", "op": "add", "shape": {"N": n}},
        {"family": "elementwise", "op": "addu", "shape": {"B": 1024, "H": 1024}},
        {"family": "elementwise", "op": "gelu", "shape": {"N": n}},
    )
    f = analytical_features(frame, CATALOG)
    assert f["f_dram_bytes_min"].tolist() == [3 * n * 4, 2 * n * 4, 2 * n * 4]
    assert f["f_flops"].iloc[0] == n
    assert f["f_sfu_ops"].iloc[0] == 0 and f["f_sfu_ops"].iloc[2] > 0  # gelu uses the special-function pipe
    assert f["f_ctas"].iloc[0] == n / 512


def test_waves_on_a100_from_measured_grid() -> None:
    frame = rows(
        # 240 GEMM CTAs of 256 threads, 2 resident per SM: 216 slots -> 2 waves, the second 24/216 full.
        {
            "device_id": "a100-pcie-40gb",
            "shape": {"M": 2048, "N": 1920, "K": 512},
            "grid_x": 240,
            "grid_y": 1,
            "grid_z": 1,
            "block_x": 256,
            "block_y": 1,
            "block_z": 1,
        },
        # 1000 elementwise CTAs of 128 threads: 16 per SM -> 1728 slots -> one wave.
        {
            "device_id": "a100-pcie-40gb",
            "family": "elementwise",
            "op": "relu",
            "shape": {"N": 512000},
            "grid_x": 1000,
            "block_x": 128,
        },
    )
    f = analytical_features(frame, CATALOG)
    assert f["f_ctas"].tolist() == [240, 1000]
    assert f["f_ctas_measured"].tolist() == [1.0, 1.0]
    assert f["f_ctas_per_sm"].tolist() == [2, 16]
    assert f["f_waves"].tolist() == [2, 1]
    assert f["f_wave_efficiency"].iloc[0] == pytest.approx(240 / 432)
    assert f["f_wave_efficiency"].iloc[1] == pytest.approx(1000 / 1728)
    assert f["f_busiest_sm_ctas"].tolist() == [3, 10]
    assert f["f_sm_imbalance"].iloc[0] == pytest.approx(3 * 108 / 240)


def test_roofline_time_and_bound_on_h100() -> None:
    frame = rows(
        {"dtype": "fp16", "shape": {"M": 8192, "N": 8192, "K": 8192}},
        {"family": "elementwise", "op": "add", "shape": {"N": 1 << 26}},
    )
    f = analytical_features(frame, CATALOG)
    gemm, add = f.iloc[0], f.iloc[1]
    assert gemm["f_uses_tensor"] == 1.0
    assert gemm["f_roofline_time_us"] == pytest.approx(2 * 8192**3 / 989e12 * 1e6)
    assert gemm["f_bound"] == "compute"
    assert gemm["f_ridge_point"] == pytest.approx(989e12 / 3350e9)
    assert add["f_roofline_time_us"] == pytest.approx(3 * (1 << 26) * 4 / 3350e9 * 1e6)
    assert add["f_bound"] == "bandwidth"
    assert add["f_dram_time_us"] > add["f_compute_time_us"]
    # The pipe-aware bound is never below the classic roofline.
    assert (f["f_pipes_time_us"] >= f["f_roofline_time_us"] - 1e-9).all()


def test_conv_moe_and_rows() -> None:
    frame = rows(
        {
            "family": "conv",
            "op": "conv2d",
            "device_id": "a100-pcie-40gb",
            "shape": {
                "B": 2,
                "Input_Channel": 3,
                "Output_Channel": 8,
                "Kernel_Szie": 3,
                "Input_Size": 32,
                "Stride": 1,
                "Padding": 1,
            },
        },
        {
            "family": "moe",
            "op": "w13",
            "dtype": "bf16",
            "shape": {
                "M": 64,
                "E": 8,
                "topk": 2,
                "H": 1024,
                "N": 512,
                "BLOCK_SIZE_M": 16,
                "BLOCK_SIZE_N": 64,
            },
        },
        {"family": "softmax", "op": "softmax", "shape": {"B": 128, "H": 256}},
        {"family": "layernorm", "op": "layer_norm", "shape": {"B": 128, "H": 256}},
    )
    f = analytical_features(frame, CATALOG)
    assert f["f_flops"].iloc[0] == 2 * (2 * 32 * 32) * 8 * (3 * 9)
    assert f["f_dram_bytes_min"].iloc[0] == 4 * (2 * 3 * 32 * 32 + 8 * 3 * 9 + 2 * 8 * 32 * 32)
    assert f["f_uses_tensor"].iloc[0] == 1.0  # cuDNN convs use TF32 on Ampere by default
    # settled (components/physics/moe.py): w13 is gate and up fused, 2N = 1024 output columns per routed row
    assert f["f_flops"].iloc[1] == 2 * (64 * 2) * (2 * 512) * 1024
    assert f["f_tile_m"].iloc[1] == 16 and f["f_tile_n"].iloc[1] == 64
    assert f["f_dram_bytes_min"].iloc[2] == 2 * 128 * 256 * 4
    assert f["f_sfu_ops"].iloc[2] == 128 * 256
    assert f["f_dram_bytes_min"].iloc[3] == 4 * (2 * 128 * 256 + 2 * 256)
    assert f["feature_note"].isna().all()


def test_parse_dims_params_override_shape() -> None:
    dims = parse_dims(
        pd.Series(['{"M": 1, "K": 3}', None]), pd.Series(['{"M": 2}', '{"problem_size": [25000, 2048, 1]}'])
    )
    assert dims.loc[0, "M"] == 2 and dims.loc[0, "K"] == 3
    assert dims.loc[1, "samples"] == 25000 and math.isnan(dims.loc[1, "M"])


def _tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    kernels = pd.DataFrame(
        [
            {
                "kernel_id": "k-gemm",
                "family": "gemm",
                "op": "matmul",
                "dtype": "fp16",
                "shape_json": '{"M":1024,"N":1024,"K":1024}',
            },
            {
                "kernel_id": "k-add",
                "family": "elementwise",
                "op": "add",
                "dtype": "fp32",
                "shape_json": '{"N":1048576}',
            },
            {
                "kernel_id": "k-prog",
                "family": "program",
                "op": "lulesh",
                "dtype": "unknown",
                "shape_json": None,
            },
            {
                "kernel_id": "k-coll",
                "family": "collective",
                "op": "all_reduce",
                "dtype": "unknown",
                "shape_json": '{"size":1024}',
            },
            {
                "kernel_id": "k-odd",
                "family": "elementwise",
                "op": "frobnicate",
                "dtype": "fp32",
                "shape_json": '{"N":8}',
            },
        ]
    )
    records = []
    for i in range(40):
        kid = kernels["kernel_id"].iloc[i % 5]
        records.append(
            {
                "measurement_id": f"m{i}",
                "kernel_id": kid,
                "device_id": ["h100-sxm", "a100-pcie-40gb"][i % 2],
                "source": "test",
                "upstream_file": "f.csv",
                "run_id": "r",
                "params_json": "{}",
                "duration_us": 10.0 + i,
                "dram_bytes": 1e6 if kid == "k-prog" else np.nan,
                "flops": 4e6 if kid == "k-prog" else np.nan,
                "fp32_arith_intensity": 4.0 if kid == "k-prog" else np.nan,
            }
        )
    records.append(
        {
            "measurement_id": "m-orphan",
            "kernel_id": "k-missing",
            "device_id": "h100-sxm",
            "source": "test",
            "params_json": "{}",
            "duration_us": 1.0,
        }
    )
    records.append(
        {
            "measurement_id": "m-nodev",
            "kernel_id": "k-gemm",
            "device_id": "tpu-v9",
            "source": "test",
            "params_json": "{}",
            "duration_us": 1.0,
        }
    )
    return pd.DataFrame(records), kernels


class PartialCatalog(Catalog):
    def get(self, device_id: str) -> Spec:
        if device_id not in self.specs:
            raise KeyError(device_id)
        return self.specs[device_id]


def test_every_row_kept_with_a_note_when_uncovered(tmp_path) -> None:
    measurements, kernels = _tables()
    static = pd.DataFrame({"kernel_id": ["k-prog"], "s_instructions": [120.0]})
    table = build_feature_table(
        measurements, kernels, PartialCatalog(CATALOG.specs), static, device_vector=vector
    )
    assert len(table) == len(measurements)
    assert table["measurement_id"].tolist() == measurements["measurement_id"].tolist()
    by_kernel = table.set_index("measurement_id")
    covered = table["kernel_id"].isin(["k-gemm", "k-add"]) & (table["device_id"] != "tpu-v9")
    assert table.loc[covered, "f_roofline_time_us"].notna().all()
    assert table.loc[covered, "feature_note"].isna().all()
    assert table.loc[~covered, "feature_note"].notna().all()
    assert table.loc[~covered, "f_roofline_time_us"].isna().all()
    assert "program" in by_kernel.loc["m2", "feature_note"]
    assert "collective" in by_kernel.loc["m3", "feature_note"]
    assert "frobnicate" in by_kernel.loc["m4", "feature_note"]
    assert "kernels table" in by_kernel.loc["m-orphan", "feature_note"]
    assert "catalog" in by_kernel.loc["m-nodev", "feature_note"]
    # Measured counters give program rows an m_* roofline, and only them.
    prog = table["kernel_id"] == "k-prog"
    assert table.loc[prog, "m_roofline_time_us"].notna().all()
    assert table.loc[~prog, "m_roofline_time_us"].isna().all()
    assert table.loc[prog, "m_arith_intensity"].eq(4.0).all()
    assert (
        table.loc[prog, "s_instructions"].eq(120.0).all() and table.loc[~prog, "s_instructions"].isna().all()
    )
    assert {"dev_sms", "dev_dram_gbps", "duration_us", "roofline_class"} <= set(table.columns)
    out = write_features(table, tmp_path / "features" / "features.parquet")
    assert len(pd.read_parquet(out)) == len(table) and not list(out.parent.glob(".*tmp"))


@pytest.mark.slow  # starts a local Ray
def test_ray_path_equals_serial(kc_settings) -> None:
    import ray

    measurements, kernels = _tables()
    catalog = PartialCatalog(CATALOG.specs)
    serial = build_feature_table(measurements, kernels, catalog, device_vector=vector)
    started = not ray.is_initialized()
    try:
        parallel = build_features_parallel(
            measurements, kernels, catalog, n_chunks=3, settings=kc_settings, device_vector=vector
        )
    finally:
        if started:
            ray.shutdown()  # leave no Ray behind for fixtures that start their own
    pd.testing.assert_frame_equal(parallel, serial)


def test_real_catalog_h100_roofline_and_a100_waves() -> None:
    from components.devices import device_feature_vector, load_catalog

    catalog = load_catalog()
    h100, a100 = catalog.get("h100-sxm"), catalog.get("a100-pcie-40gb")
    assert a100.sms == 108
    frame = rows(
        {"dtype": "bf16", "shape": {"M": 8192, "N": 8192, "K": 8192}},
        {"family": "elementwise", "op": "mul", "dtype": "bf16", "shape": {"N": 1 << 28}},
        {
            "device_id": "a100-pcie-40gb",
            "shape": {"M": 4096, "N": 4096, "K": 4096},
            "grid_x": 1024,
            "block_x": 256,
        },
    )
    f = analytical_features(frame, catalog)
    assert f["f_roofline_time_us"].iloc[0] == pytest.approx(2 * 8192**3 / h100.peak_flops("bf16", True) * 1e6)
    assert f["f_bound"].tolist() == ["compute", "bandwidth", "compute"]
    assert f["f_roofline_time_us"].iloc[1] == pytest.approx(3 * 2 * (1 << 28) / h100.dram_bytes_per_s * 1e6)
    assert f["f_waves"].iloc[2] == math.ceil(1024 / (108 * 2))
    table = build_feature_table(
        frame.assign(measurement_id=["x", "y", "z"], kernel_id=["k1", "k2", "k3"]).drop(
            columns=["family", "op", "dtype", "shape_json"]
        ),
        frame.assign(kernel_id=["k1", "k2", "k3"]),
        catalog,
    )
    assert table["dev_sms"].tolist() == [h100.sms, h100.sms, 108]
    assert set(device_feature_vector(h100)) <= set(table.columns)


def test_a_conv_whose_measured_kernel_was_fp32_fma_runs_on_the_fma_pipe() -> None:
    # NeuSight recorded each conv's kernel: on its A100-80GB every one was an FP32 FMA (SIMT) kernel, so
    # the TF32 tensor peak cuDNN could have used would put the roofline 8x below what ran
    shape = {"B": 8, "Input_Channel": 64, "Output_Channel": 64, "Kernel_Szie": 3, "Input_Size": 56}
    shape |= {"Stride": 1, "Padding": 1}
    names = ["ampere_sgemm_128x128_nn", "cudnn_infer_ampere_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t"]
    names += ["sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw", ""]
    frame = rows(
        *(
            {"family": "conv", "op": "conv", "device_id": "a100-pcie-40gb", "shape": shape}
            | {"params_json": json.dumps({"kernel_name": name} if name else {})}
            for name in names
        )
    )
    f = analytical_features(frame, CATALOG)
    assert f["f_uses_tensor"].tolist() == [0.0, 0.0, 1.0, 1.0]  # a TF32 kernel, or none recorded: TF32
    assert f["f_roofline_time_us"].iloc[0] > 4 * f["f_roofline_time_us"].iloc[2]
    assert f["f_flops"].nunique() == 1  # one op's work whatever pipe ran it


def test_a_conv_spelled_as_the_profiler_writes_it_has_the_same_work_as_neusights() -> None:
    # kernelcast's own conv cases (components/profiling/suites.py) name the dims canonically (cin, cout,
    # ksize, insize); NeuSight spells them Input_Channel .. Input_Size. One conv, one work, either spelling.
    profiled = {"B": 4, "cin": 64, "cout": 128, "ksize": 3, "insize": 56, "stride": 1, "pad": 1}
    neusight = {"B": 4, "Input_Channel": 64, "Output_Channel": 128, "Kernel_Szie": 3, "Input_Size": 56}
    neusight |= {"Stride": 1, "Padding": 1}
    frame = rows(
        *(
            {"family": "conv", "op": "conv2d", "device_id": "h100-sxm", "shape": s}
            for s in (profiled, neusight)
        )
    )
    f = analytical_features(frame, CATALOG)
    assert np.isfinite(f["f_flops"]).all() and np.isfinite(f["f_roofline_time_us"]).all()
    assert f["f_flops"].iloc[0] == f["f_flops"].iloc[1] == 2 * (4 * 56 * 56) * 128 * (64 * 9)
    assert f["f_dram_bytes_min"].iloc[0] == f["f_dram_bytes_min"].iloc[1]


def test_every_canonical_dim_name_parses_as_itself() -> None:
    from components.features.dims import DIMS

    dims = parse_dims(pd.Series([json.dumps({d: i + 1 for i, d in enumerate(DIMS)})]), pd.Series([None]))
    assert dims.iloc[0].tolist() == [float(i + 1) for i in range(len(DIMS))]
