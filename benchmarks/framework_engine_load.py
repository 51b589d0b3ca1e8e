"""CPU seconds a new process spends answering from each serving framework's kernels (docs/rank-llm-speed.md).

    KERNELCAST_HOME=<a COPY of a state> PYTHONPATH=. python benchmarks/framework_engine_load.py

Loads the champion's op engine as the CLI does, then asks three frameworks' engines (``for_framework``) for
GEMM and attention raw answers on H100 and H200; prints the load and answer CPU seconds and the answers'
sum (equal on two trees: the same answers).
"""

from __future__ import annotations

import time

import numpy as np


def main() -> None:
    c0 = time.process_time()
    from components.devices.catalog import load_catalog
    from components.opmodel.loading import engine_for
    from components.serving.models import load_model

    engine = engine_for(load_model("models:/kernelcast@champion").predictor)
    catalog = load_catalog()
    c1 = time.process_time()
    gemm = {"M": np.array([1.0, 64, 512, 4096]), "N": np.full(4, 8192.0), "K": np.full(4, 8192.0)}
    attention = {
        k: np.array([v]) for k, v in {"B": 8, "S": 1, "KV": 4096, "H": 64, "HKV": 8, "D": 128}.items()
    }
    out = []
    for framework in ("vllm", "sglang", "trtllm"):
        fw = engine.for_framework(framework)
        for gpu in ("h100-sxm", "h200"):
            out.append(fw.raw_predict("gemm", "bf16", gemm, catalog.get(gpu)).duration_us)
            out.append(fw.raw_predict("attention", "bf16", attention, catalog.get(gpu)).duration_us)
    c2 = time.process_time()
    print(f"load {c1 - c0:.2f} CPU-s; answers {c2 - c1:.2f} CPU-s; sum {np.concatenate(out).sum()!r}")


if __name__ == "__main__":
    main()
