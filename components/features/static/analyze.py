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

This module orchestrates one compile and its report; the parts live beside it in the package
(``components.features.static``'s docstring lists them).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from components.features.static.cache import cache_key, cache_load, cache_store
from components.features.static.compile import (
    DEFAULT_MEMORY_BYTES,
    DEFAULT_TIMEOUT_S,
    CompileError,
    build_options,
    check_arch,
    compile_arch,
    compile_to_cubin,
    cuda_include_dirs,
    nvdisasm_path,
)
from components.features.static.names import short_kernel_name
from components.features.static.options import AnalyzeOptions
from components.features.static.prefetch import collecting, sass_functions
from components.features.static.sass import analyze_function, parse_ptxas_log
from components.features.static.source import prepare_source


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
    # Vendor-specific figures (HIP: sgprs, agprs, wave_size, waves per SIMD, VALU/SALU/... counts)
    extra: dict[str, int] = field(default_factory=dict)
    # SASS loop nest in address order: {'start', 'end', 'parent', 'own': instruction classes whose
    # innermost loop it is} (static.sass.loop_nest); empty from caches written before it existed.
    loop_detail: list[dict] = field(default_factory=list)
    # FLOP per thread as Nsight Compute counts them (static.sass.FLOP_WEIGHTS): 'flop_fp32', ... and
    # 'loop_flop_fp32', ... inside loops; empty from older caches (the estimate then counts 2 per FP op).
    flops: dict[str, int] = field(default_factory=dict)

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
    requested_arch: str = ""  # the arch asked for, when NVRTC compiled for another (see arch_note)
    arch_note: str | None = None
    defines: dict[str, str] = field(default_factory=dict)  # -D macros the compile used (defaults + given)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StaticReport:
        body = dict(data)
        body["kernels"] = [KernelStatic(**k) for k in data["kernels"]]
        return cls(**body)


class NoKernelError(CompileError):
    """A source that compiled but holds no kernel to analyse; the message says why."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(name, "", "no kernel found")
        self.why = why
        self.args = (f"{name}: no kernel found: {why}",)

    def __str__(self) -> str:
        return str(self.args[0])


def _no_kernel_reason(source: str, prepared: Any, report: StaticReport) -> str:
    """Why a compiled source produced no kernel, in one sentence a user can act on."""
    if "__global__" not in prepared.text:
        if "__global__" in source:
            return (
                "its __global__ functions were removed with the host code (defined inside a host-only block?)"
            )
        return "the file defines no __global__ function (host code only?)"
    templates = sorted(
        set(
            re.findall(
                r"template\s*<[^{;]*?>\s*(?:static\s+)?__global__\s*(?:__launch_bounds__\s*\([^()]*\)\s*)?"
                r"[^(;{]*?\b([A-Za-z_]\w*)\s*\(",
                prepared.text,
                re.S,
            )
        )
    )
    if report.uninstantiated_templates:
        return (
            "template kernel launches "
            + ", ".join(report.uninstantiated_templates[:4])
            + " could not be instantiated (their template arguments name types or constants this file does "
            "not define; pass them with -D or add an explicit instantiation)"
        )
    if templates:
        return (
            "template kernel(s) " + ", ".join(templates[:4]) + " are never instantiated: no launch site "
            "k<...><<<...>>> with arguments this file defines was found; add one or an explicit "
            "instantiation "
            "such as 'template __global__ void " + templates[0] + "<float>(...);'"
        )
    return (
        "no __global__ function survived preprocessing: kernels declared through a macro (#define GLOBAL "
        "__global__) or compiled out by #if/#ifdef (pass the macros with -D)"
    )


def _build_report(
    cubin: bytes, log: str, lowered: dict[str, str], name: str, arch: str, source_id: str
) -> list[KernelStatic]:
    resources = parse_ptxas_log(log)
    if not any(res.entry for res in resources.values()):
        # Only entry functions become kernels below: a cubin without one (a host-only file, device helpers)
        # yields none whatever its SASS, so nvdisasm (~0.4 s CPU of start-up per call) is not run for it.
        return []
    instance_of = {v: k for k, v in lowered.items()}
    kernels: list[KernelStatic] = []
    for fn in sass_functions(cubin, nvdisasm_path()):
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
                loop_detail=sass.loop_detail,
                flops={**sass.flops, **{f"loop_{k}": v for k, v in sass.loop_flops.items()}},
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
    **options: Any,
) -> StaticReport:
    """Compile a CUDA program (host code is stripped, see static.source) and analyse its kernels.

    ``options`` are the keyword fields of :class:`~components.features.static.options.AnalyzeOptions`
    (path, source_id, defines, timeout_s, memory_bytes, use_cache, cache_dir). Results are cached under
    ``cache_dir`` (default ``<KERNELCAST_HOME>/cache/static``) unless ``use_cache`` is false.

    ``kernel`` keeps only kernels whose short name, instance or mangled name equals it (a
    LookupError lists the available ones). Raises CompileError with the NVRTC log on failure.
    """
    opts = AnalyzeOptions.of(options, DEFAULT_TIMEOUT_S, DEFAULT_MEMORY_BYTES)
    requested = check_arch(arch)
    arch, arch_note = compile_arch(requested)
    incs = tuple(Path(p) for p in include_dirs)
    prepared = prepare_source(source, opts.path, incs, dict(opts.defines or {}))
    if (
        kernel is not None
        and "<" in kernel
        and re.sub(r"\s+", "", kernel) not in {re.sub(r"\s+", "", e) for e in prepared.name_expressions}
    ):  # a template instance asked by name (k<float, 256>) is instantiated even if no launch site names it
        prepared.name_expressions = [*prepared.name_expressions, kernel]
    defines = {**prepared.default_defines, **dict(opts.defines or {})}
    flags = build_options(arch, cuda_include_dirs() + [p.resolve() for p in incs], defines)
    sid = opts.source_id or (Path(name).stem if name != "<string>" else "<string>")
    key = cache_key(prepared.text, prepared.name_expressions, flags, name)
    folder = opts.cache_folder()
    payload = cache_load(folder, key) if folder is not None else None
    if payload is not None and "error" in payload and payload["error"].get("pruned") != PRUNE_VERSION:
        payload = None
    cached = payload is not None
    if payload is None:
        payload = _compile_and_analyze(prepared, name, arch, sid, flags, opts.timeout_s, opts.memory_bytes)
        if folder is not None and not payload.get("transient") and not collecting():
            cache_store(folder, key, payload)
    if "error" in payload:
        err = payload["error"]
        raise CompileError(err["name"], err["log"], err["reason"], hint=_hint(prepared, err["log"]))
    report = StaticReport.from_dict(payload["report"])
    report.cached = cached
    report.source_id = sid
    report.requested_arch, report.arch_note, report.defines = requested, arch_note, defines
    if not report.kernels:
        raise NoKernelError(name, _no_kernel_reason(source, prepared, report))
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


def _hint(prepared: Any, log: str) -> str | None:
    """What a user can do about a failed compile: the include path or macros it lacked."""
    hints = []
    if prepared.missing_includes:
        hints.append(
            "include "
            + ", ".join(f'"{n}"' for n in prepared.missing_includes[:3])
            + " not found: pass its folder with -I"
        )
    undefined = re.findall(r'identifier "([A-Z][A-Z0-9_]*)" is undefined', log)
    if undefined:
        hints.append(
            "macro " + ", ".join(sorted(set(undefined))[:3]) + " undefined: pass it with -D NAME=VALUE"
        )
    if "#error" in log and prepared.required_macros:
        hints.append("the source requires -D " + " or ".join(prepared.required_macros[:3]))
    return "; ".join(hints) or None


MAX_SINGLE_TRIES = 12  # instantiations tried one by one after a failed joint compile


def _compiles(
    text: str, name: str, options: list[str], expr: str, timeout_s: float, memory_bytes: int
) -> bool:
    try:
        compile_to_cubin(text, name, options, [expr], timeout_s, memory_bytes)
    except CompileError:
        return False
    return True


PRUNE_VERSION = 1  # a cached failure from before host declarations were pruned (static.prune) is retried


def _compile_pruned(
    text: str, name: str, options: list[str], exprs: list[str], timeout_s: float, memory_bytes: int
) -> tuple[Any, str]:
    """Compile ``text``; when NVRTC refuses host declarations the extraction kept, compile again without
    them (static.prune), a few times at most. The result and the text compiled; the first error when
    pruning does not help."""
    from components.features.static.prune import MAX_PRUNES, prune_failing

    first: CompileError | None = None
    for _ in range(MAX_PRUNES + 1):
        try:
            return compile_to_cubin(text, name, options, exprs, timeout_s, memory_bytes), text
        except CompileError as exc:
            first = first or exc
            smaller = prune_failing(text, exc.log) if exc.reason == "compilation failed" else None
            if smaller is None or smaller == text:
                raise first from None
            text = smaller
    assert first is not None
    raise first


def _compile_and_analyze(
    prepared: Any, name: str, arch: str, sid: str, options: list[str], timeout_s: float, memory_bytes: int
) -> dict[str, Any]:
    started = time.perf_counter()
    exprs = list(prepared.name_expressions)
    text = prepared.text
    try:
        try:
            result, text = _compile_pruned(text, name, options, exprs, timeout_s, memory_bytes)
        except CompileError as first:
            if not exprs or first.reason != "compilation failed":
                raise
            # One harvested instantiation may not compile (a type the file lacks): keep those that
            # do, each tried alone (a few compiles, only on this path), and the plain kernels.
            result, text = _compile_pruned(text, name, options, [], timeout_s, memory_bytes)
            exprs = [
                e
                for e in exprs[:MAX_SINGLE_TRIES]
                if _compiles(text, name, options, e, timeout_s, memory_bytes)
            ]
            if exprs:
                result = compile_to_cubin(text, name, options, exprs, timeout_s, memory_bytes)
    except CompileError as exc:
        # Time/memory-limit failures may be load-dependent: do not cache them.
        return {
            "error": {"name": exc.name, "log": exc.log, "reason": exc.reason, "pruned": PRUNE_VERSION},
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
    *,
    build_defaults: bool = True,
    **kwargs: Any,
) -> StaticReport:
    """Analyse a .cu file; its folder is searched for quoted includes first.

    ``source_id`` defaults to the folder name for gpuFLOPBench-style ``<program>-cuda/`` folders
    and to the file stem otherwise. With ``build_defaults``, ``-D``/``-I`` flags of a Makefile or
    CMakeLists.txt beside the file (or one folder up) are used where the caller gave none
    (static.build); given ``defines`` win over them.
    """
    from components.features.static.build import build_file_defaults

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    if "source_id" not in kwargs:
        kwargs["source_id"] = path.parent.name if path.parent.name.endswith("-cuda") else path.stem
    includes = [Path(p) for p in include_dirs]
    if build_defaults:
        found = build_file_defaults(path)
        kwargs["defines"] = {**found.defines, **dict(kwargs.get("defines") or {})}
        includes += [d for d in found.include_dirs if d not in includes]
    return analyze_source(
        path.read_text(errors="replace"), arch, kernel, str(path), includes, path=path, **kwargs
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
        except NoKernelError as exc:
            if "__global__" in cu.read_text(errors="replace"):
                results.append(
                    exc
                )  # a host-only file (main.cu launching kernels defined elsewhere) is no failure
        except CompileError as exc:
            results.append(exc)
    return results
