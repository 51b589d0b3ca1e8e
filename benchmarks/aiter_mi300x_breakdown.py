"""The gate's ``aiter-unseen-gpu`` entry at its caps: MI300X's GEMMs per dtype, the spec tier, the engine
(transfer tier, else spec) with the spec tier on the same rows, and the sibling rule from MI308X.

    PYTHONPATH=. KERNELCAST_HOME=... python benchmarks/aiter_mi300x_breakdown.py STORE_DIR DATASETS_DIR
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(store_dir: str, datasets: str) -> None:
    from components.evaluation.opmodel_bench import gate_entry

    started = time.perf_counter()
    entry = gate_entry("aiter-unseen-gpu", Path(store_dir), Path(datasets))
    print(json.dumps(entry["report"]["per_dtype"], indent=1, default=str))
    print(f"seconds {time.perf_counter() - started:.1f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
