"""The op engine's fit (``train_engine``, as train's spawned process calls it) or the
``aiconfigurator-unseen-gpu`` gate entry (``gate_entry``, as evaluate's side process calls it), timed, with
the stages' environment (``configure_environment``: OpenMP waits passively) or, with ``--spinning``, without
it (libgomp's default). Run both side by side, each with its own ``KERNELCAST_HOME`` holding the built
measured store, then compare the outputs (docs/pipeline-time.md)::

    KERNELCAST_HOME=A python benchmarks/openmp_wait_stage_parts.py engine OUT_A
    KERNELCAST_HOME=B python benchmarks/openmp_wait_stage_parts.py engine OUT_B --spinning
    for d in OUT_A OUT_B; do (cd $d && find . -type f | sort | xargs sha256sum) > $d.sums; done
    diff OUT_A.sums OUT_B.sums

``aic OUT.json`` writes the gate entry without its ``seconds``, for ``cmp``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("engine", "aic"))
    parser.add_argument("out", type=Path)
    parser.add_argument("--spinning", action="store_true", help="leave OMP_WAIT_POLICY as it is (unset)")
    args = parser.parse_args()
    from components.platform.config import get_settings

    settings = get_settings()
    if not args.spinning:
        from components.platform.runtime import configure_environment

        configure_environment(settings)
    from components.opmodel.train import ensure_store, train_engine

    store = ensure_store(settings, print)
    wall, cpu = time.perf_counter(), time.process_time()
    if args.part == "engine":
        train_engine(settings, args.out, print)
    else:
        from components.evaluation.opmodel_bench import gate_entry

        entry = gate_entry("aiconfigurator-unseen-gpu", store, Path(settings.datasets_dir))
        entry.pop("seconds")
        args.out.write_text(json.dumps(entry, sort_keys=True, indent=1))
    print(
        f"{args.part}: OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}: "
        f"wall {time.perf_counter() - wall:.1f} s, CPU {time.process_time() - cpu:.1f} s"
    )


if __name__ == "__main__":
    main()
