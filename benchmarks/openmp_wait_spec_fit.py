"""One spec-tier fit (``components.opmodel.spec.fit``) under the current ``OMP_WAIT_POLICY``: wall, CPU of the
process (all threads) and a digest of the boosters, to compare spinning and passive OpenMP waiting on the same
measured store. Run it twice, with and without the policy (docs/pipeline-time.md)::

    KERNELCAST_HOME=... python benchmarks/openmp_wait_spec_fit.py 3000 150
    KERNELCAST_HOME=... OMP_WAIT_POLICY=PASSIVE python benchmarks/openmp_wait_spec_fit.py 3000 150

Arguments: training rows per group (``spec.training_rows``; train uses 3000, the gate 600) and boosting
rounds (train 150, the gate 40). The first GPU of the store is left out, as an inner fold would be.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("per_group", type=int)
    parser.add_argument("rounds", type=int)
    args = parser.parse_args()
    from components.devices.catalog import load_catalog
    from components.opmodel import spec as spec_tier
    from components.opmodel.store import load_store
    from components.opmodel.train import ensure_store
    from components.platform.config import get_settings

    settings = get_settings()
    store = load_store(ensure_store(settings), ("gemm", "attention", "moe", "bmm"))
    catalog = load_catalog()
    rows = spec_tier.training_rows(store, Path(settings.datasets_dir), per_group=args.per_group)
    specs = {
        str(d): catalog.get(str(d)) for f in rows.values() for d in f["device_id"].unique() if d in catalog
    }
    held = sorted(specs)[0]
    train = {f: r[r["device_id"] != held] for f, r in rows.items()}
    wall, cpu = time.perf_counter(), time.process_time()
    model = spec_tier.fit(train, specs, rounds=args.rounds)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    text = "".join(booster.model_to_string() for _, booster in sorted(model.boosters.items()))
    print(
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')} per_group={args.per_group} "
        f"rounds={args.rounds}: wall {wall:.1f} s, CPU {cpu:.1f} s, "
        f"boosters {hashlib.sha256(text.encode()).hexdigest()[:16]}"
    )


if __name__ == "__main__":
    main()
