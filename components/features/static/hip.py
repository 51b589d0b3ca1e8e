"""Static kernel features from HIP source, without an AMD GPU: clang (ROCm's HIP toolchain) -> AMDGPU ISA.

The HIP twin of ``static`` (NVRTC -> SASS), behind the same interface: :func:`analyze_hip_source`
returns the same ``StaticReport``/``KernelStatic`` (instruction classes, loops, registers = VGPRs,
shared bytes = LDS, spills, scratch stack, barriers), plus AMD-only figures in ``KernelStatic.extra``
(SGPRs, AGPRs, wave size, waves per SIMD the registers allow, VALU/SALU/VMEM/SMEM/LDS/matrix counts).

How (checked with Debian's ``hipcc`` 5.2.3 + ``rocm-device-libs``, clang 15): ``clang++ -x hip
--offload-arch=<gfx> --cuda-device-only --no-gpu-bundle-output -S`` writes the device code's
assembler text -- the ISA ``llvm-objdump -d`` would list from the unbundled code object, and the
code-object metadata ``llvm-readelf --notes`` would print -- in one step (~0.6 s for a small
kernel per architecture). The compile runs as a child process with the same time/memory limits as
the NVRTC one (static.compile). Results are cached by source, defines, architecture and compiler.

Architectures: the device libraries of ROCm 5.2 cover gfx900..gfx940 and gfx1010..gfx1036; a catalog
GPU whose ISA clang 15 does not know compiles for the nearest one it does, and the answer says which
(MI300 family gfx942 -> gfx940, MI350 gfx950 -> gfx940, RDNA3 gfx1100 -> gfx1030).

CUDA source on an AMD GPU goes through a HIP translation (:func:`cuda_to_hip`): the device code
static.source extracts (host code dropped), the CUDA headers mapped to their HIP twins and the
warp intrinsics' ``_sync`` forms mapped by macros; a source that needs what HIP lacks (inline PTX,
WMMA, CUB, libcu++) carries that reason instead.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from components.features.static.compile import CompileError
from components.features.static.hip_translate import cuda_to_hip, cuda_to_hip_whole, hip_source_text
from components.features.static.options import AnalyzeOptions

DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MEMORY_BYTES = 4 << 30
HIP_CACHE_VERSION = "static-hip-v1"
CLANG_ENV = "KERNELCAST_HIP_CLANG"
DEVICE_LIB_ENV = "KERNELCAST_HIP_DEVICE_LIBS"
INSTALL_HINT = "install the HIP compiler with `apt-get install hipcc rocm-device-libs` (Debian/Ubuntu)"

# ISAs Debian's ROCm 5.2 device libraries and clang 15 compile for (oclc_isa_version_*.bc).
SUPPORTED_ARCHS: tuple[str, ...] = (
    "gfx900",
    "gfx902",
    "gfx904",
    "gfx906",
    "gfx908",
    "gfx909",
    "gfx90a",
    "gfx90c",
    "gfx940",
    "gfx1010",
    "gfx1011",
    "gfx1012",
    "gfx1013",
    "gfx1030",
    "gfx1031",
    "gfx1032",
    "gfx1033",
    "gfx1034",
    "gfx1035",
    "gfx1036",
)
# An ISA clang 15 lacks -> the nearest one it knows (same family: same wave size, same matrix units).
NEAREST_ARCH: dict[str, str] = {
    "gfx941": "gfx940",
    "gfx942": "gfx940",
    "gfx950": "gfx940",
    "gfx1100": "gfx1030",
    "gfx1101": "gfx1030",
    "gfx1102": "gfx1030",
    "gfx1103": "gfx1030",
    "gfx1150": "gfx1030",
    "gfx1151": "gfx1030",
    "gfx1200": "gfx1030",
    "gfx1201": "gfx1030",
}
# The targets: MI100 (CDNA1), MI200 (CDNA2), MI300 (CDNA3), RDNA2.
TARGET_ARCHS: tuple[str, ...] = ("gfx908", "gfx90a", "gfx940", "gfx1030")


class HipToolchainMissing(CompileError):
    """No HIP compiler on this machine: the message names what to install."""

    def __init__(self, what: str) -> None:
        super().__init__("HIP", "", f"HIP compiler not found ({what}); {INSTALL_HINT}")
        self.args = (f"HIP compiler not found ({what}): {INSTALL_HINT}",)

    def __str__(self) -> str:
        return str(self.args[0])


# --------------------------------------------------------------------------- toolchain
@functools.lru_cache(maxsize=1)
def hip_toolchain() -> dict[str, str]:
    """{'clang', 'device_libs', 'include', 'cxxfilt', 'version'} of the installed HIP toolchain.

    Raises HipToolchainMissing naming the missing part (clang/hipcc, the device libraries, the HIP headers).
    """
    given = os.environ.get(CLANG_ENV)
    if given:  # an explicit compiler (a ROCm install elsewhere) must exist
        clang = given if Path(given).is_file() else None
    else:  # Debian's hipcc package drives clang++-15; without hipcc its HIP headers are absent too
        clang = (
            (shutil.which("clang++-15") or "/usr/lib/llvm-15/bin/clang++") if shutil.which("hipcc") else None
        )
    if not clang or not Path(clang).is_file():
        raise HipToolchainMissing(f"hipcc / clang++-15{f' ({CLANG_ENV}={given})' if given else ''}")
    libs = [
        os.environ.get(DEVICE_LIB_ENV, ""),
        "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode",
        "/usr/lib/amdgcn/bitcode",
        "/opt/rocm/amdgcn/bitcode",
    ]
    device_libs = next((d for d in libs if d and (Path(d) / "ockl.bc").is_file()), None)
    if device_libs is None:
        raise HipToolchainMissing("rocm-device-libs: no amdgcn/bitcode/ockl.bc")
    include = next(
        (d for d in ("/usr/include", "/opt/rocm/include") if (Path(d) / "hip" / "hip_runtime.h").is_file()),
        None,
    )
    if include is None:
        raise HipToolchainMissing(
            "HIP headers: no hip/hip_runtime.h (package libamdhip64-dev, pulled in by hipcc)"
        )
    bin_dir = Path(os.path.realpath(clang)).parent
    cxxfilt = shutil.which("llvm-cxxfilt-15") or str(bin_dir / "llvm-cxxfilt")
    version = subprocess.run([clang, "--version"], capture_output=True, text=True, timeout=30).stdout
    return {
        "clang": clang,
        "device_libs": device_libs,
        "include": include,
        "cxxfilt": cxxfilt,
        "version": version.splitlines()[0] if version else "unknown",
    }


def hip_available() -> bool:
    try:
        hip_toolchain()
    except HipToolchainMissing:
        return False
    return True


# --------------------------------------------------------------------------- architectures
def check_amd_arch(arch: str) -> str:
    """Normalise 'gfx90a'/'GFX942'/'gfx90a:xnack-' -> 'gfx90a'; reject what is no AMD ISA."""
    text = arch.strip().lower().split(":")[0]
    if not re.fullmatch(r"gfx\d{2,4}[a-f]?", text):
        raise ValueError(
            f"unknown AMD arch {arch!r}; expected an AMDGPU ISA such as gfx908, gfx90a, gfx942, gfx1030"
        )
    return text


def hip_compile_arch(arch: str) -> tuple[str, str | None]:
    """(the ISA clang compiles for, a note when it is not ``arch`` itself)."""
    norm = check_amd_arch(arch)
    if norm in SUPPORTED_ARCHS:
        return norm, None
    chosen = NEAREST_ARCH.get(norm)
    if chosen is None:  # nearest by family: RDNA (gfx10+) -> gfx1030, otherwise CDNA3
        chosen = "gfx1030" if len(norm) == 7 else "gfx940"
    return chosen, (
        f"{norm} is not known to the installed HIP compiler (clang 15, ROCm 5.2 device libraries); "
        f"ISA compiled for {chosen}, the nearest it supports"
    )


def hip_arch_for_device(spec: Any) -> tuple[str, str | None]:
    """(compile ISA, note) for a catalog AMD GPU: its gfx target (``compute_capability``), mapped."""
    chosen, note = hip_compile_arch(str(spec.compute_capability))
    return chosen, (f"{spec.name}: {note}" if note else None)


# --------------------------------------------------------------------------- compile
def build_hip_options(
    arch: str, include_dirs: Iterable[Path], defines: Mapping[str, str] | None = None
) -> list[str]:
    """clang flags: HIP device-only assembler text for one ISA, as hipcc would compile it (-O3, the
    same inlining flags hipcc passes), warnings off."""
    chain = hip_toolchain()
    opts = [
        "-x",
        "hip",
        "-std=c++17",
        f"--offload-arch={arch}",
        "--cuda-device-only",
        "--no-gpu-bundle-output",
        "-S",
        "-O3",
        "-w",
        "-mllvm",
        "-amdgpu-early-inline-all=true",
        "-mllvm",
        "-amdgpu-function-calls=false",
        "--rocm-path=/usr",
        f"--hip-device-lib-path={chain['device_libs']}",
    ]
    if chain["include"] != "/usr/include":  # /usr/include is on the default path (an -isystem breaks <cmath>)
        opts.append(f"-isystem{chain['include']}")
    opts += [f"-I{Path(d)}" for d in include_dirs]
    opts += [f"-D{k}={v}" if v != "" else f"-D{k}" for k, v in sorted((defines or {}).items())]
    return opts


def compile_to_asm(
    source: str,
    name: str,
    options: list[str],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
) -> str:
    """Compile ``source`` with clang in a limited child process; the assembler text, or CompileError."""
    from components.features.static.compile import limit_child
    from components.features.static.hip_pch import pch_args

    chain = hip_toolchain()
    with tempfile.TemporaryDirectory(prefix="kc-hip-") as tmp:
        src, out = Path(tmp) / "kernel.hip", Path(tmp) / "kernel.s"
        src.write_text(source)

        def run(extra: list[str]) -> subprocess.CompletedProcess:
            out.unlink(missing_ok=True)
            return subprocess.run(
                [chain["clang"], *options, *extra, str(src), "-o", str(out)],
                capture_output=True,
                timeout=timeout_s,
                cwd=tmp,
                preexec_fn=lambda: limit_child(memory_bytes, int(timeout_s) + 1),
            )

        try:
            # the runtime header precompiled inside the static stage's sweep (static.hip_pch); a compile that
            # fails with it is done again without, so a failure is the plain compile's
            extra = pch_args(chain["clang"], options, source, timeout_s)
            proc = run(extra)
            if extra and (proc.returncode != 0 or not out.is_file()):
                proc = run([])
        except subprocess.TimeoutExpired as exc:
            raise CompileError(
                name, f"clang did not finish within {timeout_s:g} s", "time limit exceeded"
            ) from exc
        log = proc.stderr.decode(errors="replace").replace(str(src), name)
        if proc.returncode != 0 or not out.is_file():
            if proc.returncode < 0 or "bad_alloc" in log or "out of memory" in log.lower():
                raise CompileError(name, log[-4000:], "compiler crashed or hit the memory limit")
            raise CompileError(name, log[-4000:])
        return out.read_text(errors="replace")


def _demangle(symbols: list[str]) -> dict[str, str]:
    if not symbols:
        return {}
    try:
        proc = subprocess.run(
            [hip_toolchain()["cxxfilt"]], input="\n".join(symbols), capture_output=True, text=True, timeout=30
        )
        lines = proc.stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(zip(symbols, lines, strict=False)) if len(lines) == len(symbols) else {}


def report_from_asm(asm: str, name: str, arch: str, source_id: str) -> list[Any]:
    """KernelStatic per kernel of the assembler text (device subroutines are not kernels)."""
    from components.features.static.amdgpu import (
        analyze_function,
        kernel_metadata,
        split_functions,
        waves_per_simd_by_registers,
    )
    from components.features.static.analyze import KernelStatic
    from components.features.static.names import kernel_instance, short_kernel_name

    meta = kernel_metadata(asm)
    functions = [f for f in split_functions(asm) if f.name in meta]
    demangled = _demangle([f.name for f in functions if "I" in f.name[2:]])
    kernels = []
    for fn in functions:
        md, isa = meta[fn.name], analyze_function(fn)
        vgprs, agprs = int(md.get(".vgpr_count", 0)), int(md.get(".agpr_count", 0) or 0)
        pretty = demangled.get(fn.name, "")
        extra = {
            "sgprs": int(md.get(".sgpr_count", 0)),
            "agprs": agprs,
            "wave_size": int(md.get(".wavefront_size", 64)),
            "waves_per_simd_by_registers": waves_per_simd_by_registers(arch, vgprs, agprs),
            "max_workgroup_size": int(md.get(".max_flat_workgroup_size", 1024)),
            **isa.amd,
        }
        kernels.append(
            KernelStatic(
                name=fn.name,
                short_name=short_kernel_name(fn.name),
                instance=kernel_instance(pretty) if "<" in pretty else None,
                registers=vgprs,
                shared_bytes=int(md.get(".group_segment_fixed_size", 0)),
                spills={
                    "store_bytes": 4 * int(md.get(".vgpr_spill_count", 0) or 0),
                    "load_bytes": 4 * int(md.get(".vgpr_spill_count", 0) or 0),
                },
                stack_bytes=int(md.get(".private_segment_fixed_size", 0)),
                barriers=isa.barriers,
                instructions=isa.instructions,
                loop_instructions=isa.loop_instructions,
                loops=isa.loops,
                extra=extra,
            )
        )
    kernels.sort(key=lambda k: k.name)
    return kernels


def _cache_key(text: str, options: list[str], name: str) -> str:
    from components.features.static.cache import cache_key

    return cache_key(text, [HIP_CACHE_VERSION, hip_toolchain()["version"]], options, name)


def analyze_hip_source(
    source: str,
    arch: str = "gfx90a",
    kernel: str | None = None,
    name: str = "<string>",
    include_dirs: Iterable[Path | str] = (),
    *,
    from_cuda: bool = False,
    **options: Any,
) -> Any:
    """Compile HIP source (or, with ``from_cuda``, CUDA source through :func:`cuda_to_hip`) for an AMD
    ISA and analyse its kernels: a ``static.StaticReport`` whose ``arch`` is the ISA compiled for.
    ``options`` are those of the CUDA analyser (:class:`~components.features.static.options.AnalyzeOptions`).

    Raises HipToolchainMissing (no compiler), CompileError (the compiler's log; reason 'no HIP
    translation' for CUDA that cannot be translated), NoKernelError, LookupError (``kernel`` absent).
    """
    opts = AnalyzeOptions.of(options, DEFAULT_TIMEOUT_S, DEFAULT_MEMORY_BYTES)
    path = opts.path
    requested = check_amd_arch(arch)
    chosen, arch_note = hip_compile_arch(requested)
    incs = [Path(p).resolve() for p in include_dirs] + ([path.parent.resolve()] if path else [])
    given = {k: str(v) for k, v in dict(opts.defines or {}).items()}
    if from_cuda:
        text, defaults = cuda_to_hip(source, path, tuple(incs), given)
        all_defines = {**defaults, **given}
    else:
        text, all_defines = hip_source_text(source), given
    flags = build_hip_options(chosen, incs, all_defines)
    sid = opts.source_id or (Path(name).stem.split(".")[0] if name != "<string>" else "<string>")
    payload, cached = _compiled(text, name, chosen, sid, flags, opts)
    if from_cuda and payload.get("error", {}).get("reason") == "compilation failed":
        # The extracted device code did not compile: try the whole program, host code and all.
        try:
            whole = cuda_to_hip_whole(source, path, tuple(incs))
        except CompileError:
            whole = None
        if whole is not None:
            second, again = _compiled(whole, name, chosen, sid, flags, opts)
            if "error" not in second:
                payload, cached = second, again
    return _report(payload, cached, name, sid, requested, arch_note, all_defines, kernel)


def _compiled(
    text: str,
    name: str,
    chosen: str,
    sid: str,
    flags: list[str],
    opts: AnalyzeOptions,
) -> tuple[dict[str, Any], bool]:
    """(payload: {'report'} or {'error'}, from the cache?) of one compile, cached unless transient."""
    from components.features.static.analyze import StaticReport
    from components.features.static.cache import cache_load, cache_store

    folder = opts.cache_folder()
    key = _cache_key(text, flags, name)
    payload = cache_load(folder, key) if folder is not None else None
    cached = payload is not None
    if payload is None:
        started = time.perf_counter()
        try:
            asm = compile_to_asm(text, name, flags, opts.timeout_s, opts.memory_bytes)
            kernels = report_from_asm(asm, name, chosen, sid)
            report = StaticReport(
                name=name,
                arch=chosen,
                source_id=sid,
                kernels=kernels,
                compile_seconds=round(time.perf_counter() - started, 3),
            )
            payload = {"report": report.to_dict()}
        except HipToolchainMissing:
            raise
        except CompileError as exc:
            payload = {
                "error": {"name": exc.name, "log": exc.log, "reason": exc.reason},
                "transient": exc.reason not in ("compilation failed", "no HIP translation"),
            }
        if folder is not None and not payload.get("transient"):
            cache_store(folder, key, payload)
    return payload, cached


def _report(
    payload: dict[str, Any],
    cached: bool,
    name: str,
    sid: str,
    requested: str,
    arch_note: str | None,
    all_defines: dict[str, str],
    kernel: str | None,
) -> Any:
    """The StaticReport of a compile's payload (CompileError / NoKernelError / LookupError otherwise)."""
    from components.features.static.analyze import NoKernelError, StaticReport

    if "error" in payload:
        err = payload["error"]
        raise CompileError(err["name"], err["log"], err["reason"])
    report = StaticReport.from_dict(payload["report"])
    report.cached, report.source_id = cached, sid
    report.requested_arch, report.arch_note, report.defines = requested, arch_note, all_defines
    if not report.kernels:
        raise NoKernelError(
            name,
            "the file defines no __global__ function that clang emitted (host code only, "
            "or template kernels never launched)",
        )
    if kernel is not None:
        kept = [
            k
            for k in report.kernels
            if kernel in (k.short_name, k.name, k.instance)
            or (k.instance or "") == re.sub(r"\s+", "", kernel)
        ]
        if not kept:
            available = sorted({k.short_name for k in report.kernels})
            raise LookupError(
                f"kernel {kernel!r} not found in {name}; available: {', '.join(available) or 'none'}"
            )
        report.kernels = kept
    return report


def analyze_hip_file(path: Path | str, arch: str = "gfx90a", kernel: str | None = None, **kwargs: Any) -> Any:
    """A ``.hip``/``.cu.hip`` file (its folder searched for quoted includes); a ``.cu`` file goes
    through the HIP translation."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    from_cuda = kwargs.pop("from_cuda", not path.name.endswith(".hip"))
    return analyze_hip_source(
        path.read_text(errors="replace"), arch, kernel, str(path), path=path, from_cuda=from_cuda, **kwargs
    )


__all__ = [
    "SUPPORTED_ARCHS",
    "TARGET_ARCHS",
    "HipToolchainMissing",
    "analyze_hip_file",
    "analyze_hip_source",
    "check_amd_arch",
    "hip_arch_for_device",
    "hip_available",
    "hip_compile_arch",
    "hip_toolchain",
]
