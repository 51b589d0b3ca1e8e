"""gpuFLOPBench programs run with their recorded arguments: our FLOP count against Nsight Compute's.

Each profiled CUDA kernel with ``exeArgs`` is asked as a source question (components.programs.
source_predict) on the RTX 3080 with its profiled grid and block. Its scalar arguments come from
the program's own launch site: the call's argument expressions evaluated with the file's macros
and the host's integer locals in textual order -- through host helpers: a helper's parameters are
bound to the arguments of its first call (``components.features.static.host_env``) --,
``atoi(argv[k])`` and friends replaced by the recorded arguments (``sscanf(argv[k], "%d", &n)`` as an
assignment), and so are ``getopt``/``getopt_long`` options (``components.features.static.host_options``);
when the kernel's file has no ``main``, the program's file that has one is read after it (``main_file_text``:
``main.cpp`` calling the helper in ``kernels.cu`` that launches the kernel) (a deliberately simple host
reading: scopes and control flow are ignored, so an argument it cannot evaluate stays unknown and
its loops fall back, as the answer says).
The profiled FLOPs are ``(spPerf + dpPerf) * xtime`` (no half precision: the counted FLOPs compared
are the answer's FP32 and FP64 ones); the figure is the share of kernels whose
counted FLOPs are within 2x of them, beside the same share with no arguments given.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path
from typing import Any

_ARGV_RE = re.compile(
    r"\b(?:std\s*::\s*)?(?:atoi|atol|atoll|atof|stoi|stol|stoul|strtol|strtoul)\s*\(\s*argv\s*\[\s*(\d+)\s*\][^)]*\)"
)
# sscanf(argv[k], "%d", &n): an assignment of the recorded argument, where it stands
_SSCANF_RE = re.compile(
    r'\bsscanf\s*\(\s*argv\s*\[\s*(\d+)\s*\]\s*,\s*"%l?[dfgiu]"\s*,\s*&\s*([A-Za-z_]\w*)\s*\)'
)
_STRCMP_RE = re.compile(r'\bstrcmp\s*\(\s*argv\s*\[\s*(\d+)\s*\]\s*,\s*"([^"\\]*)"\s*\)')
_MAIN_RE = re.compile(r"\bint\s+main\s*\(")
_HOST_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")
_LAUNCH_CALL = r"\b{name}\s*(?:<[^;]*?>)?\s*<<<[^;]*?>>>\s*\("


def host_args(text: str, kernel: str, exe_args: list[str], main_text: str = "") -> dict[str, float]:
    """Kernel scalar arguments at the first launch site of ``kernel`` that the host makes known.
    ``main_text``: the program's ``main`` when another file holds it (it calls the helper that
    launches the kernel); read after ``text``, for the host values only."""
    from components.features.static.host_env import env_at, members
    from components.features.static.host_options import apply_getopt
    from components.features.static.loops import (
        Unknown,
        call_arguments,
        evaluate,
        file_macros,
        kernel_param_names,
        kernel_parameters,
    )

    def argv(m: re.Match[str]) -> str:
        k = int(m.group(1))
        return exe_args[k - 1] if 0 < k <= len(exe_args) else m.group(0)

    def compare(m: re.Match[str]) -> str:  # strcmp(argv[1], "r") on the recorded argument: 0 when equal
        k = int(m.group(1))
        return str(int(exe_args[k - 1] != m.group(2))) if 0 < k <= len(exe_args) else m.group(0)

    def scan(m: re.Match[str]) -> str:
        k = int(m.group(1))
        return f"({m.group(2)} = {exe_args[k - 1]})" if 0 < k <= len(exe_args) else m.group(0)

    host = f"{text}\n{main_text}" if main_text else text
    host = _STRCMP_RE.sub(compare, _ARGV_RE.sub(argv, _SSCANF_RE.sub(scan, host)))
    host = apply_getopt(host, exe_args)  # getopt options as recorded, too
    # the recorded command line's argument count: ``if (argc == 3) { n = atoi(argv[1]); }`` is taken
    host = re.sub(r"\bargc\b", str(len(exe_args) + 1), host)
    site = re.search(_LAUNCH_CALL.format(name=re.escape(kernel)), host)
    if site is None:
        return {}
    macros = file_macros(host, {})
    env = env_at(host, site.start(), macros)  # through host helpers: main -> conv3D(...) -> the launch
    given = call_arguments(host, site.end() - 1)
    params = kernel_param_names(text, kernel)
    scalars, _ = kernel_parameters(text, kernel)
    out: dict[str, float] = {}
    for name, expr in zip(params, given, strict=False):
        # a struct passed by value: its known fields, as p.k arguments
        out.update({k.replace("__", ".", 1): v for k, v in members(env, expr, name).items()})
        if name not in scalars:
            continue
        try:
            value = evaluate(expr, dict(env), macros)
        except (Unknown, ValueError, OverflowError, ZeroDivisionError, RecursionError):
            continue
        if isinstance(value, int | float) and math.isfinite(value):
            out[name] = value
    return out


def kernel_file_text(root: Path, program: str, kernel: str) -> str | None:
    """The translation unit that defines ``kernel``, its quoted includes inlined (NVRTC gets no -I
    here): a ``.cu`` file (``main.cu`` first: it defines the macros its headers use) whose inlined
    text holds the kernel, else the header that defines it."""
    from components.features.static.source import PreparedSource, inline_includes

    folder = root / "src" / program
    if not folder.is_dir():
        return None
    pattern = re.compile(r"__global__[^;{]*?\b" + re.escape(kernel) + r"\s*\(", re.S)
    files = sorted(
        (p for p in folder.rglob("*") if p.suffix in (".cu", ".cuh", ".h", ".hpp") and p.is_file()),
        key=lambda p: (p.suffix != ".cu", p.name != "main.cu", p.as_posix()),
    )
    for path in files:
        text = inline_includes(
            path.read_text(errors="replace"),
            path.parent,
            (folder,),
            PreparedSource(text=""),
            {path.resolve()},
        )
        if pattern.search(text):
            return text
    return None


def main_file_text(root: Path, program: str, text: str) -> str:
    """The program's file that defines ``main`` (its quoted includes inlined) when the kernel's
    translation unit ``text`` does not: there the recorded arguments are read and handed to the host
    helper that launches the kernel (``main.cpp`` -> ``mv_dense_parallel(...)`` in ``kernels.cu``).
    Empty when ``text`` has its own ``main`` or no file has one."""
    from components.features.static.source import PreparedSource, code_mask, inline_includes

    def has_main(t: str) -> bool:
        mask = code_mask(t)
        return any(mask[m.start()] for m in _MAIN_RE.finditer(t))

    folder = root / "src" / program
    if has_main(text) or not folder.is_dir():
        return ""
    for path in sorted(p for p in folder.rglob("*") if p.suffix in _HOST_SUFFIXES and p.is_file()):
        body = path.read_text(errors="replace")
        if has_main(body):
            return inline_includes(body, path.parent, (folder,), PreparedSource(text=""), {path.resolve()})
    return ""


def _instance(demangled: str) -> str | None:
    """``bilateralFilter<3>`` from ``void bilateralFilter<3>(const float *, ...)``; None without
    template arguments."""
    m = re.match(r"^(?:void\s+)?(?:[\w:]+::)?(\w+<[^()]*>)\s*\(", demangled.strip())
    return re.sub(r"\s+", "", m.group(1)) if m else None


def _dims(text: str) -> list[int]:
    return [int(v) for v in re.findall(r"\d+", text)][:3]


def _rows(root: Path, limit: int, skip: int = 0) -> list[dict[str, str]]:
    """First profiled row of each CUDA kernel with recorded arguments, programs in name order: the
    programs past the first ``skip`` up to the ``limit``-th (both count programs, sources or not)."""
    with (root / "cuda-profiling" / "profiling-data.csv").open(newline="") as fh:
        rows = [
            r
            for r in csv.DictReader(fh)
            if r["targetName"].endswith("-cuda") and r["exeArgs"] not in ("", "NULL")
        ]
    seen: set[tuple[str, str]] = set()
    out = []
    programs: list[str] = []
    for r in sorted(rows, key=lambda r: r["targetName"]):
        key = (r["targetName"], r["kernelName"])
        if key in seen:
            continue
        if r["targetName"] not in programs:
            if len(programs) >= limit:
                break
            programs.append(r["targetName"])
        seen.add(key)
        if len(programs) > skip:
            out.append(r)
    return out


def score_flops(root: Path, limit_programs: int = 40, skip_programs: int = 0) -> dict[str, Any]:
    """Counted vs profiled FLOPs (and runtime) of the first ``limit_programs`` CUDA programs, less the
    first ``skip_programs`` of them."""
    from components.devices import load_catalog
    from components.programs.errors import ProgramError
    from components.programs.source_predict import predict_source

    spec = load_catalog().resolve("RTX 3080")
    results: list[dict[str, Any]] = []
    for r in _rows(root, limit_programs, skip_programs):
        profiled = (float(r["spPerf"] or 0) + float(r["dpPerf"] or 0)) * float(r["xtime"]) * 1e-9
        kernel = re.split(r"[<(]", r["kernelName"])[0].strip()
        text = kernel_file_text(root, r["targetName"], kernel)
        if not text or profiled <= 0:
            continue
        launch = {"grid": _dims(r["Grid Size"]), "block": _dims(r["Block Size"]), "kernel": kernel}
        row: dict[str, Any] = {"program": r["targetName"], "kernel": kernel, "profiled_flops": profiled}
        instance = _instance(r["Kernel Name"])
        given = host_args(text, kernel, r["exeArgs"].split(), main_file_text(root, r["targetName"], text))
        for label, args in (("args", given), ("no_args", {})):
            answer, error = None, None
            # the profiled template instance (bilateralFilter<3>) when the source instantiates it, else
            # every kernel of that name
            for name in dict.fromkeys(n for n in (instance, kernel) if n):
                try:
                    (answer,) = predict_source(
                        text, "cuda", {**launch, "kernel": name, "args": args}, None, [spec], None
                    )
                    break
                except (ProgramError, ValueError) as exc:
                    error = str(exc)
                    continue
            if answer is None:
                row[label] = None
                row[f"{label}_error"] = error  # why it did not compile or analyse (the failures by reason)
                continue
            row[label] = _fp32_fp64_flops(answer)
            row[f"{label}_us"] = answer["duration_us"]
            row[f"{label}_note"] = answer["note"]
            row[f"{label}_known"] = (
                "trip counts from the source" in answer["note"] or "no loops" in answer["note"]
            )
        row["measured_us"] = float(r["xtime"]) / 1e3
        results.append(row)
    return {"rows": results, **summarise(results)}


def _fp32_fp64_flops(answer: dict[str, Any]) -> float:
    """The answer's counted FP32 + FP64 FLOPs: what Nsight's ``spPerf`` and ``dpPerf`` measure (half-precision
    work is in neither), from its breakdown's per-precision counts; all its FLOPs when it has none."""
    import json

    entries = json.loads(answer.get("breakdown") or "[]")
    if entries and all("flops" in e for e in entries):
        return float(sum(e["flops"].get("fp32", 0) + e["flops"].get("fp64", 0) for e in entries))
    return answer["gflops"] * answer["duration_us"] * 1e3 if answer["gflops"] else 0.0


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Share within 2x of the profiled FLOPs, with and without arguments; runtime ratio spread."""

    def within(label: str) -> float | None:
        scored = [r for r in rows if r.get(label) is not None]
        if not scored:
            return None
        ok = [r for r in scored if r[label] > 0 and 0.5 <= r[label] / r["profiled_flops"] <= 2.0]
        return len(ok) / len(scored)

    known = sorted(r["measured_us"] / r["args_us"] for r in rows if r.get("args_known") and r.get("args_us"))
    quant = (lambda q: known[min(len(known) - 1, int(q * len(known)))]) if known else (lambda q: None)
    return {
        "kernels": len(rows),
        "compiled": sum(r.get("args") is not None for r in rows),
        "within_2x_args": within("args"),
        "within_2x_no_args": within("no_args"),
        "counts_known": len(known),
        "measured_over_estimated_known": {"p05": quant(0.05), "p50": quant(0.5), "p95": quant(0.95)},
    }


__all__ = ["host_args", "score_flops", "summarise"]
