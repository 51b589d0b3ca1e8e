"""Static kernel features from CUDA source, without a GPU: NVRTC -> cubin -> SASS (nvdisasm).

Per kernel: registers, static shared memory, spills, stack, barriers (ptxas ``-v`` report),
SASS instruction counts by class, loops (backward branches) and the instructions inside loops.

Kernel keys (for joining with measured data), built by :func:`kernel_key`:
- gpuFLOPBench: ``kernel_key(targetName, kernelName)``, e.g. ``"haccmk-cuda::haccmk_kernel"``;
  analyze every ``src/<targetName>/*.cu`` with ``source_id=targetName`` (:func:`analyze_program`
  does that). Template kernels compile once per launch site found in the program; each such row
  has ``instance`` = ``"testKernel<int>"``, to match the ``<...>`` part of the CSV's demangled
  ``Kernel Name`` (``kernel_instance(Kernel Name)`` normalises it the same way). Rows without an
  instance match any instantiation. The CSV's ``kernelName`` is the short, unqualified name,
  which is what :func:`short_kernel_name` derives from the mangled SASS symbol.
- benchmark_hub: ``source_id`` is the source file stem (``convolution_milo``, ``dedispersion``),
  kernel = the ``kernel_name`` field of the cache file (``convolution_kernel``). Tunable
  parameters are preprocessor macros: pass them as ``defines`` (e.g. ``{"block_size_x": "32"}``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from components.features.static_compile import (
    DEFAULT_MEMORY_BYTES,
    DEFAULT_TIMEOUT_S,
    CompileError,
    build_options,
    check_arch,
    compile_to_cubin,
    cuda_include_dirs,
    nvdisasm_path,
)
from components.features.static_sass import (
    INSTRUCTION_CLASSES,
    analyze_function,
    parse_ptxas_log,
    run_nvdisasm,
)
from components.features.static_source import prepare_source

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CompileError",
    "KernelStatic",
    "StaticReport",
    "analyze_source",
    "analyze_file",
    "analyze_program",
    "static_feature_frame",
    "kernel_key",
    "short_kernel_name",
    "kernel_instance",
    "INSTRUCTION_CLASSES",
]

# Bump when extraction, options or parsing change, so cached reports are recomputed.
CACHE_VERSION = "static-v1"


@dataclass
class KernelStatic:
    """Static features of one compiled kernel (one template instantiation)."""

    name: str  # mangled SASS symbol
    short_name: str  # unqualified name without template args, e.g. 'testKernel'
    instance: str | None  # 'testKernel<int>' when instantiated from a harvested launch site
    registers: int
    shared_bytes: int
    spills: dict[str, int]  # {'store_bytes', 'load_bytes'}
    stack_bytes: int
    barriers: int
    instructions: dict[str, int]  # by class + 'total'
    loop_instructions: dict[str, int]  # by class + 'total', instructions inside >= 1 loop
    loops: dict[str, int]  # {'count', 'max_depth'}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StaticReport:
    """Result of analysing one source: the kernels plus what extraction had to drop."""

    name: str
    arch: str
    source_id: str
    kernels: list[KernelStatic]
    dropped_functions: list[str] = field(default_factory=list)
    dropped_includes: list[str] = field(default_factory=list)
    uninstantiated_templates: list[str] = field(default_factory=list)
    compile_seconds: float = 0.0
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StaticReport:
        body = dict(data)
        body["kernels"] = [KernelStatic(**k) for k in data["kernels"]]
        return cls(**body)


def short_kernel_name(symbol: str) -> str:
    """Unqualified function name from an Itanium-mangled (or plain/demangled) symbol.

    '_Z4kernPf' -> 'kern'; '_ZN2ns4kernIfEEvPT_' -> 'kern'; 'void k<float>(float *)' -> 'k'.
    Enough for kernels (no operators, constructors or local entities).
    """
    if not symbol.startswith("_Z"):
        head = symbol.split("(")[0]
        head = re.sub(r"<.*>", "", head).strip()
        return head.split("::")[-1].split()[-1] if head else symbol
    s = symbol[2:]
    i = 1 if s.startswith("L") else 0
    nested = i < len(s) and s[i] == "N"
    if nested:
        i += 1
        while i < len(s) and s[i] in "rVK":
            i += 1
    last = ""
    while i < len(s):
        if s[i].isdigit():
            j = i
            while j < len(s) and s[j].isdigit():
                j += 1
            n = int(s[i:j])
            last = s[j : j + n]
            i = j + n
            if not nested:
                break
        elif s[i] == "I":  # template args: skip to the matching E
            depth, i = 1, i + 1
            while i < len(s) and depth:
                if s[i] == "L":  # literal L<type><value>E: its digits are a value, not a length
                    i = s.find("E", i) + 1 or len(s)
                    continue
                if s[i].isdigit():
                    j = i
                    while j < len(s) and s[j].isdigit():
                        j += 1
                    i = j + int(s[i:j])
                    continue
                depth += s[i] in "INX"
                depth -= s[i] == "E"
                i += 1
            if not nested:
                break
        elif s[i] == "S":  # substitution (S_, S0_, St...)
            i += (
                2
                if i + 1 < len(s) and s[i + 1] in "tabsio"
                else s.find("_", i) + 1 - i
                if "_" in s[i:]
                else 1
            )
        elif s[i] == "E":
            break
        else:
            i += 1
    return last or symbol


def kernel_instance(demangled: str) -> str:
    """'void hmax<__half2>(const T1 *, ...)' -> 'hmax<__half2>' (whitespace-normalised)."""
    head = demangled.split("(")[0].strip()
    head = re.sub(r"^(?:[\w:]+\s+)+(?=[\w:]+\s*(<|$))", "", head)  # drop return type
    head = (
        head.split("::")[-1]
        if "<" not in head
        else head[head.rfind("::", 0, head.find("<")) + 2 if "::" in head[: head.find("<")] else 0 :]
    )
    return re.sub(r"\s+", "", head)


def kernel_key(source_id: str, kernel_name: str) -> str:
    """Join key '<source_id>::<short kernel name>' (mangled, demangled or short names accepted)."""
    return f"{source_id}::{short_kernel_name(kernel_name)}"


def _cache_root() -> Path:
    from components.config import get_settings

    return get_settings().cache_dir / "static"


def _cache_load(key: str) -> dict[str, Any] | None:
    path = _cache_root() / f"{key}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _cache_store(key: str, payload: dict[str, Any]) -> None:
    """Atomic write (temp file + rename) so parallel sweeps never see a half-written entry."""
    from components.atomic import atomic_write_text

    atomic_write_text(_cache_root() / f"{key}.json", json.dumps(payload))


def _build_report(
    cubin: bytes, log: str, lowered: dict[str, str], name: str, arch: str, source_id: str
) -> list[KernelStatic]:
    resources = parse_ptxas_log(log)
    instance_of = {v: k for k, v in lowered.items()}
    kernels: list[KernelStatic] = []
    for fn in run_nvdisasm(cubin, nvdisasm_path()):
        symbol = fn.get("function-name", "")
        res = resources.get(symbol)
        if res is None or not res.entry:
            continue  # non-inlined device subroutines are not kernels
        sass = analyze_function(fn)
        ins = dict(sass.instructions, total=sass.total)
        in_loop = dict(sass.loop_instructions, total=sum(sass.loop_instructions.values()))
        inst = instance_of.get(symbol)
        kernels.append(
            KernelStatic(
                name=symbol,
                short_name=short_kernel_name(symbol),
                instance=re.sub(r"\s+", "", inst) if inst else None,
                registers=res.registers,
                shared_bytes=res.shared_bytes,
                spills={"store_bytes": res.spill_store_bytes, "load_bytes": res.spill_load_bytes},
                stack_bytes=res.stack_bytes,
                barriers=res.barriers,
                instructions=ins,
                loop_instructions=in_loop,
                loops=sass.loops,
            )
        )
    kernels.sort(key=lambda k: k.name)
    return kernels


def analyze_source(
    source: str,
    arch: str = "sm_90",
    kernel: str | None = None,
    name: str = "<string>",
    include_dirs: Iterable[Path | str] = (),
    *,
    path: Path | None = None,
    source_id: str | None = None,
    defines: Mapping[str, str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    use_cache: bool = True,
) -> StaticReport:
    """Compile a CUDA program (host code is stripped, see static_source) and analyse its kernels.

    ``kernel`` keeps only kernels whose short name, instance or mangled name equals it (a
    LookupError lists the available ones). Raises CompileError with the NVRTC log on failure.
    """
    arch = check_arch(arch)
    incs = tuple(Path(p) for p in include_dirs)
    prepared = prepare_source(source, path, incs)
    options = build_options(arch, cuda_include_dirs() + [p.resolve() for p in incs], dict(defines or {}))
    sid = source_id or (Path(name).stem if name != "<string>" else "<string>")
    key = hashlib.sha256(
        json.dumps(
            [CACHE_VERSION, prepared.text, prepared.name_expressions, options, name], sort_keys=True
        ).encode()
    ).hexdigest()
    payload = _cache_load(key) if use_cache else None
    cached = payload is not None
    if payload is None:
        payload = _compile_and_analyze(prepared, name, arch, sid, options, timeout_s, memory_bytes)
        if use_cache and not payload.get("transient"):
            _cache_store(key, payload)
    if "error" in payload:
        err = payload["error"]
        raise CompileError(err["name"], err["log"], err["reason"])
    report = StaticReport.from_dict(payload["report"])
    report.cached = cached
    report.source_id = sid
    if kernel is not None:
        report.kernels = [
            k
            for k in report.kernels
            if kernel in (k.short_name, k.name, k.instance)
            or (k.instance or "") == re.sub(r"\s+", "", kernel)
        ]
        if not report.kernels:
            available = sorted({k.short_name for k in StaticReport.from_dict(payload["report"]).kernels})
            raise LookupError(
                f"kernel {kernel!r} not found in {name}; available: {', '.join(available) or 'none'}"
            )
    return report


def _compile_and_analyze(
    prepared: Any, name: str, arch: str, sid: str, options: list[str], timeout_s: float, memory_bytes: int
) -> dict[str, Any]:
    started = time.perf_counter()
    exprs = list(prepared.name_expressions)
    try:
        try:
            result = compile_to_cubin(prepared.text, name, options, exprs, timeout_s, memory_bytes)
        except CompileError as first:
            if not exprs or first.reason != "compilation failed":
                raise
            # A harvested launch site may name host-only template arguments; fall back to
            # compiling the non-template kernels only.
            exprs = []
            result = compile_to_cubin(prepared.text, name, options, [], timeout_s, memory_bytes)
    except CompileError as exc:
        # Time/memory-limit failures may be load-dependent: do not cache them.
        return {
            "error": {"name": exc.name, "log": exc.log, "reason": exc.reason},
            "transient": exc.reason != "compilation failed",
        }
    kernels = _build_report(result.cubin, result.log, result.lowered_names, name, arch, sid)
    instantiated = {k.instance for k in kernels if k.instance}
    report = StaticReport(
        name=name,
        arch=arch,
        source_id=sid,
        kernels=kernels,
        dropped_functions=prepared.dropped_functions,
        dropped_includes=prepared.dropped_includes,
        uninstantiated_templates=[
            e for e in prepared.name_expressions if re.sub(r"\s+", "", e) not in instantiated
        ],
        compile_seconds=round(time.perf_counter() - started, 3),
    )
    return {"report": report.to_dict()}


def analyze_file(
    path: Path | str,
    arch: str = "sm_90",
    kernel: str | None = None,
    include_dirs: Iterable[Path | str] = (),
    **kwargs: Any,
) -> StaticReport:
    """Analyse a .cu file; its folder is searched for quoted includes first.

    ``source_id`` defaults to the folder name for gpuFLOPBench-style ``<program>-cuda/`` folders
    and to the file stem otherwise.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    if "source_id" not in kwargs:
        kwargs["source_id"] = path.parent.name if path.parent.name.endswith("-cuda") else path.stem
    return analyze_source(
        path.read_text(errors="replace"), arch, kernel, str(path), include_dirs, path=path, **kwargs
    )


def analyze_program(
    folder: Path | str, arch: str = "sm_90", **kwargs: Any
) -> list[StaticReport | CompileError]:
    """Every .cu file of a gpuFLOPBench program folder (kernels may live in any of them)."""
    folder = Path(folder)
    results: list[StaticReport | CompileError] = []
    for cu in sorted(folder.rglob("*.cu")):
        try:
            results.append(analyze_file(cu, arch, source_id=folder.name, **kwargs))
        except CompileError as exc:
            results.append(exc)
    return results


def launch_features(kernel: KernelStatic, grid: tuple[int, ...], block: tuple[int, ...]) -> dict[str, float]:
    """Static counts scaled by a launch: warps launched and per-block register/shared demand."""
    import math

    threads_per_block = math.prod(block)
    blocks = math.prod(grid)
    warps = blocks * math.ceil(threads_per_block / 32)
    return {
        "s_threads_per_block": threads_per_block,
        "s_blocks": blocks,
        "s_warps": warps,
        "s_regs_per_block": kernel.registers * threads_per_block,
        "s_warp_instructions": kernel.instructions["total"] * warps,  # one pass, loops not unrolled
    }


def static_feature_frame(
    reports: Iterable[StaticReport],
    launches: Mapping[str, tuple[tuple[int, ...], tuple[int, ...]]] | None = None,
) -> pd.DataFrame:
    """One row per compiled kernel with ``s_*`` feature columns.

    Key columns: ``kernel_key`` (see module doc), ``source_id``, ``kernel`` (short name),
    ``instance`` (template instantiation or None), ``symbol`` (mangled), ``arch``. Instruction
    counts also appear as fractions of the total (``s_frac_<class>``). ``launches`` maps a
    kernel_key to ``(grid, block)`` to add launch-scaled columns.
    """
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for report in reports:
        for k in report.kernels:
            key = kernel_key(report.source_id, k.short_name)
            total = max(k.instructions.get("total", 0), 1)
            row: dict[str, Any] = {
                "kernel_key": key,
                "source_id": report.source_id,
                "kernel": k.short_name,
                "instance": k.instance,
                "symbol": k.name,
                "arch": report.arch,
                "s_registers": k.registers,
                "s_shared_bytes": k.shared_bytes,
                "s_stack_bytes": k.stack_bytes,
                "s_spill_store_bytes": k.spills["store_bytes"],
                "s_spill_load_bytes": k.spills["load_bytes"],
                "s_barriers": k.barriers,
                "s_loops": k.loops["count"],
                "s_loop_depth": k.loops["max_depth"],
                "s_total": k.instructions.get("total", 0),
                "s_loop_total": k.loop_instructions.get("total", 0),
            }
            for cls in INSTRUCTION_CLASSES:
                row[f"s_{cls}"] = k.instructions.get(cls, 0)
                row[f"s_loop_{cls}"] = k.loop_instructions.get(cls, 0)
                row[f"s_frac_{cls}"] = k.instructions.get(cls, 0) / total
            if launches and key in launches:
                grid, block = launches[key]
                row.update(launch_features(k, grid, block))
            rows.append(row)
    return pd.DataFrame(rows)
