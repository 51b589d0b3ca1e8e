"""A 4-bit float checkpoint's experts on a GPU without the fp4 pipe run as the engines run them there:
4-bit weights, 16-bit math (``compose.moe_dtype``), timed from the tables that measured those kernels
(AIConfigurator's ``w4a16_mxfp4`` MoE tables, ingested as ``int4_wo``: ``ingest.aiconfigurator.read_moe``).
docs/engines.md "moe35"."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from components.deployments.compose import step_ops
from components.deployments.config import Deployment, model_shape


@pytest.fixture(scope="module")
def catalog():
    from components.devices import load_catalog

    return load_catalog()


def _oss(catalog, gpu: str, dtype: str) -> Deployment:
    model = model_shape("openai/gpt-oss-120b")
    fields = {"isl": 1024, "osl": 64, "concurrency": 8, "tp": 4, "weight_dtype": dtype}
    return Deployment(model=model, gpu=catalog.resolve(gpu), **fields)


def _dtypes(d: Deployment) -> dict[str, set[str]]:
    lines = step_ops(d, "decode", 8, 1.0, 1024.0)
    return {
        "experts": {line.dtype for line in lines if line.family == "moe"},
        "dense": {line.dtype for line in lines if line.family == "gemm" and line.kind != "moe"},
    }


def test_fp4_experts_run_weight_only_where_the_gpu_has_no_fp4_pipe(catalog) -> None:
    hopper = _dtypes(_oss(catalog, "h100-sxm", "nvfp4"))
    assert hopper["experts"] == {"int4_wo"}
    assert "nvfp4" in hopper["dense"] and "int4_wo" not in hopper["dense"]  # the dense GEMMs as before
    assert _dtypes(_oss(catalog, "b200", "nvfp4"))["experts"] == {"nvfp4"}  # Blackwell's own fp4 pipe
    assert _dtypes(_oss(catalog, "h100-sxm", "fp8"))["experts"] == {"fp8"}  # other dtypes unchanged


def test_the_mxfp4_moe_tables_ingest_as_int4_weight_only(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from components.ingest.aiconfigurator import SYSTEMS_DIR, read_moe

    data = tmp_path / SYSTEMS_DIR / "data/h100_sxm/moe/vllm/0.24.0"
    data.mkdir(parents=True)
    n = 3
    table = pd.DataFrame(
        {
            "framework": "VLLM",
            "version": "0.24.0",
            "kernel_source": "triton",
            "moe_dtype": ["w4a16_mxfp4", "fp8_block", "w2a16_unknown"],
            "num_tokens": [1, 1, 1],
            "hidden_size": [2880] * n,
            "inter_size": [2880] * n,
            "topk": [4] * n,
            "num_experts": [128] * n,
            "moe_tp_size": [1] * n,
            "moe_ep_size": [1] * n,
            "distribution": ["balanced"] * n,
            "latency": [0.063, 0.05, 0.04],  # ms
        }
    )
    pq.write_table(pa.Table.from_pandas(table, preserve_index=False), data / "moe_perf.parquet")
    rows = read_moe(tmp_path)
    assert sorted(rows["dtype"]) == ["fp8_block", "int4_wo"]
    assert rows.loc[rows["dtype"] == "int4_wo", "latency_us"].item() == pytest.approx(63.0)
    assert rows.attrs["dropped"] == 1  # a dtype no physics knows is still dropped, counted
