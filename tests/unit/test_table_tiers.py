"""The tiers of the ops timed from AIConfigurator's tables (``ops.table_op_time``): measured on the GPU
that has a table (DSA: SGLang's module tables; Mamba2: TensorRT-LLM's conv tables with the scan at its
roofline), transferred to another NVIDIA GPU by the speed-of-light ratio, the roofline on another vendor;
measured times monotone in the sequence length and never below the speed of light."""

from __future__ import annotations

import numpy as np
import pytest

from components.deployments.compose import OpLine, time_ops
from components.deployments.ops import sol_time, table_op_time
from components.devices import load_catalog
from components.platform.config import DEFAULT_DATASETS_DIR

TABLES = DEFAULT_DATASETS_DIR / "aiconfigurator" / "aic-core" / "src" / "aiconfigurator_core" / "systems"
pytestmark = pytest.mark.skipif(not TABLES.is_dir(), reason="AIConfigurator tables absent")
# GLM-5's DSA module on one GPU of TP 8; Nemotron-3 Nano's Mamba2 block at TP 1
DSA = {"H": 8, "HID": 6144, "QL": 2048, "KL": 512, "DR": 64, "DN": 192, "DV": 256, "IH": 32, "ID": 128}
DSA["TOPK"] = 2048
MAMBA2 = {"H": 64, "P": 64, "G": 8, "N": 128, "K": 4, "C": 128}
# family -> (weight dtype, state / KV dtype, framework asked, its block, the measured tier's label)
CASES = {
    "dsa": ("fp8_block", "fp8", "sglang", DSA, "measured:dsa sglang 0.5.14"),
    "mamba2": ("bf16", "fp32", "vllm", MAMBA2, "measured:mamba2 trtllm 1.3.0rc20 (scan: roofline)"),
}


@pytest.mark.parametrize("family", sorted(CASES))
def test_tiers_measured_on_its_gpu_transferred_to_another_nvidia_gpu_roofline_elsewhere(family):
    dtype, state, framework, block, label = CASES[family]
    shape = {"B": [1.0, 16.0], "S": 1.0, "KV": [2048.0, 8192.0], **block}
    tiers = {}
    for gpu in ("h200", "b200", "mi300x"):
        out = table_op_time(family, dtype, shape, load_catalog().resolve(gpu), state, framework)
        tiers[gpu] = str(np.asarray(out.tier, dtype=object).ravel()[0])
        assert np.all(np.isfinite(out.duration_us)) and np.all(out.duration_us > 0)
    assert tiers["h200"] == label
    assert tiers["b200"].startswith(f"transfer:{family} h200 {label.split()[1]}")
    assert tiers["mi300x"] == "roofline"  # another vendor's kernels: no NVIDIA table transfers


@pytest.mark.parametrize("family", sorted(CASES))
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_measured_times_are_monotone_in_sequence_length_and_never_below_the_floor(family, phase):
    """Along a decode batch's context (DSA) or size (Mamba2), or a prefill chunk's tokens, the measured
    time does not fall (within the tables' noise), and what time_ops keeps is at or above the speed of
    light."""
    dtype, state, framework, block, label = CASES[family]
    spec = load_catalog().resolve("h200")
    lengths = np.array([64.0, 256.0, 1024.0, 2048.0, 3072.0, 4096.0, 6144.0, 8192.0])
    if phase == "prefill":
        shape = {"B": 1.0, "S": lengths, "KV": lengths, **block}
    elif family == "dsa":
        shape = {"B": 8.0, "S": 1.0, "KV": lengths, **block}
    else:  # a Mamba2 decode step does not depend on the context: along the batch, to the table's 1024
        shape = {"B": lengths[:3], "S": 1.0, **block}
    out = table_op_time(family, dtype, shape, spec, state, framework)
    assert set(np.asarray(out.tier, dtype=object).ravel()) == {label}
    assert np.all(np.diff(out.duration_us) >= -0.05 * out.duration_us[:-1])  # the dense rows: +-5% noise
    line = OpLine(phase, "attention", family, dtype, shape, 1.0, kv_dtype=state)

    def op_time(family, dtype, shape, spec, kv_dtype=None):
        return table_op_time(family, dtype, shape, spec, kv_dtype, framework)

    time_ops([line], spec, op_time)
    assert np.all(line.each_us >= sol_time(family, dtype, shape, spec, state) - 1e-9)


def test_a_prefill_step_runs_the_dsa_projections_once_for_all_its_chunks():
    """Eight 1k chunks in one step: the module's per-token part at 8k tokens once (SGLang's measured
    batch-8 module is ~0.9 ms, as one 1k chunk's), not eight times; each chunk adds its attention."""
    dtype, state, framework, block, _ = CASES["dsa"]
    spec = load_catalog().resolve("h200")
    chunk = {"B": 1.0, "S": 1024.0, "KV": 1024.0, **block}
    parts = {
        op: table_op_time("dsa", dtype, {**chunk, "B": b, "op": op}, spec, state, framework).duration_us[0]
        for op, b in (("proj", 8.0), ("attn", 1.0), (None, 1.0))
    }
    step = parts["proj"] + 8 * parts["attn"]
    assert parts[None] < step < 2 * parts[None]  # vs 8 x one chunk's whole module before
