"""Long-lived NVRTC children (static.compile_server) give what a fresh child per compile gives: the same
cubin and log, the same compile error, the same time-limit error; a child that dies is replaced and the
compile still answers. Real NVRTC (no GPU needed)."""

from __future__ import annotations

import pytest

from components.features.static import compile_server
from components.features.static.compile import CompileError, build_options, compile_to_cubin
from components.features.static.sass import parse_ptxas_log

KERNEL = "__global__ void scale(float* a, float s) { a[threadIdx.x] *= s; }\n"
BROKEN = "__global__ void scale(float* a) { a[threadIdx.x] = undefined_name; }\n"
OPTIONS = build_options("sm_90", [])


def _servers_alive() -> list[int]:
    servers = getattr(compile_server._LOCAL, "servers", {}) or {}
    return [s.proc.pid for s in servers.values() if s.alive()]


def test_served_compile_matches_a_fresh_child_and_reuses_one_process() -> None:
    fresh = compile_to_cubin(KERNEL, "k.cu", OPTIONS)
    with compile_server.compile_servers():
        first = compile_to_cubin(KERNEL, "k.cu", OPTIONS)
        pids = _servers_alive()
        second = compile_to_cubin(KERNEL, "k.cu", OPTIONS)
        assert _servers_alive() == pids and len(pids) == 1
    assert _servers_alive() == []  # closed with the block
    assert first.cubin == fresh.cubin == second.cubin
    assert parse_ptxas_log(first.log) and parse_ptxas_log(first.log) == parse_ptxas_log(
        fresh.log
    )  # the log also holds ptxas's own time


def test_served_compile_error_is_the_fresh_childs() -> None:
    with pytest.raises(CompileError) as fresh:
        compile_to_cubin(BROKEN, "bad.cu", OPTIONS)
    with compile_server.compile_servers(), pytest.raises(CompileError) as served:
        compile_to_cubin(BROKEN, "bad.cu", OPTIONS)
    assert served.value.reason == fresh.value.reason == "compilation failed"
    assert served.value.log == fresh.value.log and "undefined_name" in served.value.log


def test_a_dead_child_is_replaced_and_the_compile_answers() -> None:
    with compile_server.compile_servers():
        compile_to_cubin(KERNEL, "k.cu", OPTIONS)
        (pid,) = _servers_alive()
        servers = compile_server._LOCAL.servers
        for server in servers.values():
            server.proc.kill()
            server.proc.wait()
        again = compile_to_cubin(KERNEL, "k.cu", OPTIONS)
        assert again.cubin and _servers_alive() and _servers_alive() != [pid]


def test_served_time_limit_is_the_same_error() -> None:
    with pytest.raises(CompileError) as fresh:
        compile_to_cubin(KERNEL, "k.cu", OPTIONS, timeout_s=0.001)
    with compile_server.compile_servers(), pytest.raises(CompileError) as served:
        compile_to_cubin(KERNEL, "k.cu", OPTIONS, timeout_s=0.001)
    assert served.value.reason == fresh.value.reason == "time limit exceeded"
