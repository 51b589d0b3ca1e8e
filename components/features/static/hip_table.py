"""HIP static features for the datasets: benchmark_hub's HIP tuning configurations (one compile per
configuration, its tuning parameters as -D macros) and the HIP coverage of gpuFLOPBench's CUDA programs.

benchmark_hub measures one kernel under thousands of tuning configurations; the AMD GPU's rows
(W6600, gfx1032) ran the ``.cu.hip`` source. Each configuration compiles in ~0.6 s, so all of them
(4362 convolution + 11130 dedispersion) would take hours on a small box: :func:`sample_configs`
picks a deterministic, hash-chosen share (``HIP_CONFIG_SHARE``), and compiles are cached by
source, defines and architecture, so a rerun costs seconds.

The ``s_*`` columns are the same as the CUDA static table's (static.frames) plus AMD occupancy:
``s_waves_per_cu`` and ``s_occupancy`` for the configuration's block size on the row's GPU.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

# Share of benchmark_hub's HIP configurations compiled (hash-chosen): 1% = ~160 of 15492, ~2 min once on a
# quiet core (~0.7 s a compile), cached after.
HIP_CONFIG_SHARE = 0.01
# benchmark_hub cache folder -> (HIP source under kernels/, kernel name)
BENCHMARK_HUB_HIP: dict[str, tuple[str, str]] = {
    "convolution_milo": ("kernels/convolution_milo.cu.hip", "convolution_kernel"),
    "dedispersion_milo": ("kernels/dedisp_milo/dedispersion.cu.hip", "dedispersion_kernel"),
}


def config_defines(params_json: str) -> dict[str, str]:
    """A measurement's tuning parameters as -D macros (``problem_size`` is no macro of these kernels)."""
    params = json.loads(params_json)
    return {
        k: str(int(v) if isinstance(v, bool) else v)
        for k, v in sorted(params.items())
        if k != "problem_size" and isinstance(v, (int, float, bool))
    }


def config_id(params_json: str) -> str:
    """Short id of a tuning configuration (the feature table carries it as ``config_id``)."""
    return hashlib.sha256(str(params_json).encode()).hexdigest()[:16]


def config_unit(program: str, config: str, salt: str = "amd-source") -> float:
    """A configuration's place in [0, 1) (by its ``config_id``): the same on every run and in every table."""
    return int(hashlib.sha256(f"{salt}|{program}|{config}".encode()).hexdigest()[:12], 16) / float(1 << 48)


def sampled_config_ids(configs: Iterable[tuple[str, str]], share: float | None) -> set[tuple[str, str]]:
    """(program, config_id) pairs in the sample: those whose :func:`config_unit` is below ``share``
    (None keeps all). A threshold, not a top-N, so a table with fewer rows (validation quarantined
    some) draws the same configurations as the static stage did."""
    return {(p, c) for p, c in set(configs) if share is None or config_unit(p, c) < share}


def sample_configs(configs: Iterable[tuple[str, str]], share: float | None) -> list[tuple[str, str]]:
    """(program, params_json) pairs whose configuration is in the sample, sorted."""
    return sorted((p, q) for p, q in set(configs) if share is None or config_unit(p, config_id(q)) < share)


def compile_config(
    datasets_dir: Path, program: str, params_json: str, arch: str, cache_dir: Path | None = None
) -> Any:
    """The HIP static report of one benchmark_hub configuration (the tuned kernel only)."""
    from components.features.static.hip import analyze_hip_source

    rel, kernel = BENCHMARK_HUB_HIP[program]
    path = datasets_dir / "benchmark_hub" / rel
    text, defines = kernel_tuner_source(path.read_text(errors="replace"), config_defines(params_json))
    return analyze_hip_source(
        text, arch, kernel, str(path), path=path, defines=defines, source_id=program, cache_dir=cache_dir
    )


def kernel_tuner_source(text: str, defines: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The source as Kernel Tuner compiles it: a ``loop_unroll_factor_*`` parameter of 0 removes its
    ``#pragma unroll <name>`` line (the compiler decides; clang rejects ``#pragma unroll 0``)."""
    import re

    out = dict(defines)
    for name, value in defines.items():
        if name.startswith("loop_unroll_factor") and value == "0":
            text = re.sub(rf"^[ \t]*#[ \t]*pragma[ \t]+unroll[ \t]+{name}\b.*$", "", text, flags=re.M)
            del out[name]
    return text, out


def _block(params_json: str) -> int:
    params = json.loads(params_json)
    return int(
        math.prod(int(params.get(k, 1) or 1) for k in ("block_size_x", "block_size_y", "block_size_z"))
    )


def config_feature_row(report: Any, params_json: str, spec: Any) -> dict[str, Any]:
    """``s_*`` features of one compiled configuration on one GPU (static counts + its occupancy there)."""
    from components.features.static.amdgpu import occupancy
    from components.features.static.frames import static_feature_frame

    frame = static_feature_frame([report])
    row = {c: frame.iloc[0][c] for c in frame.columns if c.startswith("s_")}
    k = report.kernels[0]
    occ = occupancy(
        report.arch, k.registers, int(k.extra.get("agprs", 0)), k.shared_bytes, _block(params_json), spec
    )
    row.update(
        s_waves_per_cu=occ["waves_per_cu"],
        s_occupancy=occ["occupancy"],
        s_sgprs=k.extra.get("sgprs", 0),
        s_valu=k.extra.get("valu", 0),
        s_salu=k.extra.get("salu", 0),
        s_lds_ops=k.extra.get("lds", 0),
    )
    return row


def _shared_isa(arch: str) -> str:
    """RDNA2's gfx1030..gfx1036 are one instruction set (they differ in cache/CU counts): one compile
    serves all."""
    return "gfx1030" if arch.startswith("gfx103") else arch


def build_hip_config_table(
    measurements: pd.DataFrame,
    kernels: pd.DataFrame,
    catalog: Any,
    datasets_dir: Path,
    share: float | None = HIP_CONFIG_SHARE,
    archs: Mapping[str, str] | None = None,
    cache_dir: Path | None = None,
    workers: int = 1,
) -> tuple[pd.DataFrame, dict[str, int]]:
    """(one row per (kernel_id, params_json, device_id) of benchmark_hub with s_* columns, coverage).

    Every row of a sampled configuration gets features, whichever GPU measured it: the HIP source
    compiled for the GPU's own ISA on AMD GPUs and, for NVIDIA rows, for ``archs['nvidia']``
    (default gfx1030) -- the same code description on every GPU, so a model fit on NVIDIA rows can
    read the AMD ones; occupancy is always the row GPU's own.
    """
    from concurrent.futures import ThreadPoolExecutor

    from components.features.static.compile import CompileError
    from components.features.static.hip import hip_arch_for_device

    archs = dict(archs or {})
    rows = measurements[measurements["source"] == "benchmark_hub"][["kernel_id", "params_json", "device_id"]]
    if rows.empty or "program" not in kernels.columns:  # no benchmark_hub rows ingested: nothing to compile
        return pd.DataFrame(), {"skipped": "no benchmark_hub HIP configurations among the measurements"}
    programs = kernels.set_index("kernel_id")["program"]
    rows = rows.assign(program=rows["kernel_id"].map(programs)).dropna(subset=["program"])
    rows = rows[rows["program"].isin(list(BENCHMARK_HUB_HIP))].drop_duplicates(
        ["kernel_id", "params_json", "device_id"]
    )
    specs = {d: catalog.get(d) for d in rows["device_id"].unique()}
    # The sample is drawn from the configurations an AMD GPU ran (the HIP rows), the same draw the
    # amd-source split makes; every GPU's row of a drawn configuration gets its features.
    on_amd = rows["device_id"].map(lambda d: specs[d].vendor == "amd")
    chosen = set(
        sample_configs(zip(rows.loc[on_amd, "program"], rows.loc[on_amd, "params_json"], strict=True), share)
    )
    rows = rows[[(p, q) in chosen for p, q in zip(rows["program"], rows["params_json"], strict=True)]]
    arch_of = {
        d: _shared_isa(hip_arch_for_device(s)[0] if s.vendor == "amd" else archs.get("nvidia", "gfx1030"))
        for d, s in specs.items()
    }
    jobs = sorted(
        {
            (p, q, arch_of[d])
            for p, q, d in zip(rows["program"], rows["params_json"], rows["device_id"], strict=True)
        }
    )
    coverage: Counter[str] = Counter(configs=len(chosen), compiles=len(jobs))

    def run(job: tuple[str, str, str]) -> tuple[tuple[str, str, str], Any]:
        try:
            return job, compile_config(datasets_dir, job[0], job[1], job[2], cache_dir)
        except CompileError as exc:
            return job, exc

    from components.features.static.hip_pch import header_pch

    with header_pch(), ThreadPoolExecutor(max_workers=workers) as pool:  # the runtime header parsed once
        reports = dict(pool.map(run, jobs))
    out = []
    for kernel_id, params, device, program in rows[
        ["kernel_id", "params_json", "device_id", "program"]
    ].itertuples(index=False):
        report = reports[(program, params, arch_of[device])]
        if isinstance(report, Exception):
            coverage[f"failed:{getattr(report, 'reason', 'error')}"] += 1
            continue
        coverage["rows_with_static"] += 1
        out.append(
            {
                "kernel_id": kernel_id,
                "params_json": params,
                "device_id": device,
                **config_feature_row(report, params, specs[device]),
            }
        )
    coverage["compile_failures"] = sum(isinstance(r, Exception) for r in reports.values())
    return pd.DataFrame(out), dict(coverage)


def gpuflopbench_hip_coverage(
    src_root: Path,
    archs: Sequence[str],
    programs: Sequence[str] | None = None,
    cache_dir: Path | None = None,
    on_file: Any = None,
) -> dict[str, Any]:
    """Which gpuFLOPBench CUDA files compile to AMDGPU ISA through the HIP translation, per arch.

    A file is compiled for the first arch; front-end failures (translation, a missing header, a
    type error) do not depend on the ISA, so they are that file's reason for every arch, and only
    files that compiled are compiled for the other archs. Returns counts and reasons per file.
    """
    from components.features.static.analyze import NoKernelError
    from components.features.static.build import build_file_defaults
    from components.features.static.compile import CompileError
    from components.features.static.hip import analyze_hip_file

    folders = sorted(p for p in src_root.iterdir() if p.is_dir() and p.name.endswith("-cuda"))
    if programs is not None:  # in the order given (a hash order makes any prefix a fair sample)
        by_name = {f.name: f for f in folders}
        folders = [by_name[p] for p in programs if p in by_name]
    results: dict[str, dict[str, str]] = {}
    for folder in folders:
        for cu in sorted(folder.rglob("*.cu")):
            if "__global__" not in cu.read_text(errors="replace"):
                continue  # host-only file (kernels live in another file)
            found = build_file_defaults(cu)
            outcome: dict[str, str] = {}
            for arch in archs:
                if outcome and next(iter(outcome.values())) != "ok":
                    outcome[arch] = next(iter(outcome.values()))
                    continue
                try:
                    analyze_hip_file(
                        cu,
                        arch,
                        defines=found.defines,
                        include_dirs=found.include_dirs,
                        source_id=folder.name,
                        from_cuda=True,
                        cache_dir=cache_dir,
                    )
                    outcome[arch] = "ok"
                except NoKernelError:
                    outcome[arch] = "no kernel emitted"
                except CompileError as exc:
                    outcome[arch] = f"{exc.reason}: {_first_error(exc.log)}"
            results[f"{folder.name}/{cu.relative_to(folder)}"] = outcome
            if on_file is not None:
                on_file(results)
    return coverage_summary(results, archs, len(folders))


def coverage_summary(
    results: Mapping[str, Mapping[str, str]], archs: Sequence[str], programs: int
) -> dict[str, Any]:
    """Counts per arch (ok / reason kind) of per-file outcomes."""
    per_arch = {
        a: Counter("ok" if o[a] == "ok" else o[a].split(":")[0] for o in results.values()) for a in archs
    }
    return {
        "files": len(results),
        "programs": programs,
        "per_arch": {a: dict(c) for a, c in per_arch.items()},
        "results": dict(results),
    }


def _first_error(log: str) -> str:
    line = next(
        (ln for ln in log.splitlines() if "error" in ln), log.strip().splitlines()[0] if log.strip() else ""
    )
    return line.split("error:", 1)[-1].strip()[:160]


__all__ = [
    "BENCHMARK_HUB_HIP",
    "HIP_CONFIG_SHARE",
    "build_hip_config_table",
    "compile_config",
    "config_defines",
    "config_id",
    "gpuflopbench_hip_coverage",
    "sample_configs",
    "sampled_config_ids",
]
