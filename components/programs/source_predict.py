"""Answer a CUDA/HIP-source question: runtime, bound pipe and roofline class of its kernel(s) on GPUs.

AMD GPUs: the HIP compiler (components.features.static.hip) compiles the source to the GPU's AMDGPU
ISA -- CUDA source through the HIP translation, NVIDIA SASS standing in (the note says why) only when
it does not translate or no HIP compiler is installed (a HIP source then is a one-line error naming
it). NVIDIA GPUs: NVRTC, HIP source through a small CUDA shim (HIP on NVIDIA is CUDA).

The source is compiled, never run: host code is stripped and NVRTC compiles the device code in a
sandboxed subprocess with time and memory limits (components.features.static.compile); the SASS
instruction mix, the launch and each GPU's spec give a roofline estimate per kernel
(components.models.cuda_estimate). The roofline class comes from the class model trained on
gpuFLOPBench's bolet train side (components.models.roofline_class) when one is saved, else from the
estimate's bound pipe.

One answer per GPU. With ``launch["kernel"]`` the answer is that kernel's; otherwise a source with
one kernel answers for it, and a source with several answers for all of them launched once each
with the same grid and block (the note says so), ``breakdown`` listing each kernel.
"""

from __future__ import annotations

import json
import math
from typing import Any

from components.common.json_object import json_object
from components.physics.bounds import busiest_on_side, class_of_bound
from components.programs.errors import ProgramError

LANGUAGES: tuple[str, ...] = ("cuda", "hip")
LAUNCH_FIELDS: tuple[str, ...] = ("grid", "block", "kernel", "defines", "shared_bytes", "args")
COMPILE_TIMEOUT_S = 60.0
COMPILE_MEMORY_BYTES = 4 << 30
MAX_SOURCE_CHARS = 1_000_000
MODEL_VERSION = "static-roofline"
# Spread of measured / estimated runtime over gpuFLOPBench's bolet train side (416 compiled CUDA
# kernels, RTX 3080): the 5th and 95th percentiles of the ratio after the median scaling. Wide,
# honestly: loop trip counts are not in the SASS.
INTERVAL_LOW, INTERVAL_HIGH = 0.1, 800.0
# When every loop's trip count is known (or there are none): the interval runs from the roofline of the
# counted work up to this factor above the estimate -- the 95th percentile of measured / estimated
# runtime over the 17 gpuFLOPBench kernels (RTX 3080, first 40 CUDA programs with recorded
# arguments) whose counts were all known (benchmarks/gpuflopbench_flops.py --programs 40).
INTERVAL_HIGH_KNOWN = 5.6


def _check_inputs(source: Any, language: Any, launch: Any) -> tuple[str, dict[str, Any]]:
    if not isinstance(source, str) or not source.strip():
        raise ProgramError("source: empty; give the CUDA text of at least one __global__ kernel")
    if len(source) > MAX_SOURCE_CHARS:
        raise ProgramError(f"source: {len(source)} characters; at most {MAX_SOURCE_CHARS}")
    lang = str(language or "").strip().lower()
    if lang not in LANGUAGES:
        raise ProgramError(f"language: {language!r}; expected one of {', '.join(LANGUAGES)}")
    expected = 'expected an object such as {"grid": [256], "block": [256]}'
    launch = json_object(launch, "launch", ProgramError, LAUNCH_FIELDS, expected)
    defines = launch.get("defines") or {}
    if not isinstance(defines, dict) or not all(isinstance(k, str) and k.isidentifier() for k in defines):
        raise ProgramError('launch defines: expected an object of macro names to values, e.g. {"N": "1024"}')
    return lang, launch


def _compile(source: str, arch: str, defines: dict[str, str], kernel: str | None) -> Any:
    """The SASS report of CUDA source."""
    from components.features.static.analyze import analyze_source

    return _analysed(analyze_source, source, arch, kernel, "question.cu", defines)


def _compile_hip(source: str, arch: str, defines: dict[str, str], kernel: str | None, from_cuda: bool) -> Any:
    """The AMDGPU report of HIP source (or of CUDA source through the HIP translation)."""
    from components.features.static.hip import analyze_hip_source

    name = "question.cu" if from_cuda else "question.hip"
    return _analysed(analyze_hip_source, source, arch, kernel, name, defines, from_cuda=from_cuda)


def _analysed(
    analyse: Any, source: str, arch: str, kernel: str | None, name: str, defines: dict[str, str], **extra: Any
) -> Any:
    """``analyse``'s report of the question's source, its failures as one ProgramError each."""
    from components.features.static.analyze import NoKernelError
    from components.features.static.compile import CompileError
    from components.features.static.hip import HipToolchainMissing

    try:
        return analyse(
            source,
            arch,
            kernel,
            name,
            defines={k: str(v) for k, v in defines.items()},
            timeout_s=COMPILE_TIMEOUT_S,
            memory_bytes=COMPILE_MEMORY_BYTES,
            **extra,
        )
    except HipToolchainMissing as exc:
        raise ProgramError(f"source: {exc}") from None
    except NoKernelError as exc:
        raise ProgramError(f"source: {exc.why}") from None
    except CompileError as exc:
        raise ProgramError(f"source: {str(exc).replace(name + ': ', '', 1)}") from None
    except LookupError as exc:
        raise ProgramError(f"launch kernel: {exc.args[0] if exc.args else exc}") from None


HIP_ON_NVIDIA_SHIM = r"""
#define __shfl(v, ...) __shfl_sync(0xffffffffu, v, __VA_ARGS__)
#define __shfl_up(v, ...) __shfl_up_sync(0xffffffffu, v, __VA_ARGS__)
#define __shfl_down(v, ...) __shfl_down_sync(0xffffffffu, v, __VA_ARGS__)
#define __shfl_xor(v, ...) __shfl_xor_sync(0xffffffffu, v, __VA_ARGS__)
#define __ballot(p) __ballot_sync(0xffffffffu, p)
#define __any(p) __any_sync(0xffffffffu, p)
#define __all(p) __all_sync(0xffffffffu, p)
#define hipThreadIdx_x threadIdx.x
#define hipThreadIdx_y threadIdx.y
#define hipThreadIdx_z threadIdx.z
#define hipBlockIdx_x blockIdx.x
#define hipBlockIdx_y blockIdx.y
#define hipBlockIdx_z blockIdx.z
#define hipBlockDim_x blockDim.x
#define hipBlockDim_y blockDim.y
#define hipBlockDim_z blockDim.z
#define hipGridDim_x gridDim.x
#define hipGridDim_y gridDim.y
#define hipGridDim_z gridDim.z
#line 1
"""


def _report_for(
    source: str, lang: str, launch: dict[str, Any], spec: Any, reports: dict[tuple[str, str], Any]
) -> tuple[Any, str | None]:
    """(static report, note) for one GPU: AMD GPUs get AMDGPU ISA from the HIP compiler (CUDA source
    through the HIP translation); NVIDIA GPUs get SASS from NVRTC (HIP source through a CUDA shim)."""
    from components.features.static.compile import arch_for_device

    defines, kernel = launch.get("defines") or {}, launch.get("kernel")
    if getattr(spec, "vendor", "nvidia") == "amd":
        from components.features.static.hip import hip_arch_for_device, hip_available

        arch, arch_note = hip_arch_for_device(spec)
        if lang == "hip" or hip_available():
            key = ("hip-" + lang, arch)
            if key not in reports:
                try:
                    reports[key] = _compile_hip(source, arch, defines, kernel, from_cuda=lang == "cuda")
                except ProgramError as exc:
                    if lang == "hip":
                        raise
                    reports[key] = exc  # CUDA that does not translate: NVIDIA SASS stands in (below)
            report = reports[key]
            if not isinstance(report, ProgramError):
                notes = [
                    f"AMDGPU {report.arch} ISA from the HIP compiler"
                    + (" (CUDA source put through the HIP translation)" if lang == "cuda" else ""),
                    arch_note,
                ]
                return report, "; ".join(n for n in notes if n)
            fallback = f"CUDA source not put through HIP ({str(report).removeprefix('source: ')})"
        else:
            fallback = "no HIP compiler on this server (hipcc / rocm-device-libs)"
        arch, arch_note = arch_for_device(spec)
        arch_note = f"{fallback}; {arch_note}"
    else:
        arch, arch_note = arch_for_device(spec)
    key = ("cuda", arch)
    if key not in reports:
        text = HIP_ON_NVIDIA_SHIM + source if lang == "hip" else source
        reports[key] = _compile(text, arch, defines, kernel)
    if lang == "hip":
        arch_note = "; ".join(n for n in ("HIP source compiled as CUDA for this NVIDIA GPU", arch_note) if n)
    return reports[key], arch_note


def _class_model() -> Any:
    try:
        from components.models.roofline_class import load_default_model

        return load_default_model()
    except Exception:
        return None


def predict_source(
    source: str, language: str, launch: dict, dtype: str | None, specs: list[Any], predictor: Any
) -> list[dict[str, Any]]:
    """One answer dict per spec (keys of the shared answer schema); raises ProgramError.

    ``predictor`` (the op-level model) is not used for source questions yet: kernels in source
    have no op shape its features need; the answer's ``model_version`` says what answered.
    """
    from components.features.static.uniform import fold_uniform_branches
    from components.models.cuda_estimate import counted_instructions, estimate_kernel, launch_dims
    from components.programs.source_loops import check_arg_names, check_args

    _, launch = _check_inputs(source, language, launch)
    args = check_args(launch.get("args"))
    try:
        grid, block = launch_dims(launch)
    except ValueError as exc:
        raise ProgramError(str(exc)) from None
    if not specs:
        raise ProgramError("devices: none given")
    lang = str(language).strip().lower()
    # the side of a branch on a given argument that no thread takes is not counted (static.uniform)
    source, folded = fold_uniform_branches(source, args, launch.get("defines") or {})
    reports: dict[tuple[str, str], Any] = {}
    # The class model the predictor carries (a tabular fit with gpuFLOPBench rows), else a saved one.
    classifier = getattr(predictor, "class_model", None) or _class_model()
    answers = []
    for spec in specs:
        report, arch_note = _report_for(source, lang, launch, spec, reports)
        if not answers:
            check_arg_names(source, report.kernels, args)
        if folded:
            arch_note = "; ".join(
                n for n in (arch_note, "uniform branches on given arguments: " + ", ".join(folded)) if n
            )
        if report.arch.startswith("gfx"):
            arch_note = "; ".join(n for n in (arch_note, _occupancy_note(report, block, spec)) if n)
        counts = _loop_counts(source, lang, launch, report, args, grid, block, reports)
        estimates = [
            (
                k,
                estimate_kernel(
                    k.instance or k.short_name,
                    *counted_instructions(k),
                    grid,
                    block,
                    spec,
                    dtype,
                    dynamic=c.dynamic,
                ),
            )
            for k, c in zip(report.kernels, counts, strict=True)
        ]
        answers.append(
            _answer(
                estimates, counts, spec, arch_note, classifier, grid, block, len(report.kernels) > 1, source
            )
        )
    return answers


def _loop_counts(
    source: str,
    lang: str,
    launch: dict[str, Any],
    report: Any,
    args: dict[str, float],
    grid: tuple,
    block: tuple,
    reports: dict[tuple[str, str], Any],
) -> list[Any]:
    """How each kernel's loops are counted: from the source through a loop-pinned NVRTC compile
    (components.programs.source_loops); AMDGPU ISA keeps the plain assumption, saying so."""
    from components.features.static.loops import Known, pin_loops
    from components.models.cuda_estimate import LOOP_TRIPS
    from components.programs.source_loops import LoopCount, count_kernel

    if report.arch.startswith("gfx"):
        why = f"loop trips not read from AMDGPU ISA yet: loop bodies assumed {LOOP_TRIPS:g} runs"
        return [
            LoopCount(k.instance or k.short_name, why=why if k.loops.get("count", 0) else None)
            for k in report.kernels
        ]
    text = HIP_ON_NVIDIA_SHIM + source if lang == "hip" else source
    pinned: dict[str, Any] = {}
    if any(k.loops.get("count", 0) for k in report.kernels):
        key = ("cuda-pinned", report.arch)
        if key not in reports:
            try:
                reports[key] = _compile(
                    pin_loops(text), report.arch, launch.get("defines") or {}, launch.get("kernel")
                )
            except ProgramError:
                reports[key] = None
        pinned = {k.name: k for k in (reports[key].kernels if reports[key] is not None else [])}
    known = Known(dict(report.defines), args, tuple(grid), tuple(block))
    stripped = _guard_stripped(text, launch, report, known, reports)
    return [count_kernel(text, k, pinned.get(k.name), known, stripped.get(k.name)) for k in report.kernels]


def _guard_stripped(
    text: str, launch: dict[str, Any], report: Any, known: Any, reports: dict[tuple[str, str], Any]
) -> dict[str, Any]:
    """The kernels compiled once more without their lane-guarded branches (static.guards), by name;
    empty when no kernel has one (no second compile)."""
    from components.features.static.guards import lane_guards, strip_lane_guards

    guards = [g for k in report.kernels for g in lane_guards(text, k.short_name, known)]
    if not guards:
        return {}
    key = ("cuda-guards-stripped", report.arch)
    if key not in reports:
        try:
            unique = list({g.paren: g for g in guards}.values())
            reports[key] = _compile(
                strip_lane_guards(text, unique),
                report.arch,
                launch.get("defines") or {},
                launch.get("kernel"),
            )
        except ProgramError:
            reports[key] = None
    return {k.name: k for k in (reports[key].kernels if reports[key] is not None else [])}


def _occupancy_note(report: Any, block: tuple, spec: Any) -> str | None:
    """Registers, LDS and resident waves per CU of the main kernel on this AMD GPU, for this block."""
    from components.features.static.amdgpu import occupancy

    if not report.kernels:
        return None
    k = report.kernels[0]
    occ = occupancy(
        report.arch, k.registers, int(k.extra.get("agprs", 0)), k.shared_bytes, math.prod(block), spec
    )
    return (
        f"{k.short_name}: {k.registers} VGPRs, {k.extra.get('sgprs', 0)} SGPRs, {k.shared_bytes} B LDS, "
        f"wave{k.extra.get('wave_size', spec.warp_size)}; {occ['waves_per_cu']:.0f} waves/CU resident "
        f"({occ['occupancy']:.0%}, limited by {occ['limiter']})"
    )


def _kernel_bound(
    classifier: Any, kernel: Any, estimate: Any, spec: Any, grid: tuple, block: tuple, source: str
) -> str:
    """The kernel's bound pipe: the static estimate's, moved to the busiest pipe of the side the learned
    classifier names when it disagrees (the classifier is the better judge of the side, the estimate of the
    pipes within it), so that the class derived from the bound is the classifier's. A launch-bound kernel
    stays launch-bound: too little work for either side to matter."""
    if classifier is None or estimate.bound_pipe == "launch":
        return estimate.bound_pipe
    try:
        side = str(classifier.predict_kernel(kernel, grid, block, spec, source, "cuda"))
    except Exception:
        return estimate.bound_pipe
    if side == class_of_bound(estimate.bound_pipe):
        return estimate.bound_pipe
    return busiest_on_side(estimate.times_us, side) or estimate.bound_pipe


def _interval_note(known: bool) -> str:
    """Where the interval comes from: counted work bounds it below when every trip count is known."""
    if known:
        return (
            f"interval: the roofline of the counted work up to {INTERVAL_HIGH_KNOWN:g}x the estimate "
            "(95th percentile of measured/estimated on gpuFLOPBench kernels whose counts were known)"
        )
    return f"interval: the {INTERVAL_LOW:g}x-{INTERVAL_HIGH:g}x spread measured on 416 compiled kernels"


def _precision_flops(estimate: Any) -> dict[str, Any]:
    """The kernel's counted FLOPs by precision, as a breakdown entry's ``flops`` (none when not counted)."""
    if not estimate.flops_by_precision:
        return {}
    return {"flops": {k: round(v) for k, v in estimate.flops_by_precision.items()}}


def _answer(
    estimates: list[tuple[Any, Any]],
    counts: list[Any],
    spec: Any,
    arch_note: str | None,
    classifier: Any,
    grid: tuple,
    block: tuple,
    several: bool,
    source: str,
) -> dict[str, Any]:
    duration = sum(e.duration_us for _, e in estimates)
    roofline = sum(e.roofline_us for _, e in estimates)
    flops = sum(e.flops for _, e in estimates)
    dram = sum(e.dram_bytes for _, e in estimates)
    bounds = [_kernel_bound(classifier, k, e, spec, grid, block, source) for k, e in estimates]
    classes = [class_of_bound(b) for b in bounds]
    from components.programs.source_loops import loop_note

    main = max(range(len(estimates)), key=lambda i: estimates[i][1].duration_us)
    known = all(c.known for c in counts)
    notes = [loop_note(counts), _interval_note(known)]
    if several:
        notes.append(
            f"{len(estimates)} kernels in the source, each launched once with this grid and block "
            "(name one with launch.kernel)"
        )
    if arch_note:
        notes.append(arch_note)
    breakdown = [
        {
            "op": k.instance or k.short_name,
            "count": 1,
            "duration_us": round(e.duration_us, 4),
            "bound": b,
            "roofline_class": class_of_bound(b),
            **_precision_flops(e),
        }
        for (k, e), b in sorted(zip(estimates, bounds, strict=True), key=lambda p: -p[0][1].duration_us)
    ]
    with_time = duration > 0 and math.isfinite(duration)
    return {
        "question": None,
        "device": spec.id,
        "device_name": spec.name,
        "kind": "source",
        # Never below the roofline time (the low end of the measured spread can be, for a kernel
        # whose estimate already sits at its roofline).
        "duration_us": duration,
        "duration_us_lo": roofline if known else max(duration * INTERVAL_LOW, roofline),
        "duration_us_hi": duration * (INTERVAL_HIGH_KNOWN if known else INTERVAL_HIGH),
        "achieved_gbps": dram / (duration * 1e3) if with_time else None,
        "gflops": flops / (duration * 1e3) if with_time else None,
        "l1_hit_rate": None,
        "l2_hit_rate": None,
        "arith_intensity": flops / dram if dram > 0 else None,
        "roofline_class": classes[main],
        "bound_pipe": bounds[main],
        "roofline_us": roofline,
        "headroom": duration / roofline if roofline > 0 else None,
        "ood": False,
        "note": "; ".join(notes),
        "model_version": MODEL_VERSION,
        "breakdown": json.dumps(breakdown),
    }


__all__ = ["predict_source"]
