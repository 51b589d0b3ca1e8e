"""NVRTC compilation of CUDA C++ to cubin, isolated in a subprocess with time and memory limits.

NVRTC runs in-process and a pathological source (deep template recursion, a huge unrolled loop)
can hang or exhaust memory, so each compile runs in a child Python that this module also serves
as (``python static.compile.py`` reads one JSON request on stdin, writes one JSON reply on
stdout). The parent applies ``RLIMIT_AS``/``RLIMIT_CPU`` in the child and a wall-clock timeout.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# What NVRTC 13 (the compiler this project uses: the ``nvidia-cuda-nvrtc`` wheel through
# ``cuda-bindings``) targets; the live list comes from ``nvrtcGetSupportedArchs`` when it loads.
SUPPORTED_ARCHS: tuple[str, ...] = (
    "sm_75",
    "sm_80",
    "sm_86",
    "sm_87",
    "sm_88",
    "sm_89",
    "sm_90",
    "sm_100",
    "sm_103",
    "sm_110",
    "sm_120",
    "sm_121",
)
DEFAULT_TIMEOUT_S: float = 120.0
DEFAULT_MEMORY_BYTES: int = 8 << 30  # address space; NVRTC + ptxas reserve a lot of virtual memory
CUDA_INCLUDE_ENV = "KERNELCAST_CUDA_INCLUDE"


class CompileError(Exception):
    """A source that NVRTC rejected (or that hit the time/memory limit); carries the compiler log."""

    def __init__(
        self, name: str, log: str, reason: str = "compilation failed", hint: str | None = None
    ) -> None:
        self.name = name
        self.log = log
        self.reason = reason
        self.hint = hint
        first = next(
            (line for line in log.splitlines() if "error" in line),
            log.strip().splitlines()[0] if log.strip() else "",
        )
        message = f"{name}: {reason}: {first.strip()}" if first else f"{name}: {reason}"
        super().__init__(f"{message} ({hint})" if hint else message)


@dataclass
class CompileResult:
    cubin: bytes
    log: str
    lowered_names: dict[str, str] = field(default_factory=dict)
    options: list[str] = field(default_factory=list)


@functools.lru_cache(maxsize=1)
def supported_archs() -> tuple[str, ...]:
    """Real architectures the installed NVRTC emits SASS for (CUDA 13 dropped sm_50..sm_72)."""
    try:
        from cuda.bindings import nvrtc

        status, archs = nvrtc.nvrtcGetSupportedArchs()
        if status == nvrtc.nvrtcResult.NVRTC_SUCCESS and archs:
            return tuple(f"sm_{int(a)}" for a in archs)
    except Exception:
        pass
    return SUPPORTED_ARCHS


def _arch_number(arch: str) -> int:
    return int(arch.removeprefix("sm_"))


def check_arch(arch: str) -> str:
    """Normalise 'sm90'/'90'/'sm_90'/'compute_70'/'7.0' -> 'sm_90'; reject what is no NVIDIA SM.

    Any SM from sm_30 on is accepted: :func:`compile_arch` maps one this NVRTC cannot emit (Pascal
    sm_60, Volta sm_70, ...) to the nearest it can.
    """
    text = arch.strip().lower()
    if re.fullmatch(r"\d+\.\d+", text):  # a compute capability, as the device catalog writes it
        text = text.replace(".", "")
    digits = re.sub(r"^(sm_?|compute_?)", "", text)
    if not digits.isdigit() or not 30 <= int(digits) < 1000:
        raise ValueError(f"unknown arch {arch!r}; expected an NVIDIA SM such as sm_60, sm_70, sm_90 or 9.0")
    return f"sm_{int(digits)}"


def compile_arch(arch: str) -> tuple[str, str | None]:
    """(the arch NVRTC compiles for, a note when it is not ``arch`` itself).

    An arch older than the oldest NVRTC target compiles for that oldest one (sm_75 on NVRTC 13):
    the instruction mix of the same source is close (same ISA family since Volta), registers and
    scheduling may differ. An arch between targets takes the nearest older target (same major
    preferred: sm_72 -> sm_70 is gone, so sm_75 when nothing older exists).
    """
    norm = check_arch(arch)
    targets = supported_archs()
    if norm in targets:
        return norm, None
    number = _arch_number(norm)
    older = [t for t in targets if _arch_number(t) <= number]
    chosen = max(older, key=_arch_number) if older else min(targets, key=_arch_number)
    return chosen, (
        f"{norm} is not a target of the installed NVRTC (targets: {targets[0]}..{targets[-1]}); "
        f"SASS compiled for {chosen}, the nearest it supports"
    )


def arch_for_device(spec: Any) -> tuple[str, str | None]:
    """(compile arch, note) for a catalog GPU: its compute capability, mapped by :func:`compile_arch`.

    AMD GPUs have no SASS: their CUDA source is analysed as NVIDIA sm_90 code (the instruction
    mix stands in for the HIP ISA's) and the note says so.
    """
    if getattr(spec, "vendor", "nvidia") != "nvidia":
        chosen, _ = compile_arch("sm_90")
        return chosen, (
            f"{spec.name} is an AMD GPU ({spec.compute_capability}): instruction mix taken from "
            f"NVIDIA {chosen} SASS of the same source"
        )
    chosen, note = compile_arch(str(spec.compute_capability))
    return chosen, (f"{spec.name}: {note}" if note else None)


def cuda_include_dirs() -> list[Path]:
    """Folders with the CUDA runtime and CCCL headers (cuda_fp16.h, cub/, cuda/std/).

    Order: ``$KERNELCAST_CUDA_INCLUDE`` (os.pathsep list), the pip wheels' ``nvidia/cu13/include``
    on sys.path (nvidia-cuda-runtime, nvidia-cuda-crt, nvidia-cuda-cccl), then /usr/local/cuda.
    """
    found: list[Path] = []
    env = os.environ.get(CUDA_INCLUDE_ENV, "")
    roots = [Path(p) for p in env.split(os.pathsep) if p]
    roots += [Path(p) / "nvidia" / "cu13" / "include" for p in sys.path if p]
    roots.append(Path("/usr/local/cuda/include"))
    for root in roots:
        if root.is_dir() and root not in found:
            found.append(root)
            if (root / "cccl").is_dir():
                found.append(root / "cccl")
    return found


def nvdisasm_path() -> Path:
    """The nvdisasm binary from the nvidia-cuda-nvdisasm wheel (or PATH)."""
    for p in sys.path:
        cand = Path(p) / "nvidia" / "cu13" / "bin" / "nvdisasm"
        if cand.is_file():
            return cand
    from shutil import which

    hit = which("nvdisasm")
    if hit:
        return Path(hit)
    raise FileNotFoundError("nvdisasm not found: install nvidia-cuda-nvdisasm")


def build_options(arch: str, include_dirs: list[Path], defines: dict[str, str] | None = None) -> list[str]:
    """NVRTC flags: real-arch cubin, unannotated helpers as device code, ptxas resource report."""
    opts = [
        f"-arch={arch}",
        "-std=c++17",
        "-default-device",
        "-Xptxas=-v",
        "-w",
    ]
    opts += [f"-I{d}" for d in include_dirs]
    opts += [f"-D{k}={v}" if v != "" else f"-D{k}" for k, v in sorted((defines or {}).items())]
    return opts


def limit_child(memory_bytes: int, cpu_s: int | None = None) -> None:
    """A compiler child's limits: its address space, no core file, and its CPU seconds where given (a
    long-lived child sets its CPU limit per compile instead)."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    if cpu_s is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def compile_to_cubin(
    source: str,
    name: str,
    options: list[str],
    name_expressions: list[str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
) -> CompileResult:
    """Compile ``source`` with NVRTC in a limited child process; raise CompileError on failure.

    Inside ``compile_server.compile_servers()`` (the static stage's sweep) the child is a long-lived one per
    thread; a compile that crashes it is redone in a fresh child, so the outcome is the fresh child's."""
    request = {"source": source, "name": name, "options": options, "name_expressions": name_expressions or []}
    from components.features.static import prefetch
    from components.features.static.compile_server import served_compile

    reply = prefetch.remembered_reply(request)  # the static sweep's second pass (static.prefetch)
    if reply is None:
        reply = served_compile(request, timeout_s, memory_bytes) or _fresh_child(
            request, timeout_s, memory_bytes
        )
        prefetch.remember_reply(request, reply)
    if not reply["ok"]:
        raise CompileError(name, reply["log"])
    return CompileResult(base64.b64decode(reply["cubin"]), reply["log"], reply["lowered"], options)


def _fresh_child(request: dict[str, Any], timeout_s: float, memory_bytes: int) -> dict[str, Any]:
    """One compile in a child Python of its own: its reply, or CompileError for a timeout or crash."""
    name = request["name"]
    try:
        proc = subprocess.run(
            [sys.executable, "-I", str(Path(__file__).resolve())],
            input=json.dumps(request).encode(),
            capture_output=True,
            timeout=timeout_s,
            preexec_fn=lambda: limit_child(memory_bytes, int(timeout_s) + 1),
        )
    except subprocess.TimeoutExpired as exc:
        raise timeout_error(name, timeout_s) from exc
    if proc.returncode != 0 or not proc.stdout:
        stderr = proc.stderr.decode(errors="replace")[-4000:]
        reason = (
            "compiler crashed or hit the memory limit"
            if proc.returncode < 0 or "MemoryError" in stderr or "bad_alloc" in stderr
            else f"compiler process failed (exit {proc.returncode})"
        )
        raise CompileError(name, stderr or reason, reason)
    return json.loads(proc.stdout)


def timeout_error(name: str, timeout_s: float) -> CompileError:
    return CompileError(name, f"NVRTC did not finish within {timeout_s:g} s", "time limit exceeded")


def _compile_request(req: dict[str, Any]) -> dict[str, Any]:
    """Child side: one NVRTC compilation of a request, its JSON-able reply."""
    from cuda.bindings import nvrtc

    _, prog = nvrtc.nvrtcCreateProgram(req["source"].encode(), req["name"].encode(), 0, [], [])
    for expr in req["name_expressions"]:
        nvrtc.nvrtcAddNameExpression(prog, expr.encode())
    opts = [o.encode() for o in req["options"]]
    (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log_buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, log_buf)
    log = log_buf.rstrip(b"\x00 ").decode(errors="replace")
    reply: dict[str, Any] = {
        "ok": status == nvrtc.nvrtcResult.NVRTC_SUCCESS,
        "log": log,
        "cubin": "",
        "lowered": {},
    }
    if reply["ok"]:
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, cubin)
        reply["cubin"] = base64.b64encode(cubin).decode()
        lowered = {}
        for expr in req["name_expressions"]:
            res, low = nvrtc.nvrtcGetLoweredName(prog, expr.encode())
            if res == nvrtc.nvrtcResult.NVRTC_SUCCESS:
                lowered[expr] = low.decode() if isinstance(low, bytes) else str(low)
        reply["lowered"] = lowered
    nvrtc.nvrtcDestroyProgram(prog)
    return reply


def _worker() -> None:
    """Child side: one NVRTC compilation, JSON in on stdin, JSON out on stdout."""
    req = json.loads(sys.stdin.buffer.read())
    sys.stdout.write(json.dumps(_compile_request(req)))


def _serve() -> None:
    """Long-lived child side (``--serve``): one JSON request per stdin line, one JSON reply line each, until
    stdin closes. Each compile gets ``cpu_s`` more seconds of CPU than the process has used so far."""
    import math
    import resource

    for line in sys.stdin.buffer:
        req = json.loads(line)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        limit = math.ceil(usage.ru_utime + usage.ru_stime) + int(req.pop("cpu_s"))
        resource.setrlimit(resource.RLIMIT_CPU, (limit, resource.RLIM_INFINITY))
        sys.stdout.write(json.dumps(_compile_request(req)) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve() if "--serve" in sys.argv else _worker()
