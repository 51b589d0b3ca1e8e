"""AIConfigurator's measured GDN kernels (conv + gated delta rule per phase) against our ``gdn`` op's
speed-of-light time and the fixed-efficiency roofline that answers where no table reaches.

    cd TREE && PYTHONPATH=. python benchmarks/gdn_tables_vs_roofline.py

Prints per GPU, framework table and phase: the median measured / speed-of-light ratio (all rows, and rows
whose speed of light is above 20 us, out of the launch-latency regime) and the median relative error of
the roofline answer; then the transfer tier's error on the H200 with its own tables withheld: the H100's
table of the same framework, scaled by the speed-of-light ratio (what a GPU without a table gets).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from components.deployments.gdn_tables import gdn_table, measured_gdn_us
from components.deployments.ops import roofline_op_time, sol_time
from components.devices import load_catalog
from components.ingest.aiconfigurator import systems_dir
from components.platform.config import DEFAULT_DATASETS_DIR

TABLES = [
    ("h200_sxm", "sglang/0.5.14"),
    ("h200_sxm", "vllm/0.24.0"),
    ("h100_sxm", "sglang/0.5.14"),
    ("h100_sxm", "vllm/0.24.0"),
]  # the complete tables (both kernels of both phases)
KEYS = ["phase", "batch_size", "seq_len", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim", "d_conv"]


def main() -> None:
    root = systems_dir(DEFAULT_DATASETS_DIR / "aiconfigurator") / "data"
    catalog = load_catalog()
    for gpu, table in TABLES:
        df = pd.read_parquet(root / gpu / "linear_attention" / table / "gdn_perf.parquet")
        g = df.groupby(KEYS).agg(ms=("latency", "sum"), n=("latency", "size")).reset_index()
        g = g[g.n == 2]  # both kernels of the phase
        spec = catalog.resolve(gpu)
        cols = {
            "B": "batch_size",
            "S": "seq_len",
            "HK": "num_k_heads",
            "HV": "num_v_heads",
            "DK": "head_k_dim",
            "DV": "head_v_dim",
            "K": "d_conv",
        }
        shape = {k: g[c].to_numpy(float) for k, c in cols.items()}
        sol = sol_time("gdn", "bf16", shape, spec, "fp32")
        ours = roofline_op_time("gdn", "bf16", shape, spec, "fp32")
        meas = g.ms.to_numpy() * 1e3
        for phase in ("context", "generation"):
            m = (g.phase == phase).to_numpy()
            big = m & (sol > 20)
            print(
                f"{gpu} {table} {phase}: n={m.sum()} measured/sol median {np.median(meas[m] / sol[m]):.2f} "
                f"(sol > 20 us: n={big.sum()}, {np.median(meas[big] / sol[big]):.2f}); roofline answer's "
                f"median |error| {np.median(np.abs(ours[m] - meas[m]) / meas[m]):.0%}"
            )


def transfer_check() -> None:
    catalog = load_catalog()
    h100, h200 = catalog.resolve("h100-sxm"), catalog.resolve("h200")
    for framework in ("vllm", "sglang"):
        mine, source = gdn_table(str(DEFAULT_DATASETS_DIR), "h200", framework)
        ref, ref_source = gdn_table(str(DEFAULT_DATASETS_DIR), "h100-sxm", framework)
        shape = {
            "B": mine.batch_size.to_numpy(float),
            "S": mine.seq_len.to_numpy(float),
            "HK": mine.num_k_heads.to_numpy(float),
            "HV": mine.num_v_heads.to_numpy(float),
            "DK": mine.head_k_dim.to_numpy(float),
            "DV": mine.head_v_dim.to_numpy(float),
            "K": mine.d_conv.to_numpy(float),
        }
        scale = sol_time("gdn", "bf16", shape, h200, "fp32") / sol_time("gdn", "bf16", shape, h100, "fp32")
        pred = measured_gdn_us(ref, shape) * scale
        roofline = np.maximum(
            roofline_op_time("gdn", "bf16", shape, h200, "fp32"), sol_time("gdn", "bf16", shape, h200, "fp32")
        )
        truth = mine.latency.to_numpy()
        for phase in ("context", "generation"):
            # prefill: one sequence's chunk (what a serving step's GDN op asks; B > 1 is B times it)
            one = (mine.batch_size == 1).to_numpy() if phase == "context" else True
            m = (mine.phase == phase).to_numpy() & np.isfinite(pred) & one
            err = np.median(np.abs(pred[m] - truth[m]) / truth[m])
            roof = np.median(np.abs(roofline[m] - truth[m]) / truth[m])
            print(
                f"h200 {source} {phase} from h100 {ref_source} n={m.sum()} "
                f"transfer median |error| {err:.0%}, "
                f"the roofline's on the same rows {roof:.0%}"
            )


if __name__ == "__main__":
    main()
    transfer_check()
