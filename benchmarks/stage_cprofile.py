"""One pipeline stage's command, in this process, under ``cProfile.Profile(time.process_time)``: the CPU of
the stage's own process by function (children are counted apart), as the CLI and DVC run it.

Usage, from a folder whose ``.kernelcast`` is (a copy of) the state, with ``PYTHONPATH`` the code to measure::

    python benchmarks/stage_cprofile.py OUT.prof promote \
        --registration .kernelcast/data/models/tabular/registration.json \
        --allow-challenger --report .kernelcast/data/eval/promotion.json

then ``python -m pstats OUT.prof`` (``sort cumulative``, ``stats 40``).
"""

from __future__ import annotations

import cProfile
import resource
import sys
import time


def main(out: str, args: list[str]) -> None:
    from kernelcast.cli import app

    profile = cProfile.Profile(time.process_time)
    wall, cpu = time.time(), time.process_time()
    profile.enable()
    try:
        app(args, standalone_mode=False)
    except SystemExit as exc:
        print(f"exit {exc.code}")
    finally:
        profile.disable()
        profile.dump_stats(out)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        print(
            f"wall {time.time() - wall:.1f} s, process CPU {time.process_time() - cpu:.1f} s, "
            f"children CPU {children.ru_utime + children.ru_stime:.1f} s",
            file=sys.stderr,
        )


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit("usage: stage_cprofile.py OUT.prof <kernelcast command and options>")
    main(sys.argv[1], sys.argv[2:])
