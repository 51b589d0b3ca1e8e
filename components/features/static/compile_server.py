"""Long-lived NVRTC compile children for a sweep of many compiles (the static stage's ~600 files).

A fresh sandboxed Python per compile (``static.compile``) costs ~0.1 s of CPU before NVRTC starts (the
interpreter, ``cuda.bindings``, loading NVRTC): about a third of a small file's compile. Inside
:func:`compile_servers`, each thread keeps one child (``compile.py --serve``) under the same address-space
limit, each compile under the same CPU and wall-clock limits. Outside it (a single CLI question, the
server) nothing changes: one fresh child per compile.

Equivalence with the fresh child: a reply is NVRTC's, the same either way; a child that dies (crash, the
memory or CPU limit) is replaced and that compile is redone in a fresh child, whose outcome is the
answer; a compile past the wall-clock limit is the same "time limit exceeded" error.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

_LOCK = threading.Lock()
_SESSIONS = 0  # open compile_servers() blocks in this process
_LOCAL = threading.local()  # this thread's servers, by memory limit
_ALL: list[CompileServer] = []  # every server started, to close at the end of the session


class CompileServer:
    """One ``compile.py --serve`` child: requests in, replies out, one line each."""

    def __init__(self, memory_bytes: int) -> None:
        from components.features.static.compile import limit_child

        script = Path(__file__).resolve().with_name("compile.py")
        self.proc = subprocess.Popen(
            [sys.executable, "-I", str(script), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: limit_child(memory_bytes),
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
        """The reply; None when the child died (the caller redoes the compile in a fresh child); raises
        the compile's time-limit CompileError when no reply came within ``timeout_s``."""
        from components.features.static.compile import timeout_error

        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(json.dumps({**request, "cpu_s": int(timeout_s) + 1}).encode() + b"\n")
            stdin.flush()
        except (BrokenPipeError, OSError):
            self.close()
            return None
        if not _readable(stdout, timeout_s):
            self.close()
            raise timeout_error(request["name"], timeout_s)
        line = stdout.readline()
        if not line:
            self.close()
            return None
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def _readable(stream: IO[bytes], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([stream], [], [], left)
        if ready:
            return True


@contextmanager
def compile_servers() -> Iterator[None]:
    """Within this block, compiles (any thread) go to long-lived children; they are closed at its end."""
    global _SESSIONS
    with _LOCK:
        _SESSIONS += 1
    try:
        yield
    finally:
        with _LOCK:
            _SESSIONS -= 1
            closing = list(_ALL) if _SESSIONS == 0 else []
            if closing:
                _ALL.clear()
        for server in closing:
            server.close()


def served_compile(request: dict[str, Any], timeout_s: float, memory_bytes: int) -> dict[str, Any] | None:
    """The reply from this thread's long-lived child, or None outside :func:`compile_servers` or when the
    child died (the caller then compiles in a fresh child)."""
    if _SESSIONS == 0:
        return None
    servers: dict[int, CompileServer] = getattr(_LOCAL, "servers", None) or {}
    _LOCAL.servers = servers
    server = servers.get(memory_bytes)
    if server is None or not server.alive():
        server = CompileServer(memory_bytes)
        servers[memory_bytes] = server
        with _LOCK:
            _ALL.append(server)
    return server.request(request, timeout_s)


__all__ = ["CompileServer", "compile_servers", "served_compile"]
