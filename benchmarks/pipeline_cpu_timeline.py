"""Where a running pipeline's two cores go: sample a process tree's CPU, then per stage and per role.

``record PID OUT`` appends, every PERIOD seconds until PID exits, one line per sample: time, load average and
every process of PID's tree (pid, parent, CPU seconds of its own and of the children it reaped, state,
command). ``stages OUT`` prints each DVC stage's (``dvc repro --single-item STAGE``) first and last sighting
and its CPU (its subtree, reaped children included); ``timeline OUT STAGE [BUCKET]`` prints that stage's CPU
per BUCKET seconds by role -- the stage's own process (``main``), its spawned side process (``side``), Ray
workers, Ray's own processes, other children -- so a core left idle shows as a bucket below 2 x BUCKET.
CPU seconds are the load-independent figure on a shared box. Usage::

    python benchmarks/pipeline_cpu_timeline.py record $(pgrep -f 'kernelcast pipeline' | head -1) cpu.tsv &
    python benchmarks/pipeline_cpu_timeline.py stages cpu.tsv
    python benchmarks/pipeline_cpu_timeline.py timeline cpu.tsv evaluate 20
"""

from __future__ import annotations

import collections
import os
import sys
import time


def _tree(root: int) -> list[str]:
    info: dict[int, tuple[int, float, float, str, str]] = {}
    kids: dict[int, list[int]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat, open(f"/proc/{entry}/cmdline") as cmdline:
                text, command = stat.read(), cmdline.read().replace("\0", " ")[:160].replace("\t", " ")
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        user, system, child_user, child_system = map(int, fields[11:15])
        info[int(entry)] = (
            int(fields[1]),
            (user + system) / tick,
            (child_user + child_system) / tick,
            fields[0],
            command,
        )
        kids.setdefault(int(fields[1]), []).append(int(entry))
    if root not in info:
        return []
    rows, todo = [], [root]
    while todo:
        pid = todo.pop()
        todo += kids.get(pid, [])
        parent, own, reaped, state, command = info[pid]
        rows.append(f"{pid}:{parent}:{own:.2f}:{reaped:.2f}:{state}:{command}")
    return rows


def record(root: int, out: str, period: float = 2.0) -> None:
    with open(out, "a", buffering=1) as handle:
        while rows := _tree(root):
            with open("/proc/loadavg") as loadavg:
                load = loadavg.read().split()[0]
            handle.write(f"{time.time():.1f}\t{load}\t" + "\t".join(rows) + "\n")
            time.sleep(period)


def _samples(path: str):
    with open(path) as handle:
        lines = handle.readlines()
    for line in lines:
        fields = line.rstrip("\n").split("\t")
        procs = {}
        for item in fields[2:]:
            pid, parent, own, reaped, state, command = item.split(":", 5)
            procs[pid] = (parent, float(own) + float(reaped), state, command)
        yield float(fields[0]), procs


def _stage_of(pid: str, procs: dict) -> str | None:
    while pid in procs:
        if "--single-item" in procs[pid][3]:
            return procs[pid][3].split("--single-item")[1].split()[0]
        pid = procs[pid][0]
    return None


def stages(path: str) -> None:
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    cpu: dict[str, float] = {}
    start = None
    for when, procs in _samples(path):
        start = start if start is not None else when
        sums: collections.Counter[str] = collections.Counter()
        for pid, (_, seconds, _, command) in procs.items():
            stage = _stage_of(pid, procs) or ("prefect server" if "prefect server" in command else "flow")
            sums[stage] += seconds
        for stage, seconds in sums.items():
            first.setdefault(stage, when)
            last[stage], cpu[stage] = when, seconds
    for stage in first:
        wall = max(1.0, last[stage] - first[stage])
        print(
            f"{stage:16s} {first[stage] - start:7.0f} .. {last[stage] - start:7.0f} s  wall {wall:6.0f} s  "
            f"CPU {cpu[stage]:7.1f} s  ({cpu[stage] / wall:.2f} cores)"
        )


def _role(command: str) -> str:
    if "multiprocessing" in command:
        return "side"
    if command.startswith("ray::") or "default_worker.py" in command:
        return "ray-worker"
    if "/ray/" in command:
        return "ray"
    if "--single-item" in command:
        return "dvc"
    if "kernelcast " in command:
        return "main"
    return "child:" + (command.split() or ["?"])[0].rsplit("/", 1)[-1][:20]


def timeline(path: str, stage: str, bucket: float = 20.0) -> None:
    previous: dict[str, float] = {}
    buckets: dict[int, collections.Counter[str]] = {}
    start = None
    for when, procs in _samples(path):
        start = start if start is not None else when
        for pid, (_, seconds, _, command) in procs.items():
            if _stage_of(pid, procs) != stage:
                continue
            spent = seconds - previous.get(pid, 0.0)
            previous[pid] = seconds
            buckets.setdefault(int((when - start) // bucket), collections.Counter())[_role(command)] += spent
    for index, roles in buckets.items():
        parts = "  ".join(
            f"{role}={seconds:5.1f}" for role, seconds in sorted(roles.items()) if seconds > 0.05
        )
        print(f"{index * bucket:6.0f} s  {parts}")


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "record":
        record(int(rest[0]), rest[1], float(rest[2]) if len(rest) > 2 else 2.0)
    elif command == "stages":
        stages(rest[0])
    else:
        timeline(rest[0], rest[1], float(rest[2]) if len(rest) > 2 else 20.0)
