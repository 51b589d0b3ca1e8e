"""CUDA source as HIP for the AMD static analysis (``components.features.static.hip``): CUDA headers mapped to
their HIP twins, a prelude for the rest, and a clear reason for what has no translation (inline PTX, WMMA,
CUB, libcu++, cuRAND, async-copy pipelines)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from components.features.static.compile import CompileError

# CUDA headers kernels include -> HIP twins; headers with no HIP twin in ROCm 5.2 -> why.
_HEADER_MAP: dict[str, str] = {
    "cuda_runtime.h": "hip/hip_runtime.h",
    "cuda.h": "hip/hip_runtime.h",
    "cuda_fp16.h": "hip/hip_fp16.h",
    "cuda_fp16.hpp": "hip/hip_fp16.h",
    "cuda_bf16.h": "hip/hip_bfloat16.h",
    "cooperative_groups.h": "hip/hip_cooperative_groups.h",
    "cuComplex.h": "hip/hip_complex.h",
    "math_constants.h": "",
    "device_launch_parameters.h": "",
    "sm_60_atomic_functions.h": "",
    "sm_20_intrinsics.h": "",
}
_UNTRANSLATABLE: tuple[tuple[str, str], ...] = (
    (r"\basm\s*(volatile\s*)?\(", "inline PTX assembly (asm) has no AMDGPU translation"),
    (r"\bwmma::|#\s*include\s*<mma\.h>", "WMMA (mma.h) tensor-core API has no HIP 5.2 translation"),
    (r"#\s*include\s*<cub/", "CUB (hipCUB is not installed)"),
    (r"#\s*include\s*<cuda/", "libcu++ (cuda/...) has no HIP translation"),
    (r"#\s*include\s*<curand", "cuRAND device API (hipRAND is not installed)"),
    (r"#\s*include\s*<cuda_(pipeline|awbarrier)", "CUDA async-copy pipeline has no HIP translation"),
    (
        r"#\s*include\s*<cooperative_groups/",
        "cooperative_groups sub-headers (reduce/memcpy_async) are not in HIP 5.2",
    ),
    (r"\b__nv_|\b__cvta_|\bcuda::", "CUDA-only intrinsics (__nv_*, __cvta_*, cuda::)"),
)
HIP_PRELUDE = r"""#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <stdint.h>
#include <limits.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <assert.h>
/* kernelcast CUDA->HIP shim: the _sync warp intrinsics (HIP 5.2 has the mask-less forms) */
#define __shfl_sync(mask, ...) __shfl(__VA_ARGS__)
#define __shfl_up_sync(mask, ...) __shfl_up(__VA_ARGS__)
#define __shfl_down_sync(mask, ...) __shfl_down(__VA_ARGS__)
#define __shfl_xor_sync(mask, ...) __shfl_xor(__VA_ARGS__)
#define __ballot_sync(mask, p) __ballot(p)
#define __any_sync(mask, p) __any(p)
#define __all_sync(mask, p) __all(p)
#define __activemask() __ballot(1)
#define __syncwarp(...) __builtin_amdgcn_wave_barrier()
#define __ldg(p) (*(p))
#define cudaStream_t hipStream_t
#define cudaError_t hipError_t
#ifndef CUDART_PI_F
#define CUDART_PI_F 3.141592654f
#define CUDART_PI 3.1415926535897931
#define CUDART_INF_F __int_as_float(0x7f800000)
#define CUDART_NAN_F __int_as_float(0x7fffffff)
#endif
"""


def untranslatable_reason(source: str) -> str | None:
    """Why a CUDA source cannot go through the HIP translation, or None."""
    for pattern, why in _UNTRANSLATABLE:
        found = re.search(pattern + r"\w*", source)
        if found:
            return f"{why}: '{found.group(0).strip()}'"
    return None


def cuda_to_hip(
    source: str,
    path: Path | None = None,
    include_dirs: tuple[Path, ...] = (),
    defines: Mapping[str, str] | None = None,
) -> tuple[str, dict[str, str]]:
    """(HIP device source, default defines) from a CUDA program; raises CompileError when untranslatable.

    Host code is dropped as for NVRTC (static.source); template kernels launched in host code are
    instantiated by taking their address (``name<args>``), which makes clang emit them.
    """
    from components.features.static.source import LEGACY_SHUFFLE_SHIM, PRELUDE, STD_INT_SHIM, prepare_source

    name = str(path) if path else "question.cu"
    prepared = prepare_source(source, path, include_dirs, dict(defines or {}))
    # NVRTC's stand-ins are not HIP's: it has the mask-less shuffles and <cstdint> itself
    text = prepared.text.removeprefix(PRELUDE).replace(LEGACY_SHUFFLE_SHIM, "").replace(STD_INT_SHIM, "")
    why = untranslatable_reason(text)
    if why:
        raise CompileError(name, why, "no HIP translation")

    def header(match: re.Match[str]) -> str:
        target = _HEADER_MAP.get(match.group(1).strip())
        return f"#include <{target}>" if target else f"/* kc: {match.group(1)} (CUDA-only, dropped) */"

    text = re.sub(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', header, text, flags=re.M)
    text = re.sub(r"\bcuda(?=[A-Z]\w*\b)", "hip", text)
    instances = "".join(
        f"\nstatic void* __kc_instance_{i} = (void*)&{expr};"
        for i, expr in enumerate(prepared.name_expressions)
    )
    return HIP_PRELUDE + "#line 1\n" + text + instances + "\n", dict(prepared.default_defines)


def cuda_to_hip_whole(source: str, path: Path | None = None, include_dirs: tuple[Path, ...] = ()) -> str:
    """The whole CUDA program (host code kept) as HIP: clang compiles host code with the real C++
    library, so where extracting the device code failed (a kernel using a host-side type, a
    ``std::`` helper) the whole file may still compile. Quoted headers are inlined so the renaming
    reaches them; the CUDA runtime API is renamed to HIP's (``cudaMalloc`` -> ``hipMalloc``)."""
    from components.features.static.source import PreparedSource, inline_includes

    seen: set[Path] = {path.resolve()} if path else set()
    text = inline_includes(source, path.parent if path else None, include_dirs, PreparedSource(text=""), seen)
    text = re.sub(r"/\* kc: dropped <([^>]+)> \*/", r"#include <\1>", text)  # system headers: clang has them
    why = untranslatable_reason(text)
    if why:
        raise CompileError(str(path or "question.cu"), why, "no HIP translation")

    def header(match: re.Match[str]) -> str:
        name = match.group(1).strip()
        if name not in _HEADER_MAP:
            return match.group(0)
        return (
            f"#include <{_HEADER_MAP[name]}>"
            if _HEADER_MAP[name]
            else f"/* kc: {name} (CUDA-only, dropped) */"
        )

    text = re.sub(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', header, text, flags=re.M)
    text = re.sub(r"\bcuda(?=[A-Z]\w*\b)", "hip", text)
    return HIP_PRELUDE + "#line 1\n" + text + "\n"


def hip_source_text(source: str) -> str:
    """A HIP source as compiled: the runtime header first (harmless when the file includes it too),
    so a kernel cut out of its file (the editor extension sends those) still has its builtins."""
    return "#include <hip/hip_runtime.h>\n#line 1\n" + source
