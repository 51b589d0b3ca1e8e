"""Ray scheduling of profiling: one job per (device, suite chunk), placed by accelerator type.

- Placement: a GPU job asks for ``num_gpus=1`` and Ray's ``accelerator_type:<T>`` resource (Ray
  adds it to nodes it detects a GPU type on; KubeRay/``ray up`` node groups declare it), so an
  H100 chunk runs only on an H100 node; where nodes declare ``gpu_memory_gb``, a job also claims
  its GPU's memory (catalog). A host job asks for one CPU on the node the run started on.
- Idempotent: rows have stable ids; a job returns its rows (and the tool's raw output) and the
  driver writes the chunk's file atomically, once, when the job finishes -- so workers need no
  shared disk, a worker killed mid-chunk leaves nothing behind, Ray retries the job
  (``max_retries``), and no row is lost or duplicated. Chunks whose file exists are not resubmitted.
- Partial results kept: every finished chunk is its own file; a failed chunk does not undo others.
- Absent or busy devices are reported, not waited on forever: absent (no node offers the resource)
  fails before submitting; chunks not finished within ``timeout_s`` are cancelled and reported.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.profiling.backends import MeasureContext, get_backend
from components.profiling.cases import Case
from components.profiling.rows import write_chunk

# Test-only fault injection: "<chunk_id>:<marker file>" makes the worker measuring that chunk exit
# hard (os._exit) halfway through its first attempt -- to prove a killed worker loses nothing.
FAULT_ENV = "KERNELCAST_TEST_ONLY_FAULT_EXIT_CHUNK"
# Test-only hold: "<release file>" makes every job wait, before measuring, until that file exists --
# an explicit event, so a test of the timeout does not race the machine's speed.
HOLD_ENV = "KERNELCAST_TEST_ONLY_HOLD_CHUNKS_UNTIL"
HOLD_POLL_S = 0.05


# Custom resource GPU node groups declare (GB of GPU memory per node): jobs then claim their GPU's
# memory too, so a node never runs more profiling jobs than its GPUs hold.
GPU_MEMORY_RESOURCE = "gpu_memory_gb"


class DeviceUnavailable(RuntimeError):
    """The device to profile is not in the cluster (or no node offers its accelerator type)."""


@dataclass(frozen=True)
class Placement:
    device: str
    accelerator_type: str | None  # None: host (CPU) jobs
    num_gpus: float = 0.0
    num_cpus: float = 1.0
    gpu_memory_gb: float | None = None

    @property
    def resource(self) -> str | None:
        return f"accelerator_type:{self.accelerator_type}" if self.accelerator_type else None

    def options(self, max_retries: int, memory_resource: bool = False) -> dict[str, Any]:
        """Ray task options. ``memory_resource``: the cluster's GPU nodes declare a ``gpu_memory_gb``
        custom resource (infra node groups do), so a job also claims its GPU's memory there."""
        opts: dict[str, Any] = {
            "num_cpus": self.num_cpus,
            "num_gpus": self.num_gpus,
            "max_retries": max_retries,
            "retry_exceptions": False,
        }
        if self.resource:
            opts["resources"] = {self.resource: 0.001}
            if memory_resource and self.gpu_memory_gb:
                opts["resources"][GPU_MEMORY_RESOURCE] = self.gpu_memory_gb
        return opts


def ray_accelerator_type(device_id: str, vendor: str) -> str:
    """Ray's accelerator-type label for a catalog device: ``H100``, ``A100``, ``L4``,
    ``AMD-Instinct-MI300X``..."""
    head = device_id.split("-")[0].upper()
    if vendor.lower() == "amd" and head.startswith("MI"):
        return f"AMD-Instinct-{head}"
    if head in ("RTX", "RADEON", "RX", "TITAN"):
        return device_id.upper()
    return head


def placement_for(device: str, backend: str, catalog: Any | None = None) -> Placement:
    """Where jobs for ``device`` run: the host, or a node with that GPU type (catalog name or alias)."""
    if backend == "host" or device == "host":
        if backend != "host" or device != "host":
            raise DeviceUnavailable(
                f"--device {device} --backend {backend}: the host backend profiles --device host only"
            )
        return Placement("host", None)
    if catalog is None:
        from components.devices import load_catalog

        catalog = load_catalog()
    try:
        spec = catalog.resolve(device)
    except LookupError as exc:
        raise DeviceUnavailable(f"--device {device}: not a catalog GPU ({exc})") from None
    return Placement(
        spec.id,
        ray_accelerator_type(spec.id, spec.vendor),
        num_gpus=1.0,
        gpu_memory_gb=float(spec.memory_gb) if spec.memory_gb else None,
    )


def local_device(catalog: Any | None = None) -> str:
    """The catalog id of the GPU this process sees (a deployment that names no device profiles the
    GPU of the node it landed on)."""
    try:
        import torch

        name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        name = None
    if name is None:
        raise DeviceUnavailable("no --device given and no GPU on this machine: name the device to profile")
    if catalog is None:
        from components.devices import load_catalog

        catalog = load_catalog()
    try:
        return catalog.resolve(name).id
    except LookupError:
        raise DeviceUnavailable(
            f"this machine's GPU {name!r} is not in the catalog; add it first (kernelcast devices add)"
        ) from None


def check_available(placement: Placement) -> None:
    """Raise ``DeviceUnavailable`` when no live node can ever run this placement."""
    import ray

    resources = ray.cluster_resources()
    if placement.resource is None:
        if resources.get("CPU", 0) < placement.num_cpus:
            raise DeviceUnavailable("--device host: the Ray cluster has no CPU to run on")
        return
    offered = sorted(k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:"))
    if resources.get("GPU", 0) < placement.num_gpus or placement.resource not in resources:
        raise DeviceUnavailable(
            f"--device {placement.device}: no Ray node offers {placement.resource} with a GPU "
            f"(the cluster has: {', '.join(offered) or 'no GPU nodes'}); not waiting for one"
        )


@dataclass(frozen=True)
class ChunkJob:
    run_dir: str
    chunk_id: str
    index: int
    cases: list[dict[str, Any]]
    backend: str
    device: str
    run_id: str
    warmup: int
    repeats: int
    l2_flush: bool
    datasets_dir: str | None = None
    fault: str | None = None  # FAULT_ENV's value, forwarded by the driver (tests only)
    hold: str | None = None  # HOLD_ENV's value, forwarded by the driver (tests only)


@dataclass
class ScheduleReport:
    done: dict[str, int] = field(default_factory=dict)  # chunk id -> rows written
    reused: list[str] = field(default_factory=list)  # chunk files already there (resumed run)
    failed: dict[str, str] = field(default_factory=dict)  # chunk id -> why
    timed_out: list[str] = field(default_factory=list)  # not finished within the timeout (busy/absent)

    def as_dict(self) -> dict[str, Any]:
        return {"done": self.done, "reused": self.reused, "failed": self.failed, "timed_out": self.timed_out}


def chunk_path(run_dir: Path | str, chunk_id: str) -> Path:
    return Path(run_dir) / "chunks" / f"{chunk_id}.jsonl"


def _wait_for_release(job: ChunkJob) -> None:
    """Test-only: block until the release file named by HOLD_ENV exists (never, for a timeout test)."""
    if not job.hold:
        return
    while not Path(job.hold).exists():
        time.sleep(HOLD_POLL_S)


def _inject_fault(job: ChunkJob, cases: list[Case], ctx: MeasureContext) -> None:
    """Test-only: measure half the chunk, then die hard, once (the marker file says it happened)."""
    if not job.fault:
        return
    chunk_id, _, marker = job.fault.partition(":")
    if chunk_id != job.chunk_id or Path(marker).exists():
        return
    backend = get_backend(job.backend)
    partial = backend.measure(cases[: max(1, len(cases) // 2)], ctx)
    # What a killed worker leaves: rows written somewhere that is not the chunk file.
    write_chunk(Path(job.run_dir) / "chunks" / f".{job.chunk_id}.partial", partial)
    Path(marker).write_text(str(os.getpid()))
    os._exit(1)


# Raw tool output a job sends back with its rows (ncu CSV, rocprofv3 CSVs); larger files are left out.
MAX_RAW_BYTES = 64 * 1024 * 1024


def measure_chunk(job: ChunkJob) -> dict[str, Any]:
    """Measure one chunk; return its rows and the tool's raw output. Runs in a Ray worker on the
    device's node (or in-process). The driver writes the chunk file, so workers need no shared disk."""
    import tempfile

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _wait_for_release(job)
    cases = [Case.from_json(c) for c in job.cases]
    with tempfile.TemporaryDirectory(prefix=f"kc-{job.chunk_id}-") as raw_dir:
        ctx = MeasureContext(
            device=job.device,
            run_id=job.run_id,
            warmup=job.warmup,
            repeats=job.repeats,
            l2_flush=job.l2_flush,
            raw_dir=Path(raw_dir),
            datasets_dir=Path(job.datasets_dir) if job.datasets_dir else None,
        )
        backend = get_backend(job.backend)
        backend.check()
        _inject_fault(job, cases, ctx)
        # A case this backend cannot measure (CUDA source on AMD, a program on the host) is a row
        # with the reason, never a silent gap.
        supported = [c for c in cases if c.kind in backend.kinds]
        rows = backend.measure(supported, ctx) if supported else []
        if len(supported) < len(cases):
            from components.profiling.backends.base import unsupported

            env = backend.environment()
            rows += [
                unsupported(ctx, env, job.backend, c, f"{job.backend} backend cannot measure {c.kind} cases")
                for c in cases
                if c.kind not in backend.kinds
            ]
        raw = {
            str(p.relative_to(raw_dir)): p.read_bytes()
            for p in sorted(Path(raw_dir).rglob("*"))
            if p.is_file() and p.stat().st_size <= MAX_RAW_BYTES
        }
    for row in rows:
        row["chunk_id"] = job.chunk_id
    return {"chunk_id": job.chunk_id, "rows": rows, "raw": raw, "pid": os.getpid()}


def save_chunk(job: ChunkJob, result: dict[str, Any]) -> int:
    """Write a finished job's raw output, then its rows (atomically: the chunk file is all or nothing)."""
    from components.common.atomic import atomic_write_bytes

    for name, data in result.get("raw", {}).items():
        atomic_write_bytes(Path(job.run_dir) / "raw" / job.chunk_id / name, data)
    return write_chunk(chunk_path(job.run_dir, job.chunk_id), result["rows"])


def _todo(jobs: list[ChunkJob], report: ScheduleReport) -> list[ChunkJob]:
    """Jobs whose chunk file is not there yet (a resumed run measures only the rest)."""
    todo = []
    for job in jobs:
        if chunk_path(job.run_dir, job.chunk_id).exists():
            report.reused.append(job.chunk_id)
        else:
            todo.append(job)
    return todo


def run_jobs(
    jobs: list[ChunkJob], placement: Placement, *, timeout_s: float, max_retries: int = 3
) -> ScheduleReport:
    """Submit every chunk job to Ray with ``placement``; wait at most ``timeout_s`` in all."""
    import ray
    from ray.exceptions import GetTimeoutError, RayError

    check_available(placement)
    options = placement.options(max_retries, memory_resource=GPU_MEMORY_RESOURCE in ray.cluster_resources())
    if placement.resource is None:
        # "host" is the machine this run was started on (a driver, or a Ray task pinned to a node):
        # its chunks stay on that node, or they would time a different CPU.
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
            node_id=ray.get_runtime_context().get_node_id(), soft=False
        )
    remote = ray.remote(measure_chunk).options(**options)
    report = ScheduleReport()
    pending = {remote.remote(job): job for job in _todo(jobs, report)}
    deadline = time.monotonic() + timeout_s
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=remaining)
        for ref in ready:
            job = pending.pop(ref)
            try:
                result = ray.get(ref, timeout=max(1.0, remaining))
            except (RayError, GetTimeoutError) as exc:
                report.failed[job.chunk_id] = (
                    f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"
                )
                continue
            report.done[job.chunk_id] = save_chunk(job, result)
    for ref, job in pending.items():  # busy (never scheduled) or too slow: reported, not waited on
        ray.cancel(ref, force=True)
        report.timed_out.append(job.chunk_id)
    return report


def run_jobs_local(jobs: list[ChunkJob]) -> ScheduleReport:
    """The same jobs in this process, one after another (``--no-ray``; a laptop without Ray)."""
    report = ScheduleReport()
    for job in _todo(jobs, report):
        try:
            result = measure_chunk(job)
        except Exception as exc:  # the chunk is reported; the others still run
            report.failed[job.chunk_id] = f"{type(exc).__name__}: {exc}"
            continue
        report.done[job.chunk_id] = save_chunk(job, result)
    return report
