"""The gate's side entries (the op engine's splits and the serving splits) as ``report.gate_report`` computes
them beside the candidate's splits, on a trained state: wall, the CPU of each side process, and the entries
written without their ``seconds``/``timings`` for comparison with a full gate report (``compare``).

Before the change the four ran one after the other in one spawned process; now the op engine's splits run in
one and the serving splits in another, side by side. Usage, from the project root, with ``KERNELCAST_HOME`` a
state folder holding the measured store and ``KERNELCAST_DATASETS_DIR`` the datasets::

    PYTHONPATH=. python benchmarks/gate_side_processes.py run PREDICTOR_DIR OUT.json
    PYTHONPATH=. python benchmarks/gate_side_processes.py one PREDICTOR_DIR OUT.json  (before: one process)
    python benchmarks/gate_side_processes.py compare OUT.json GATE_REPORT.json

The CPU of each side process is read from ``/proc`` while it runs (every second, its last reading), so it
counts the whole process (imports and the engine's build included).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

VOLATILE = ("seconds", "timings")  # what differs run to run


def _cpu(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _watch(side, seen: dict[int, float], stop: threading.Event) -> None:
    while not stop.is_set():
        for index, pool in enumerate(side._pools):
            for pid in list(getattr(pool, "_processes", None) or {}):
                cpu = _cpu(pid)
                if cpu is not None:
                    seen[index] = cpu
        stop.wait(1.0)


def run(predictor_dir: Path, out: Path, one: bool = False) -> None:
    from components.evaluation import report
    from components.models import load_predictor
    from components.platform.config import OPMODEL_SPLITS, SERVING_SPLITS, get_settings, load_params
    from components.platform.runtime import configure_environment
    from components.registry.gate import read_policy

    settings = get_settings()
    configure_environment(settings)
    splits = read_policy(load_params(settings.params_file)).splits
    predictor = load_predictor(predictor_dir)
    canonical = settings.data_dir / "canonical"
    if one:  # the side entries before: every one in turn in a single spawned process
        pool = report._spawned_pool()
        report._spawned_pool = lambda: pool
    started = time.perf_counter()
    side = report._SideEntries(
        [s for s in splits if s in OPMODEL_SPLITS],
        canonical,
        [s for s in splits if s in SERVING_SPLITS],
        predictor,
    )
    seen: dict[int, float] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(side, seen, stop), daemon=True)
    watcher.start()
    entries = side.results()
    stop.set()
    watcher.join()
    wall = time.perf_counter() - started
    for split, entry in entries.items():
        print(f"{split}: {entry['status']}, {entry.get('seconds')} s")
    print(
        f"side entries: wall {wall:.1f} s; CPU per side process: "
        + ", ".join(f"{cpu:.1f} s" for _, cpu in sorted(seen.items()))
    )
    kept = {s: {k: v for k, v in e.items() if k not in VOLATILE} for s, e in entries.items()}
    out.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")


def compare(ours: Path, report: Path) -> None:
    entries = json.loads(ours.read_text())
    theirs = json.loads(report.read_text())["splits"]
    for split, entry in entries.items():
        other = {k: v for k, v in theirs[split].items() if k not in VOLATILE}
        print(f"{split}: {'identical' if entry == other else 'DIFFERENT'}")


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[1] not in ("run", "one", "compare"):
        sys.exit(__doc__)
    first, second = Path(sys.argv[2]), Path(sys.argv[3])
    if sys.argv[1] == "compare":
        compare(first, second)
    else:
        run(first, second, one=sys.argv[1] == "one")


if __name__ == "__main__":
    main()
