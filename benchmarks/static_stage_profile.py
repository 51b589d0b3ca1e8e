"""Where the static stage's time goes, on a subset: every STEP-th gpuFLOPBench program folder through the
stage's per-program function (``components.features.static.table._program_reports``), under cProfile.

Prints wall time, CPU in this process and CPU in the compile subprocesses (NVRTC sandbox, nvdisasm), then the
functions by cumulative time. Run with a fresh ``KERNELCAST_HOME`` for a cold compile cache::

    KERNELCAST_HOME=$(mktemp -d) python benchmarks/static_stage_profile.py --step 40
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", type=int, default=40, help="every STEP-th program folder (sorted)")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--top", type=int, default=18, help="functions to list")
    args = parser.parse_args()
    from components.features.static.table import _program_reports
    from components.platform.config import get_settings

    source = Path(get_settings().datasets_dir) / "gpuflopbench" / "src"
    programs = sorted(p.name for p in source.iterdir() if p.is_dir())[:: args.step]
    started, before = time.perf_counter(), os.times()
    profile = cProfile.Profile()
    profile.enable()
    reports = failures = 0
    for program in programs:
        ok, failed = _program_reports(source / program, args.arch)
        reports, failures = reports + len(ok), failures + len(failed)
    profile.disable()
    wall, after = time.perf_counter() - started, os.times()
    own = (after.user - before.user) + (after.system - before.system)
    children = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    print(
        f"{len(programs)} programs, {reports} kernel reports, {failures} failures: wall {wall:.1f} s, "
        f"CPU in-process {own:.1f} s, CPU in compile subprocesses {children:.1f} s"
    )
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
