"""gpuFLOPBench CUDA kernels with recorded arguments: counted FLOPs vs Nsight Compute's (RTX 3080).

Usage (from the repository root):
  KERNELCAST_HOME=.kernelcast python benchmarks/gpuflopbench_flops.py --programs 40 [--skip 0] \
    [--out FILE.json]
Programs in name order, first ``--programs`` of them less the first ``--skip`` (a subset: each kernel is
compiled twice by NVRTC).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from components.common.atomic import atomic_write_text
    from components.evaluation.gpuflopbench_flops import score_flops

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parents[2] / "shared" / "datasets" / "gpuflopbench",
    )
    parser.add_argument("--programs", type=int, default=40)
    parser.add_argument("--skip", type=int, default=0, help="leave out the first N programs")
    parser.add_argument("--out", type=Path, default=None)
    ns = parser.parse_args()
    result = score_flops(ns.root, ns.programs, ns.skip)
    rows = result.pop("rows")
    print(json.dumps(result, indent=1))
    if ns.out is not None:
        atomic_write_text(ns.out, json.dumps({**result, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
