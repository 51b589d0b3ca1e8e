"""Where the static stage's time goes, per phase, on the whole stage as the pipeline runs it.

Runs ``components.features.stage.static_stage`` (``kernelcast features static-table --from-datasets``) with
timers around its phases -- reading the two sources, the CUDA sweep (NVRTC children and ``nvdisasm``), the HIP
sweep (clang, c++filt) -- and every compiler subprocess wrapped in GNU time to count its CPU. Prints wall
and CPU per phase and per tool (calls, CPU, mean). Run with a fresh ``KERNELCAST_HOME`` (a cold compile cache,
as a fresh clone has)::

    KERNELCAST_HOME=$(mktemp -d) PYTHONPATH=. python benchmarks/static_phase_profile.py OUT.parquet [--step N]

(``PYTHONPATH=.``: this checkout's code, not the venv's.) ``--save-cubins DIR`` keeps the cubins
the sweep disassembled (``benchmarks/static_nvdisasm_batches.py DIR`` compares one call per cubin with the
batches).

``--step N`` keeps every N-th gpuFLOPBench program (and every N-th HIP configuration) for a quick look.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

_ORIGINAL_RUN = subprocess.run
_LOCK = threading.Lock()
TOOLS: dict[str, list[float]] = defaultdict(list)  # tool -> CPU seconds per call


def _timed_run(args, *a, **kw):  # type: ignore[no-untyped-def]
    """subprocess.run under GNU time (its report to a file, so the tool's own output is untouched)."""
    if not isinstance(args, list | tuple) or not args:
        return _ORIGINAL_RUN(args, *a, **kw)
    with tempfile.NamedTemporaryFile(suffix=".time") as report:
        proc = _ORIGINAL_RUN(["/usr/bin/time", "-f", "%U %S", "-o", report.name, *args], *a, **kw)
        user, system = Path(report.name).read_text().split()[-2:]
    with _LOCK:
        TOOLS[Path(str(args[0])).name].append(float(user) + float(system))
    proc.args = args
    return proc


def _cpu() -> tuple[float, float]:
    t = os.times()
    return t.user + t.system, t.children_user + t.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--step", type=int, default=1)
    parser.add_argument("--save-cubins", type=Path, help="write every cubin the sweep disassembles here")
    args = parser.parse_args()
    from components.features import stage
    from components.features.static import hip_table, table
    from components.platform.config import get_settings

    subprocess.run = _timed_run
    phases: dict[str, dict[str, float]] = {}

    def timed(name, fn):  # type: ignore[no-untyped-def]
        def inner(*a, **kw):  # type: ignore[no-untyped-def]
            wall, (own, children) = time.perf_counter(), _cpu()
            try:
                return fn(*a, **kw)
            finally:
                own2, children2 = _cpu()
                phases[name] = {
                    "wall": time.perf_counter() - wall,
                    "cpu_own": own2 - own,
                    "cpu_children": children2 - children,
                }

        return inner

    if args.step > 1:
        real_build, real_hip = table.build_static_table, hip_table.build_hip_config_table

        def sub_build(kernels, *a, **kw):  # type: ignore[no-untyped-def]
            cuda = sorted(kernels["program"].dropna().unique())[:: args.step]
            return real_build(kernels[kernels["program"].isin(cuda)], *a, **kw)

        def sub_hip(measurements, *a, **kw):  # type: ignore[no-untyped-def]
            return real_hip(measurements.iloc[:: args.step], *a, **kw)

        table.build_static_table, hip_table.build_hip_config_table = sub_build, sub_hip
    if args.save_cubins:
        from components.features.static import elf_batch

        args.save_cubins.mkdir(parents=True, exist_ok=True)
        real_many = elf_batch.disassemble_many

        def saving(cubins, *a, **kw):  # type: ignore[no-untyped-def]
            for n, cubin in enumerate(cubins):
                (args.save_cubins / f"{n:04d}.cubin").write_bytes(cubin)
            return real_many(cubins, *a, **kw)

        elf_batch.disassemble_many = saving
    stage._static_tables = timed("read sources", stage._static_tables)
    table.build_static_table = timed("CUDA sweep (NVRTC + nvdisasm)", table.build_static_table)
    stage._hip_config_rows = timed("HIP sweep (clang)", stage._hip_config_rows)
    settings = get_settings()
    inputs = stage.StaticInputs(kernels_file=None, out_file=args.out, datasets_dir=settings.datasets_dir)
    result = timed("whole stage", stage.static_stage)(inputs)
    print(f"{result.kernels} kernels x {result.features} features -> {result.out_file}")
    for name, p in phases.items():
        print(
            f"{name:32s} wall {p['wall']:7.1f} s  CPU own {p['cpu_own']:6.1f} s  "
            f"children {p['cpu_children']:6.1f} s"
        )
    for tool, calls in sorted(TOOLS.items()):
        mean = sum(calls) / len(calls)
        print(f"  {tool:14s} {len(calls):4d} calls  CPU {sum(calls):6.1f} s  mean {mean:.3f} s")
    print(json.dumps({"phases": phases, "tools": {t: [len(c), sum(c)] for t, c in TOOLS.items()}}))


if __name__ == "__main__":
    main()
