"""Answer a CUDA-source question: runtime, bound pipe and roofline class of its kernel(s) on GPUs.

The source is compiled, never run: host code is stripped and NVRTC compiles the device code in a
sandboxed subprocess with time and memory limits (components.features.static_compile); the SASS
instruction mix, the launch and each GPU's spec give a roofline estimate per kernel
(components.programs.cuda_estimate). The roofline class comes from the class model trained on
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

from components.programs.errors import ProgramError

LANGUAGES: tuple[str, ...] = ("cuda", "hip")
COMPILE_TIMEOUT_S = 60.0
COMPILE_MEMORY_BYTES = 4 << 30
MAX_SOURCE_CHARS = 1_000_000
MODEL_VERSION = "static-roofline"
# Spread of measured / estimated runtime over gpuFLOPBench's bolet train side (416 compiled CUDA
# kernels, RTX 3080): the 5th and 95th percentiles of the ratio after the median scaling. Wide,
# honestly: loop trip counts are not in the SASS.
INTERVAL_LOW, INTERVAL_HIGH = 0.1, 800.0


def _check_inputs(source: Any, language: Any, launch: Any) -> tuple[str, dict[str, Any]]:
    if not isinstance(source, str) or not source.strip():
        raise ProgramError("source: empty; give the CUDA text of at least one __global__ kernel")
    if len(source) > MAX_SOURCE_CHARS:
        raise ProgramError(f"source: {len(source)} characters; at most {MAX_SOURCE_CHARS}")
    lang = str(language or "").strip().lower()
    if lang not in LANGUAGES:
        raise ProgramError(f"language: {language!r}; expected one of {', '.join(LANGUAGES)}")
    if lang == "hip":
        raise ProgramError("language: hip is not analysed yet (the static analyser compiles CUDA with NVRTC); "
                           "send the kernel as CUDA (the HIP kernel syntax is the same) with language 'cuda'")
    if isinstance(launch, str):
        try:
            launch = json.loads(launch)
        except json.JSONDecodeError as exc:
            raise ProgramError(f"launch: not valid JSON ({exc.msg})") from None
    if not isinstance(launch, dict):
        raise ProgramError("launch: expected an object such as {\"grid\": [256], \"block\": [256]}")
    unknown = sorted(set(launch) - {"grid", "block", "kernel", "defines", "shared_bytes"})
    if unknown:
        raise ProgramError(f"launch: unknown field {unknown[0]!r} (known: grid, block, kernel, defines, shared_bytes)")
    defines = launch.get("defines") or {}
    if not isinstance(defines, dict) or not all(isinstance(k, str) and k.isidentifier() for k in defines):
        raise ProgramError("launch defines: expected an object of macro names to values, e.g. {\"N\": \"1024\"}")
    return lang, launch


def _compile(source: str, arch: str, defines: dict[str, str], kernel: str | None) -> Any:
    from components.features.static import CompileError, NoKernelError, analyze_source

    try:
        return analyze_source(source, arch, kernel, "question.cu", defines={k: str(v) for k, v in defines.items()},
                              timeout_s=COMPILE_TIMEOUT_S, memory_bytes=COMPILE_MEMORY_BYTES)
    except NoKernelError as exc:
        raise ProgramError(f"source: {exc.why}") from None
    except CompileError as exc:
        raise ProgramError(f"source: {str(exc).replace('question.cu: ', '', 1)}") from None
    except LookupError as exc:
        raise ProgramError(f"launch kernel: {exc.args[0] if exc.args else exc}") from None


def _class_model() -> Any:
    try:
        from components.models.roofline_class import load_default_model

        return load_default_model()
    except Exception:  # noqa: BLE001 -- no saved class model: the estimate's bound pipe answers
        return None


def predict_source(source: str, language: str, launch: dict, dtype: str | None, specs: list[Any],
                   predictor: Any) -> list[dict[str, Any]]:
    """One answer dict per spec (keys of the shared answer schema); raises ProgramError.

    ``predictor`` (the op-level model) is not used for source questions yet: kernels in source
    have no op shape its features need; the answer's ``model_version`` says what answered.
    """
    from components.programs.cuda_estimate import estimate_kernel, launch_dims

    _, launch = _check_inputs(source, language, launch)
    try:
        grid, block = launch_dims(launch)
    except ValueError as exc:
        raise ProgramError(str(exc)) from None
    if not specs:
        raise ProgramError("devices: none given")
    from components.features.static_compile import arch_for_device

    reports: dict[str, Any] = {}
    # The class model the predictor carries (a tabular fit with gpuFLOPBench rows), else a saved one.
    classifier = getattr(predictor, "class_model", None) or _class_model()
    answers = []
    for spec in specs:
        arch, arch_note = arch_for_device(spec)
        if arch not in reports:
            reports[arch] = _compile(source, arch, launch.get("defines") or {}, launch.get("kernel"))
        report = reports[arch]
        estimates = [(k, estimate_kernel(k.instance or k.short_name, k.instructions, k.loop_instructions,
                                         grid, block, spec, dtype)) for k in report.kernels]
        answers.append(_answer(estimates, spec, arch_note, classifier, grid, block, len(report.kernels) > 1, source))
    return answers


def _kernel_class(classifier: Any, kernel: Any, estimate: Any, spec: Any, grid: tuple, block: tuple,
                  source: str) -> str:
    if classifier is None:
        return estimate.roofline_class
    try:
        return str(classifier.predict_kernel(kernel, grid, block, spec, source, "cuda"))
    except Exception:  # noqa: BLE001 -- a model that cannot score this kernel: the estimate answers
        return estimate.roofline_class


def _loop_note(estimates: list[tuple[Any, Any]]) -> str:
    """Which kernels have loops (their bodies are counted LOOP_TRIPS times: trip counts are not in the
    SASS), or that none has: then the per-thread instruction counts are exact. Why the interval stays
    the measured 0.1x-800x either way: it is the spread of all 416 bolet kernels, loop-free ones
    included, and no narrower spread has been measured for loop-free kernels yet."""
    from components.programs.cuda_estimate import LOOP_TRIPS

    looped = [(k.instance or k.short_name, int(k.loops.get("count", 0)), int(k.loop_instructions.get("total", 0)))
              for k, _ in estimates if int(getattr(k, "loops", {}).get("count", 0)) > 0]
    spread = f"interval: the {INTERVAL_LOW:g}x-{INTERVAL_HIGH:g}x spread measured on 416 compiled kernels"
    if not looped:
        return (f"static estimate: no loops, per-thread instruction counts exact; {spread} (memory behaviour "
                "and latency, not trip counts, make its width; not yet measured apart for loop-free kernels)")
    named = ", ".join(f"{name}: {n} loop{'s' if n > 1 else ''} ({body} instructions)" for name, n, body in looped)
    return (f"static estimate: loop bodies assumed to run {LOOP_TRIPS:g} times each, trip counts not being in "
            f"the SASS ({named}); {spread}")


def _answer(estimates: list[tuple[Any, Any]], spec: Any, arch_note: str | None, classifier: Any,
            grid: tuple, block: tuple, several: bool, source: str) -> dict[str, Any]:
    duration = sum(e.duration_us for _, e in estimates)
    roofline = sum(e.roofline_us for _, e in estimates)
    flops = sum(e.flops for _, e in estimates)
    dram = sum(e.dram_bytes for _, e in estimates)
    classes = [_kernel_class(classifier, k, e, spec, grid, block, source) for k, e in estimates]
    main = max(range(len(estimates)), key=lambda i: estimates[i][1].duration_us)
    notes = [_loop_note(estimates)]
    if several:
        notes.append(f"{len(estimates)} kernels in the source, each launched once with this grid and block "
                     "(name one with launch.kernel)")
    if arch_note:
        notes.append(arch_note)
    breakdown = [{"op": k.instance or k.short_name, "count": 1, "duration_us": round(e.duration_us, 4),
                  "bound": e.bound_pipe, "roofline_class": c}
                 for (k, e), c in sorted(zip(estimates, classes), key=lambda p: -p[0][1].duration_us)]
    with_time = duration > 0 and math.isfinite(duration)
    return {
        "question": None, "device": spec.id, "device_name": spec.name, "kind": "source",
        # Never below the roofline time (the low end of the measured spread can be, for a kernel
        # whose estimate already sits at its roofline).
        "duration_us": duration, "duration_us_lo": max(duration * INTERVAL_LOW, roofline),
        "duration_us_hi": duration * INTERVAL_HIGH,
        "achieved_gbps": dram / (duration * 1e3) if with_time else None,
        "gflops": flops / (duration * 1e3) if with_time else None,
        "l1_hit_rate": None, "l2_hit_rate": None,
        "arith_intensity": flops / dram if dram > 0 else None,
        "roofline_class": classes[main], "bound_pipe": estimates[main][1].bound_pipe,
        "roofline_us": roofline, "headroom": duration / roofline if roofline > 0 else None,
        "ood": False, "note": "; ".join(notes), "model_version": MODEL_VERSION,
        "breakdown": json.dumps(breakdown),
    }


__all__ = ["predict_source"]
