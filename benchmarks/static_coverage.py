"""How much of the corpora the static analyser compiles.

Sweeps gpuFLOPBench ``src/*-cuda`` programs (every .cu file of each) and benchmark_hub
``kernels/**/*.cu``, and prints: programs with >= 1 compiled file, kernels found, how many
profiled (program, kernelName) pairs of gpuFLOPBench get a static row, and failures grouped by
cause (first NVRTC error, normalised).

    python benchmarks/static_coverage.py [--arch sm_90] [--sample N] [--jobs 2] [--json out.json]

"no kernel found" files (a __global__ in the text, none compiled) count as failures with their
reason; files without any __global__ (host-only main.cu) are counted apart, not as failures.

Measured on the 377 gpuFLOPBench CUDA programs (584 .cu files, sm_90), issue 13 (before -> after):
files with >= 1 compiled kernel 268 -> 302; files that compiled to no kernel and exited 0
(templates never instantiated) 40 -> 0 (now 7 "no kernel found" errors saying why, and 118
host-only files set apart); programs with a kernel 246 -> 278; template instances compiled
from launch sites 175; profiled (program, kernelName) pairs with a static row 520 -> 590 of 855.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import re
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.features.static.analyze import NoKernelError, StaticReport, analyze_file
from components.features.static.compile import CompileError
from kernelcast.settings import get_settings


def failure_cause(exc: CompileError) -> str:
    """Group NVRTC failures: missing headers, host-only APIs, undefined identifiers, other."""
    if isinstance(exc, NoKernelError):
        return "no kernel found: " + re.sub(r"[A-Za-z_]\w*<[^;]*?>(, )?|'.*'", "", exc.why)[:70]
    if exc.reason != "compilation failed":
        return exc.reason
    log = exc.log
    m = re.search(r'cannot open source file "([^"]+)"', log)
    if m:
        return f"missing header <{m.group(1)}>"
    m = re.search(r'error: identifier "([^"]+)" is undefined', log)
    if m:
        name = m.group(1)
        return (
            f"undefined identifier ({'CUDA host API' if name.startswith('cuda') else 'host/library symbol'})"
        )
    m = re.search(r"error: namespace \"(\w+)\" has no member", log)
    if m:
        return f"namespace {m.group(1)}:: member missing (host library)"
    if "texture" in log and ("is undefined" in log or "texture<" in log):
        return "legacy texture references (removed in CUDA 12)"
    m = re.search(r"error: ([^\"\n]{0,60})", log)
    return f"other: {re.sub(r'[0-9]+', 'N', m.group(1)).strip()}" if m else "other"


def tuning_defaults(cu: Path) -> dict[str, str]:
    """benchmark_hub kernels take their tunable parameters as macros: use the T1 file's defaults."""
    kernels_dir = cu.parent if (cu.parent / "convolution_milo.json").exists() else cu.parent.parent
    for spec_path in kernels_dir.glob("*.json"):
        spec = json.loads(spec_path.read_text())
        kernel_file = spec.get("KernelSpecification", {}).get("KernelFile", "")
        if kernel_file.removesuffix(".hip") == str(cu.relative_to(kernels_dir)):
            params = spec["ConfigurationSpace"]["TuningParameters"]
            return {p["Name"]: str(p.get("Default", json.loads(p["Values"])[0])) for p in params}
    return {}


def analyze(path: Path, arch: str, source_id: str) -> tuple[Path, StaticReport | CompileError, float]:
    start = time.perf_counter()
    defines = tuning_defaults(path) if "benchmark_hub" in str(path) else {}
    try:
        res: StaticReport | CompileError | None = analyze_file(
            path, arch, source_id=source_id, defines=defines
        )
    except NoKernelError as exc:
        # A host-only file (main.cu launching kernels defined in another file) is no failure.
        res = exc if "__global__" in path.read_text(errors="replace") else None
    except CompileError as exc:
        res = exc
    return path, res, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument(
        "--sample", type=int, default=0, help="random sample of N gpuFLOPBench programs (0 = all)"
    )
    ap.add_argument("--jobs", type=int, default=2, help="parallel compiles (each in its own subprocess)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="write per-file results here")
    args = ap.parse_args()

    datasets = get_settings().datasets_dir
    gfb = datasets / "gpuflopbench"
    programs = sorted(p for p in (gfb / "src").glob("*-cuda") if p.is_dir())
    if args.sample:
        programs = sorted(random.Random(args.seed).sample(programs, min(args.sample, len(programs))))
    jobs: list[tuple[Path, str, str]] = [
        (cu, p.name, "gpuflopbench") for p in programs for cu in sorted(p.rglob("*.cu"))
    ]
    hub = datasets / "benchmark_hub" / "kernels"
    jobs += [(cu, cu.stem, "benchmark_hub") for cu in sorted(hub.rglob("*.cu"))]

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda j: (*analyze(j[0], args.arch, j[1]), j[1], j[2]), jobs))
    wall = time.perf_counter() - t0

    per_file: list[dict[str, object]] = []
    for corpus in ("gpuflopbench", "benchmark_hub"):
        host_only = sum(1 for r in results if r[4] == corpus and r[1] is None)
        rows = [r for r in results if r[4] == corpus and r[1] is not None]
        ok = [r for r in rows if isinstance(r[1], StaticReport)]
        bad = [r for r in rows if isinstance(r[1], CompileError)]
        progs_all = {r[3] for r in rows}
        progs_ok = {r[3] for r in ok}
        kernels = {(r[3], k.short_name) for r in ok for k in r[1].kernels}
        n_inst = sum(len(r[1].kernels) for r in ok)
        times = sorted(r[2] for r in rows if not (isinstance(r[1], StaticReport) and r[1].cached))
        print(
            f"== {corpus}: files {len(ok)}/{len(rows)} compile; programs with >=1 compiled file "
            f"{len(progs_ok)}/{len(progs_all)}; distinct kernels {len(kernels)} "
            f"({n_inst} compiled instances); "
            f"{host_only} host-only files (no __global__) left out"
        )
        templated = sum(1 for r in ok for k in r[1].kernels if k.instance)
        print(
            f"   template instances compiled from launch sites: {templated}; "
            f"launch sites left uninstantiated: {sum(len(r[1].uninstantiated_templates) for r in ok)}"
        )
        if times:
            print(
                f"   uncached per-file time: median {times[len(times) // 2]:.2f} s, "
                f"p90 {times[int(len(times) * 0.9)]:.2f} s, max {times[-1]:.2f} s"
            )
        causes = Counter(failure_cause(r[1]) for r in bad)
        for cause, n in causes.most_common(25):
            print(f"   {n:4d}  {cause}")
        if corpus == "gpuflopbench":
            csv_path = gfb / "cuda-profiling" / "profiling-data.csv"
            with csv_path.open() as fh:
                profiled = {
                    (r["targetName"], r["kernelName"])
                    for r in csv.DictReader(fh)
                    if r["targetName"] in progs_all
                }
            hit = profiled & kernels
            print(
                f"   profiled (program, kernelName) pairs in swept programs: {len(hit)}/{len(profiled)} "
                f"have a static row"
            )
        for path, res, secs, sid, _ in rows:
            entry: dict[str, object] = {"file": str(path), "source_id": sid, "seconds": round(secs, 3)}
            if isinstance(res, StaticReport):
                entry.update(
                    ok=True,
                    kernels=[k.instance or k.short_name for k in res.kernels],
                    uninstantiated=res.uninstantiated_templates,
                )
            else:
                entry.update(ok=False, cause=failure_cause(res), error=str(res))
            per_file.append(entry)
    print(f"wall {wall:.1f} s for {len(jobs)} files with {args.jobs} parallel compiles (arch {args.arch})")
    if args.json:
        args.json.write_text(json.dumps(per_file, indent=1))


if __name__ == "__main__":
    main()
