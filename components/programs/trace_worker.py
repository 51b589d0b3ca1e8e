"""The sandboxed child that traces PyTorch modules: run only by ``components.programs.trace``.

Protocol: one JSON object on stdin ``{"jobs": [{"name", "path"|"text"}, ...], "per_module_s",
"memory_bytes"}``; one JSON line per job on the inherited descriptor ``KERNELCAST_TRACE_FD`` (the
module's own prints go to stderr), ``{"index", "ok", "ops"|"error", "reason", "seconds"}``.
Limits: the address space (RLIMIT_AS) for the whole child, a wall-clock alarm per module; the
network is refused (a private network namespace where the kernel allows it, and
``socket`` patched to refuse in any case). Tensors are fake: no data is ever allocated, and no GPU
is touched.

Imports only the standard library and torch (never the project), so the child starts fast.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
import traceback
from typing import Any, Self

from components.programs.trace_fake_ops import out_of_memory, real_weights_memory

MAX_OPS = 200_000  # a module launching more kernels than this is refused (a runaway loop)


class ModuleTimeout(BaseException):
    """Raised by the alarm; a BaseException so user code's ``except Exception`` cannot swallow it."""


class NetworkRefused(PermissionError):
    pass


def _refuse(*_args: Any, **_kwargs: Any) -> Any:
    raise NetworkRefused("network access is disabled while tracing a module")


def block_network() -> None:
    """A private, empty network namespace when permitted; socket creation refused either way."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.unshare(0x40000000)  # CLONE_NEWNET; fails quietly without the privilege
    except (OSError, AttributeError):
        pass
    import _socket
    import socket

    class RefusedSocket(socket.socket):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            _refuse()

    socket.socket = RefusedSocket  # type: ignore[misc]
    _socket.socket = RefusedSocket  # type: ignore[misc]
    for name in (
        "create_connection",
        "getaddrinfo",
        "gethostbyname",
        "gethostbyname_ex",
        "socketpair",
        "create_server",
        "fromfd",
    ):
        if hasattr(socket, name):
            setattr(socket, name, _refuse)
        if hasattr(_socket, name):
            setattr(_socket, name, _refuse)


def limit_memory(memory_bytes: int) -> None:
    if memory_bytes > 0:
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def _jsonable(value: Any) -> Any:
    """Scalars and (nested) lists of them; anything else (tensors, objects) as None."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        if len(value) > 16:
            return None
        return [_jsonable(v) for v in value]
    try:  # torch.SymInt, torch.dtype, memory_format, ...
        return str(value)
    except Exception:
        return None


# The host side of an eager forward, counted between aten calls and carried on the next recorded one (what
# runs after the last goes on the last): ``mods`` nn.Module calls, ``fns`` torch API calls from Python.
HOST_KEYS = ("mods", "fns")


def _host_counting(recorder: Any) -> Any:
    """A context that counts ``HOST_KEYS`` into ``recorder.host`` while the forward runs."""
    import contextlib

    import torch
    from torch.overrides import TorchFunctionMode

    class CountCalls(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            recorder.host["fns"] += not recorder.paused
            return func(*args, **(kwargs or {}))

    def count_module(_module: Any, _inputs: Any) -> None:
        recorder.host["mods"] += not recorder.paused

    @contextlib.contextmanager
    def counting() -> Any:
        handle = torch.nn.modules.module.register_module_forward_pre_hook(count_module)
        try:
            with CountCalls():
                yield
        finally:
            handle.remove()
            for key, value in recorder.host.items():
                if recorder.ops and value:
                    recorder.ops[-1][key] = recorder.ops[-1].get(key, 0) + value
            recorder.host = dict.fromkeys(HOST_KEYS, 0)

    return counting()


def _recorder():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from components.programs.trace_fake_ops import grouped_mm_any_dtype

    def describe(values: Any) -> list[list[Any]]:
        flat, _ = tree_flatten(values)
        return [
            [list(int(s) for s in v.shape), str(v.dtype).removeprefix("torch."), bool(v.is_contiguous())]
            for v in flat
            if isinstance(v, torch.Tensor)
        ]

    class Recorder(TorchDispatchMode):
        """Every aten call with its tensors' shapes/dtypes and its non-tensor arguments."""

        def __init__(self) -> None:
            super().__init__()
            self.ops: list[dict[str, Any]] = []
            self.paused = 0
            self.host = dict.fromkeys(HOST_KEYS, 0)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = grouped_mm_any_dtype(func, args, kwargs)
            if self.paused:
                return out
            if len(self.ops) >= MAX_OPS:
                raise RuntimeError(f"more than {MAX_OPS} aten calls: refusing to trace further")
            scalars = [
                None
                if isinstance(a, torch.Tensor)
                or (isinstance(a, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in a))
                else _jsonable(a)
                for a in args
            ]
            self.ops.append(
                {
                    "aten": str(func.overloadpacket.__name__),
                    "overload": str(func._overloadname),
                    "view": bool(func.is_view),
                    "inputs": describe((args, kwargs)),
                    "outputs": describe(out),
                    "scalars": scalars,
                    "kwargs": {k: _jsonable(v) for k, v in kwargs.items() if not isinstance(v, torch.Tensor)},
                    **{k: v for k, v in self.host.items() if v},
                }
            )
            self.host = dict.fromkeys(HOST_KEYS, 0)
            return out

    return Recorder


def _call(what: str, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except (ModuleTimeout, MemoryError):
        raise
    except Exception as exc:
        why = ""
        if type(exc).__name__ == "DynamicOutputShapeException":  # the op's output size depends on data
            why = (
                " (an output whose size depends on tensor values, e.g. MoE token routing: "
                "not traceable on fake tensors)"
            )
        raise RuntimeError(f"{what} failed: {type(exc).__name__}: {exc}{why}") from exc


# Failures of fake construction that real (CPU) weights avoid: a data-dependent ``.item()`` in
# __init__ (drop-path schedules), or a tensor made outside the fake mode meeting a fake one.
RETRY_WITH_REAL_WEIGHTS = ("DataDependentOutputException", "Mixing fake modes")


def trace_one(job: dict[str, Any], recorder_cls: Any) -> dict[str, Any]:
    """Run the module's forward (with ``train``: a whole training step) on fake inputs and record
    its aten calls: ``{"ops": [...]}`` plus, for a training step, ``"memory"`` (bytes of state).

    First with everything fake; if construction needs real values, again with real CPU weights
    (within the memory limit) and fake inputs -- the forward never touches real data either way.
    """
    name = job.get("name") or "module"
    if job.get("path"):
        with open(job["path"], encoding="utf-8") as handle:
            text = handle.read()
        filename = job["path"]
    else:
        text, filename = job.get("text") or "", f"<{name}>"
    code = compile(text, filename, "exec")
    train = bool(job.get("train"))
    try:
        return _trace(code, filename, recorder_cls, real_weights=False, train=train)
    except RuntimeError as exc:
        if not any(marker in str(exc) for marker in RETRY_WITH_REAL_WEIGHTS):
            raise
        fake_error = str(exc).splitlines()[0][:300]
    with real_weights_memory(fake_error):
        return _trace(code, filename, recorder_cls, real_weights=True, train=train)


RNN_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


class _RecordedVF:
    """Stands in for ``torch.nn.modules.rnn._VF``: on CPU, ``_VF.lstm``/``gru`` decompose into one
    cell per time step (thousands of aten calls), while CUDA eager runs one cuDNN RNN per layer.
    Records one ``_cudnn_rnn`` call per layer (input, gate weights) and hides the decomposition."""

    def __init__(self, vf: Any, recorder: Any) -> None:
        self._vf, self._recorder = vf, recorder

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._vf, name)
        if name not in RNN_GATES:
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            self._record(name, args)
            self._recorder.paused += 1
            try:
                return target(*args, **kwargs)
            finally:
                self._recorder.paused -= 1

        return call

    def _record(self, name: str, args: tuple[Any, ...]) -> None:
        import torch

        x = args[0]
        if not isinstance(x, torch.Tensor) or x.dim() != 3:
            return  # packed sequences and cell calls: let the decomposition be recorded
        hx = args[1][0] if isinstance(args[1], (list, tuple)) else args[1]
        layers, bidirectional, batch_first = int(args[4]), bool(args[7]), bool(args[8])
        dirs = 2 if bidirectional else 1
        hidden = int(hx.shape[-1])
        steps, batch = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
        dtype = str(x.dtype).removeprefix("torch.")
        gates = RNN_GATES[name] * hidden
        for layer in range(layers):
            width = int(x.shape[-1]) if layer == 0 else hidden * dirs
            self._recorder.ops.append(
                {
                    "aten": "_cudnn_rnn",
                    "overload": name,
                    "view": False,
                    "inputs": [
                        [[int(steps), int(batch), width], dtype, True],
                        [[gates * dirs, width], dtype, True],
                        [[gates * dirs, hidden], dtype, True],
                    ],
                    "outputs": [[[int(steps), int(batch), hidden * dirs], dtype, True]],
                    "scalars": [name, layer, dirs],
                    "kwargs": {},
                }
            )


def _cuda_target(device: Any, fake: bool) -> str | None:
    """``"cuda:N"`` for a CUDA device argument (``"cuda"``, ``torch.device("cuda")``, ``0``) of a fake
    tensor, ``"cpu"`` for a real one (the real-weights retry keeps its weights on the CPU); None for
    any other device. The string form is the one FakeTensorMode accepts on a CPU-only build."""
    import torch

    if isinstance(device, int) and not isinstance(device, bool):
        device = torch.device("cuda", device)
    if isinstance(device, str) and device.startswith("cuda"):
        device = torch.device(device)
    if not isinstance(device, torch.device) or device.type != "cuda":
        return None
    return f"cuda:{device.index or 0}" if fake else "cpu"


def _is_fake(tensor: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(tensor, FakeTensor)


class _FakeCuda:
    """While tracing: ``.cuda()``, ``.to("cuda")`` and ``Module.cuda()`` move fake tensors to a fake
    CUDA device instead of initialising a CUDA runtime (this torch has none, and the tracer never
    runs on a GPU). Why: many KernelBench-style modules move their own tensors with ``.cuda()`` or
    ``device="cuda"``; FakeTensorMode already makes factories with ``device="cuda"`` fake CUDA tensors."""

    def __enter__(self) -> Self:
        import torch

        self._saved = (torch.Tensor.to, torch.Tensor.cuda, torch.nn.Module.cuda, torch.nn.Module._apply)
        original_to = torch.Tensor.to

        def to(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            args = list(args)
            device = kwargs.get(
                "device", args[0] if args and not isinstance(args[0], (torch.dtype, torch.Tensor)) else None
            )
            target = _cuda_target(device, _is_fake(tensor))
            if target is not None:
                if "device" in kwargs:
                    kwargs["device"] = target
                else:
                    args.pop(0)
                    kwargs["device"] = target
                    if args and isinstance(args[0], torch.dtype):
                        kwargs["dtype"] = args.pop(0)
            return original_to(tensor, *args, **kwargs)

        def tensor_cuda(
            tensor: Any,
            device: Any = None,
            non_blocking: bool = False,
            memory_format: Any = torch.preserve_format,
        ) -> Any:
            return to(
                tensor,
                device="cuda" if device is None else device,
                non_blocking=non_blocking,
                memory_format=memory_format,
            )

        def module_cuda(module: Any, device: Any = None) -> Any:
            # Parameters and buffers replaced one by one: Module._apply cannot swap a fake CPU
            # tensor for a fake CUDA one in place.
            for sub in module.modules():
                for name, param in list(sub._parameters.items()):
                    if param is not None:
                        sub._parameters[name] = torch.nn.Parameter(
                            tensor_cuda(param.detach(), device), requires_grad=param.requires_grad
                        )
                for name, buffer in list(sub._buffers.items()):
                    if buffer is not None:
                        sub._buffers[name] = tensor_cuda(buffer, device)
            return module

        def module_apply(module: Any, fn: Any, recurse: bool = True) -> Any:
            # Module.to / .half() / .float() during the trace (HF MoE routers cast their classifier in
            # forward): Module._apply cannot swap a fake tensor in place ("Couldn't swap
            # Linear.weight"), so parameters and buffers are replaced one by one, as module_cuda does.
            for sub in module.modules() if recurse else [module]:
                for name, param in list(sub._parameters.items()):
                    if param is not None:
                        sub._parameters[name] = torch.nn.Parameter(
                            fn(param.detach()), requires_grad=param.requires_grad
                        )
                for name, buffer in list(sub._buffers.items()):
                    if buffer is not None:
                        sub._buffers[name] = fn(buffer)
            return module

        torch.Tensor.to, torch.Tensor.cuda = to, tensor_cuda
        torch.nn.Module.cuda, torch.nn.Module._apply = module_cuda, module_apply
        return self

    def __exit__(self, *_exc: object) -> None:
        import torch

        torch.Tensor.to, torch.Tensor.cuda, torch.nn.Module.cuda, torch.nn.Module._apply = self._saved


def _on_one_device(model: Any, inputs: Any) -> Any:
    """Model and inputs on the fake GPU when either is there, as the KernelBench harness puts them
    (``model.cuda()``, ``x.cuda()``); unchanged when neither touches CUDA."""
    import torch

    tensors = [*model.parameters(), *model.buffers()] if isinstance(model, torch.nn.Module) else []
    values = list(inputs or [])
    if not any(isinstance(t, torch.Tensor) and t.is_cuda for t in [*tensors, *values]):
        return inputs
    if isinstance(model, torch.nn.Module):
        model.cuda()
    return [v.cuda() if isinstance(v, torch.Tensor) and _is_fake(v) else v for v in values]


def _trace(
    code: Any, filename: str, recorder_cls: Any, *, real_weights: bool, train: bool = False
) -> dict[str, Any]:
    with _FakeCuda():
        return _trace_fake(code, filename, recorder_cls, real_weights=real_weights, train=train)


def _trace_fake(
    code: Any, filename: str, recorder_cls: Any, *, real_weights: bool, train: bool = False
) -> dict[str, Any]:
    import contextlib

    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    namespace: dict[str, Any] = {"__name__": "kernelcast_traced_module", "__file__": filename}
    mode = FakeTensorMode(allow_non_fake_inputs=real_weights)
    with contextlib.nullcontext() if real_weights else mode:
        exec(code, namespace)
        for needed in ("Model", "get_inputs", "get_init_inputs"):
            if needed not in namespace:
                raise LookupError(
                    f"no {needed} defined (a KernelBench-style module needs class Model, "
                    "get_inputs() and get_init_inputs())"
                )
        init_inputs = _call("get_init_inputs()", namespace["get_init_inputs"])
        model = _call("Model(*get_init_inputs())", namespace["Model"], *list(init_inputs or []))
    with mode:
        inputs = _call("get_inputs()", namespace["get_inputs"])
        if not real_weights:
            inputs = _call("moving the module to the GPU", _on_one_device, model, inputs)
        recorder = recorder_cls()

        def forward() -> None:
            import torch.nn.modules.rnn as rnn_module

            original = rnn_module._VF
            rnn_module._VF = _RecordedVF(original, recorder)
            try:
                if train:
                    with recorder, _host_counting(recorder):
                        output = model(*list(inputs or []))
                else:
                    with torch.no_grad(), recorder, _host_counting(recorder):
                        model(*list(inputs or []))
            finally:
                rnn_module._VF = original
            if train:
                _train_step(model, output, recorder, memory)

        memory: dict[str, float] = {}
        _call("forward", forward)
    return {"ops": recorder.ops, "memory": memory} if train else {"ops": recorder.ops}


def _train_step(model: Any, output: Any, recorder: Any, memory: dict[str, float]) -> None:
    """Backward from the sum of the outputs, then one Adam step written out as the aten ops
    ``torch.optim.Adam``'s single-tensor path runs per parameter (its own ``step`` reads a scalar
    with ``.item()``, which fake tensors cannot answer). Fills ``memory`` with the bytes of
    parameters, gradients, Adam's two moments and the forward's activations (every output of a
    forward op: what autograd may keep for the backward, an upper bound)."""
    import torch
    from torch.utils._pytree import tree_flatten

    forward_ops = len(recorder.ops)
    params = [p for p in model.parameters() if p.requires_grad] if isinstance(model, torch.nn.Module) else []
    outputs = [t for t in tree_flatten(output)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outputs:
        raise LookupError("nothing to train: no output of the forward depends on a parameter")
    with recorder:
        loss = sum(t.float().sum() for t in outputs)
        loss.backward()
    backward_ops = len(recorder.ops)
    lr, (b1, b2), eps = 1e-3, (0.9, 0.999), 1e-8
    with torch.no_grad():
        # Adam's moments exist before a step (made once, at the first): not part of the step's kernels
        state = [(p, torch.zeros_like(p), torch.zeros_like(p)) for p in params if p.grad is not None]
    with torch.no_grad(), recorder:
        for p, m, v in state:
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.addcdiv_(m, v.sqrt().add_(eps), value=-lr)
    for index, op in enumerate(recorder.ops):
        op["phase"] = (
            "forward" if index < forward_ops else "backward" if index < backward_ops else "optimizer"
        )
    param_bytes = float(sum(p.numel() * p.element_size() for p in params))
    memory["params"] = param_bytes
    memory["grads"] = param_bytes
    memory["optimizer"] = 2 * param_bytes
    memory["activations"] = float(
        sum(
            _bytes(shape, dtype)
            for op in recorder.ops[:forward_ops]
            if not op.get("view")
            for shape, dtype, _ in op.get("outputs", [])
        )
    )


_DTYPE_BYTES = {"float64": 8, "float32": 4, "int64": 8, "int32": 4, "float16": 2, "bfloat16": 2, "bool": 1}


def _bytes(shape: list[int], dtype: str) -> float:
    n = 1
    for s in shape:
        n *= int(s)
    return float(n * _DTYPE_BYTES.get(dtype, 4))


WARM_UP = """
import torch
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
    def forward(self, x):
        return torch.softmax(torch.relu(self.fc(x)) + 1.0, dim=-1).sum()
def get_inputs():
    return [torch.randn(4, 8)]
def get_init_inputs():
    return []
"""


def _on_alarm(_signum: int, _frame: Any) -> None:
    raise ModuleTimeout()


def main() -> int:
    protocol = os.fdopen(int(os.environ.get("KERNELCAST_TRACE_FD", "3")), "w", encoding="utf-8")
    os.dup2(2, 1)  # user prints never reach the protocol channel
    sys.stdout = sys.stderr
    request = json.loads(sys.stdin.read() or "{}")
    limit_memory(int(request.get("memory_bytes", 0)))
    per_module = float(request.get("per_module_s", 60.0))
    import torch  # before the network is cut: nothing to fetch, but keep the import path unchanged

    torch.set_num_threads(1)
    block_network()
    recorder_cls = _recorder()
    # Warm-up outside any module's time limit: the first fake forward pays torch's lazy imports
    # and dispatcher set-up (seconds on a loaded machine), which is no module's fault.
    _trace(compile(WARM_UP, "<warm-up>", "exec"), "<warm-up>", recorder_cls, real_weights=False)
    signal.signal(signal.SIGALRM, _on_alarm)
    for index, job in enumerate(request.get("jobs", [])):
        start = time.perf_counter()
        result: dict[str, Any] = {"index": index}
        try:
            signal.setitimer(signal.ITIMER_REAL, per_module)
            try:
                result.update(ok=True, **trace_one(job, recorder_cls))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except ModuleTimeout:
            result.update(
                ok=False, reason="timeout", error=f"did not finish within {per_module:g} s (time limit)"
            )
        except MemoryError as exc:
            why = str(exc) or "ran out of memory"
            result.update(ok=False, reason="memory", error=f"{why} (the tracer's memory limit)")
        except SyntaxError as exc:
            result.update(ok=False, reason="syntax", error=f"syntax error at line {exc.lineno}: {exc.msg}")
        except NetworkRefused as exc:
            result.update(ok=False, reason="network", error=str(exc))
        except LookupError as exc:
            result.update(ok=False, reason="interface", error=str(exc.args[0] if exc.args else exc))
        except Exception as exc:
            cause = exc.__cause__
            text = f"{type(exc).__name__}: {exc}"
            if isinstance(cause, NetworkRefused) or "network access is disabled" in text:
                result.update(
                    ok=False, reason="network", error="network access is disabled while tracing a module"
                )
            elif isinstance(cause, MemoryError) or out_of_memory(text):
                result.update(
                    ok=False, reason="memory", error="ran out of memory (the tracer's memory limit)"
                )
            else:
                tail = traceback.format_exc(limit=-1).strip().splitlines()[-1]
                result.update(
                    ok=False, reason="error", error=str(exc) if isinstance(exc, RuntimeError) else tail
                )
        result["seconds"] = round(time.perf_counter() - start, 3)
        protocol.write(json.dumps(result) + "\n")
        protocol.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
