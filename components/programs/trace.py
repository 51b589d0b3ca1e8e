"""Trace KernelBench-style PyTorch modules into the aten calls (kernels) they launch.

A module is user code, so it only ever runs in a sandboxed child process
(``components.programs.trace_worker``): fake tensors (no data, no GPU), an address-space limit,
a wall-clock limit per module (an alarm in the child, and a watchdog here for code that never
returns to Python), and no network. Many modules share one child (importing torch takes seconds);
a child that dies takes only the module it was tracing with it -- the rest go to a fresh child.

``trace_module`` raises ``ProgramError`` naming the module and why; ``trace_many`` returns one
``TraceResult`` per module, failures included, for the training data.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.programs.errors import ProgramError

DEFAULT_PER_MODULE_S = 60.0
DEFAULT_MEMORY_BYTES = 6 * 1024**3  # address space: torch's own mappings need ~2-3 GiB
STARTUP_S = 60.0  # importing torch on a loaded 2-core machine
WATCHDOG_GRACE_S = 10.0  # beyond the child's own alarm, for code stuck outside the interpreter
MAX_MODULE_BYTES = 1_000_000
TRACER_VERSION = "3"  # bump when the recorded fields change: cached traces are keyed by it


@dataclass(frozen=True)
class ModuleJob:
    """One module to trace: a file path, or its text (``name`` is what errors call it)."""

    name: str
    path: str | None = None
    text: str | None = None
    train: bool = False  # forward + backward + an Adam step, each op tagged with its phase


@dataclass
class TraceResult:
    name: str
    ok: bool
    ops: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    reason: str | None = None  # syntax | interface | error | timeout | memory | network | crashed
    seconds: float = 0.0
    memory: dict[str, float] = field(default_factory=dict)  # training traces: bytes per kind of state

    def raise_for_error(self) -> None:
        if not self.ok:
            raise ProgramError(f"{self.name}: cannot trace the module: {self.error}")


def module_job(module: str, name: str | None = None) -> ModuleJob:
    """A module given as a path to a ``.py`` file or as its text (anything with a newline, or that
    is not an existing file, is taken as text); ProgramError for a missing or unreadable file."""
    text = str(module)
    if "\n" not in text and len(text) < 4096:
        path = Path(text).expanduser()
        if path.is_file():
            if path.stat().st_size > MAX_MODULE_BYTES:
                raise ProgramError(f"{path}: module file larger than {MAX_MODULE_BYTES} bytes")
            try:
                path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ProgramError(f"{path}: unreadable module file ({exc})") from exc
            return ModuleJob(name or str(path), path=str(path.resolve()))
        if text.endswith(".py") or "/" in text:
            raise ProgramError(f"{text}: no such module file")
    if not text.strip():
        raise ProgramError(f"{name or 'module'}: empty module text")
    if len(text.encode("utf-8", errors="replace")) > MAX_MODULE_BYTES:
        raise ProgramError(f"{name or 'module text'}: larger than {MAX_MODULE_BYTES} bytes")
    return ModuleJob(name or "module text", text=text)


def _child_env(protocol_fd: int) -> dict[str, str]:
    from components.platform.config import PROJECT_ROOT

    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(
        PYTHONPATH=str(PROJECT_ROOT),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        DO_NOT_TRACK="1",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        CUDA_VISIBLE_DEVICES="",
        KERNELCAST_TRACE_FD=str(protocol_fd),
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def _run_batch(
    jobs: Sequence[ModuleJob],
    per_module_s: float,
    memory_bytes: int,
    results: dict[int, TraceResult],
    offset: int,
) -> int | None:
    """Trace ``jobs`` in one child; fill ``results`` (keyed offset + index). Returns the index of a
    job the child died on or overran (its result recorded), else None when all finished."""
    read_fd, write_fd = os.pipe()
    request = {
        "jobs": [{"name": j.name, "path": j.path, "text": j.text, "train": j.train} for j in jobs],
        "per_module_s": per_module_s,
        "memory_bytes": memory_bytes,
    }
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "components.programs.trace_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            pass_fds=(write_fd,),
            env=_child_env(write_fd),
            cwd=tempfile.gettempdir(),
            close_fds=True,
        )
        os.close(write_fd)
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(request).encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
        buffer = b""
        current = 0
        deadline = time.monotonic() + STARTUP_S + per_module_s + WATCHDOG_GRACE_S
        failed_at: int | None = None
        try:
            while current < len(jobs):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    results[offset + current] = TraceResult(
                        jobs[current].name,
                        False,
                        error=f"did not finish within {per_module_s:g} s (time limit)",
                        reason="timeout",
                    )
                    failed_at = current
                    break
                ready, _, _ = select.select([read_fd], [], [], min(remaining, 1.0))
                if not ready:
                    continue
                chunk = os.read(read_fd, 1 << 20)
                if not chunk:  # the child exited (killed by the memory limit, crashed)
                    code = proc.wait(timeout=10)
                    stderr.seek(0)
                    tail = stderr.read().decode(errors="replace").strip().splitlines()[-1:] or [""]
                    why = (
                        f"killed by signal {-code} (memory limit or crash)"
                        if code < 0
                        else f"tracer exited with status {code}: {tail[0][:200]}"
                    )
                    results[offset + current] = TraceResult(
                        jobs[current].name, False, error=why, reason="memory" if code == -9 else "crashed"
                    )
                    failed_at = current
                    break
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    message = json.loads(line)
                    index = int(message["index"])
                    results[offset + index] = TraceResult(
                        jobs[index].name,
                        bool(message["ok"]),
                        ops=message.get("ops") or [],
                        error=message.get("error"),
                        reason=message.get("reason"),
                        seconds=float(message.get("seconds", 0.0)),
                        memory=message.get("memory") or {},
                    )
                    current = index + 1
                    deadline = time.monotonic() + per_module_s + WATCHDOG_GRACE_S
        finally:
            os.close(read_fd)
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
    return failed_at


def _trace_serial(jobs: Sequence[ModuleJob], per_module_s: float, memory_bytes: int) -> list[TraceResult]:
    results: dict[int, TraceResult] = {}
    start = 0
    while start < len(jobs):
        failed = _run_batch(jobs[start:], per_module_s, memory_bytes, results, start)
        start = len(jobs) if failed is None else start + failed + 1
    return [results[i] for i in range(len(jobs))]


def trace_many(
    jobs: Sequence[ModuleJob],
    *,
    per_module_s: float = DEFAULT_PER_MODULE_S,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    workers: int = 1,
) -> list[TraceResult]:
    """Trace every module: ``workers`` children side by side, each tracing its share one after the
    other (a fresh child after a module kills or hangs one). Results in ``jobs`` order."""
    workers = max(1, min(int(workers), len(jobs)))
    if workers == 1:
        return _trace_serial(jobs, per_module_s, memory_bytes)
    from concurrent.futures import ThreadPoolExecutor

    shares = [list(range(i, len(jobs), workers)) for i in range(workers)]  # interleaved: sizes vary by level
    with ThreadPoolExecutor(max_workers=workers) as pool:
        parts = list(
            pool.map(lambda idx: _trace_serial([jobs[i] for i in idx], per_module_s, memory_bytes), shares)
        )
    out: dict[int, TraceResult] = {}
    for idx, part in zip(shares, parts, strict=False):
        out.update(zip(idx, part, strict=False))
    return [out[i] for i in range(len(jobs))]


def trace_module(
    module: str,
    *,
    name: str | None = None,
    per_module_s: float = DEFAULT_PER_MODULE_S,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    train: bool = False,
) -> TraceResult:
    """Trace one module (path or text); ProgramError naming it and why when it cannot be traced.
    ``train``: a training step (forward, backward, Adam), ops tagged ``phase``, ``memory`` filled."""
    job = dataclasses.replace(module_job(module, name), train=train)
    result = trace_many([job], per_module_s=per_module_s, memory_bytes=memory_bytes)[0]
    result.raise_for_error()
    if not any(not op.get("view") for op in result.ops):
        raise ProgramError(f"{job.name}: the forward pass launched no kernel (no aten op besides views)")
    return result
