"""The static stage's compiles on a subset, cold, with the code of a given checkout: CPU of the compile
subprocesses and every report (or compile error) as JSON, to compare two checkouts byte for byte.

Every STEP-th gpuFLOPBench ``*-cuda`` program folder through ``analyze_program`` with no cache. ``--served``
runs them inside ``compile_server.compile_servers()``, as the static stage does (checkouts that have it)::

    export KERNELCAST_HOME=$(mktemp -d)
    python benchmarks/static_sweep_compare.py --code /work/main --step 5 --out b.json
    python benchmarks/static_sweep_compare.py --code . --served --step 5 --out a.json
    cmp b.json a.json

Timings (``compile_seconds``) and the cache flag are left out of the JSON: they differ run to run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, required=True, help="checkout whose components/ is used")
    parser.add_argument("--step", type=int, default=5, help="every STEP-th *-cuda program folder (sorted)")
    parser.add_argument("--out", type=Path, required=True, help="JSON of the reports")
    parser.add_argument(
        "--served", action="store_true", help="inside compile_servers() (long-lived children)"
    )
    parser.add_argument("--arch", default="sm_90")
    args = parser.parse_args()
    code = args.code.resolve()
    sys.path.insert(0, str(code))
    analyze = importlib.import_module("components.features.static.analyze")
    if not analyze.__file__.startswith(str(code)):
        sys.exit(f"error: components imported from {analyze.__file__}, not {code}")
    from components.features.static.compile import CompileError
    from components.platform.config import get_settings

    root = (
        Path(get_settings().datasets_dir) / "gpuflopbench" / "src"
    ).resolve()  # one path from any checkout
    programs = sorted(p for p in root.iterdir() if p.name.endswith("-cuda"))[:: args.step]
    session = (
        importlib.import_module("components.features.static.compile_server").compile_servers()
        if args.served
        else contextlib.nullcontext()
    )
    started, before = time.perf_counter(), os.times()
    out: dict[str, list] = {}
    with session:  # closed before the CPU is read: a long-lived child's CPU counts once it has exited
        for program in programs:
            for result in analyze.analyze_program(program, args.arch, use_cache=False):
                if isinstance(result, CompileError):
                    out.setdefault(program.name, []).append({"error": result.reason, "message": str(result)})
                else:
                    report = result.to_dict()
                    report.pop("compile_seconds")
                    report.pop("cached")
                    out.setdefault(program.name, []).append(report)
    after = os.times()
    own = after.user - before.user + after.system - before.system
    children = after.children_user - before.children_user + after.children_system - before.children_system
    print(
        f"{code}: {len(programs)} programs, {sum(map(len, out.values()))} files: wall "
        f"{time.perf_counter() - started:.1f} s, CPU in-process {own:.1f} s, "
        f"in compile subprocesses {children:.1f} s"
    )
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
