"""CUDA C++ source kernels: NVRTC (cuda-python ``cuda.bindings.nvrtc``) -> cubin -> driver API launch.

The kernel runs on the primary context torch uses, on the legacy default stream, so torch's CUDA
events and ncu see it like any other kernel. Compilation works without a GPU (``compile_cubin``);
launching needs one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class CudaSourceError(RuntimeError):
    """NVRTC or the driver refused the kernel; the message carries the compiler log or error name."""


def _check(result: Any, what: str) -> Any:
    """cuda-python returns ``(status, *values)``; raise on a non-success status."""
    status, *values = result if isinstance(result, tuple) else (result,)
    if int(status) != 0:
        raise CudaSourceError(f"{what} failed: {status!r}")
    return values[0] if len(values) == 1 else values


def compile_cubin(source: str, name: str, arch: str, defines: dict[str, str] | None = None) -> bytes:
    """Compile ``source`` for ``arch`` (e.g. ``sm_90``) to a cubin with NVRTC; no GPU needed."""
    from cuda.bindings import nvrtc

    program = _check(
        nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], []), "nvrtcCreateProgram"
    )
    options = [f"--gpu-architecture={arch}".encode(), b"-default-device", b"-std=c++17"]
    options += [f"-D{k}={v}".encode() for k, v in (defines or {}).items()]
    status = nvrtc.nvrtcCompileProgram(program, len(options), options)[0]
    if int(status) != 0:
        size = _check(nvrtc.nvrtcGetProgramLogSize(program), "nvrtcGetProgramLogSize")
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(program, log)
        raise CudaSourceError(
            f"NVRTC could not compile {name}: {log.decode(errors='replace').strip()[:2000]}"
        )
    size = _check(nvrtc.nvrtcGetCUBINSize(program), "nvrtcGetCUBINSize")
    cubin = b" " * size
    _check(nvrtc.nvrtcGetCUBIN(program, cubin), "nvrtcGetCUBIN")
    return cubin


def _device_arch() -> str:
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return f"sm_{major}{minor}"


def _arguments(args: list[dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    """(kept-alive tensors, kernel argument values + ctypes types) for ``cuLaunchKernel``."""
    import ctypes

    import torch

    torch_dtypes = {
        "fp32": torch.float32,
        "fp16": torch.float16,
        "bf16": torch.bfloat16,
        "fp64": torch.float64,
        "int32": torch.int32,
    }
    keep, values, types = [], [], []
    for index, arg in enumerate(args):
        if "buffer" in arg:
            dtype = torch_dtypes[arg["buffer"]]
            count = int(arg["count"])
            tensor = (
                torch.zeros(count, dtype=dtype, device="cuda")
                if arg.get("init") == "zeros"
                else torch.rand(count, device="cuda").to(dtype)
            )
            keep.append(tensor)
            values.append(tensor.data_ptr())
            types.append(ctypes.c_void_p)
        elif "int" in arg:
            values.append(int(arg["int"]))
            types.append(ctypes.c_int)
        elif "float" in arg:
            values.append(float(arg["float"]))
            types.append(ctypes.c_float)
        else:
            raise CudaSourceError(f"args[{index}]: give buffer, int or float")
    return keep, (tuple(values), tuple(types))  # cuda-bindings 13 takes a tuple of (values, ctypes types)


def build_source(spec: dict[str, Any]) -> Callable[[], None]:
    """Compile for the attached GPU and return the launch (operands allocated once)."""
    import torch
    from cuda.bindings import driver

    torch.cuda.init()  # the primary context torch (and so the events/ncu) uses
    launch = spec["launch"]
    cubin = compile_cubin(spec["source"], spec["name"], _device_arch(), launch.get("defines"))
    module = _check(driver.cuModuleLoadData(cubin), "cuModuleLoadData")
    function = _check(driver.cuModuleGetFunction(module, spec["entry"].encode()), "cuModuleGetFunction")
    keep, kernel_args = _arguments(launch.get("args", []))
    grid, block = [int(x) for x in launch["grid"]], [int(x) for x in launch["block"]]
    shared = int(launch.get("shared_bytes", 0))

    def call() -> None:
        _check(
            driver.cuLaunchKernel(function, *grid, *block, shared, 0, kernel_args, 0),
            f"launch {spec['name']}",
        )

    call.keep_alive = (module, keep)  # type: ignore[attr-defined]
    return call
