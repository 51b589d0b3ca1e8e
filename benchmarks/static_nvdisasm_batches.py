"""One ``nvdisasm`` call per cubin against the batches of ``static.elf_batch``: equal output, CPU each way.

Reads a folder of cubins (``benchmarks/static_phase_profile.py --save-cubins DIR`` keeps those the static
stage's sweep disassembled), disassembles each on its own and all of them through
``elf_batch.disassemble_many``, and prints the batch sizes, the CPU seconds of the nvdisasm processes each
way and the cubins whose functions differ (none expected: the JSON of every function equal)::

    PYTHONPATH=. python benchmarks/static_nvdisasm_batches.py DIR
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    from components.features.static.compile import nvdisasm_path
    from components.features.static.elf_batch import disassemble_many, parse_cubin, plan_batches
    from components.features.static.sass import run_nvdisasm

    nvdisasm = nvdisasm_path()
    cubins = [p.read_bytes() for p in sorted(args.folder.glob("*.cubin"))]
    batches = plan_batches([parse_cubin(c) for c in cubins])
    wall, cpu = time.perf_counter(), _children_cpu()
    single = [run_nvdisasm(c, nvdisasm) for c in cubins]
    single_wall, single_cpu = time.perf_counter() - wall, _children_cpu() - cpu
    wall, cpu = time.perf_counter(), _children_cpu()
    batched = disassemble_many(cubins, nvdisasm, workers=1)
    batch_wall, batch_cpu = time.perf_counter() - wall, _children_cpu() - cpu
    differ = [n for n, (a, b) in enumerate(zip(single, batched, strict=True)) if a != b]
    print(
        f"{len(cubins)} cubins, {sum(map(len, single))} functions; {len(batches)} batches: "
        f"{sorted((len(b) for b in batches), reverse=True)}"
    )
    print(f"one call per cubin: {single_wall:.1f} s wall, {single_cpu:.1f} s CPU")
    print(f"batched:            {batch_wall:.1f} s wall, {batch_cpu:.1f} s CPU (one process at a time)")
    print(f"cubins whose functions differ: {len(differ)} {differ[:10]}")


if __name__ == "__main__":
    main()
