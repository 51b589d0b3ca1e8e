"""Dump the op engine's answers to a few hundred op questions as JSON, to compare two ways of loading it.

The engine comes from ``engine_for``, as the CLI's does (the state folder's measured store). The questions
are random GEMM and attention shapes, seeded, in bf16/fp8/fp16/int8_wo, on every GPU of the store plus B200
and RTX 4090 (answered from their relatives). Run it once on the old code and once on the new, over the same
``$KERNELCAST_HOME``, then ``cmp`` the two files:

    cd OLD_TREE && PYTHONPATH=. python benchmarks/engine_load_equivalence.py /tmp/old.json
    cd NEW_TREE && PYTHONPATH=. python benchmarks/engine_load_equivalence.py /tmp/new.json
    cmp /tmp/old.json /tmp/new.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

EXTRA_GPUS = ("b200", "rtx-4090")  # not in the store: answered from their relatives
DTYPES = ("bf16", "fp8", "fp16", "int8_wo")


class _Predictor:
    """Any trained predictor's stand-in for ``engine_for``: the state folder's engine (not the roofline)."""

    family = "tabular"
    opmodel_dir = None


def questions(devices: list[str], seed: int = 0) -> list[tuple[str, str, dict[str, int], str]]:
    """(family, dtype, shape, GPU) per question: per GPU and dtype, 6 GEMMs, 4 prefill and 4 decode
    attentions."""
    rng = np.random.default_rng(seed)
    out = []
    for device in devices:
        for dtype in DTYPES:
            for _ in range(6):
                m, n, k = (int(2 ** rng.uniform(0, 14)) for _ in range(3))
                out.append(("gemm", dtype, {"M": m, "N": n, "K": k}, device))
            for _ in range(4):
                s = int(2 ** rng.uniform(4, 13))
                heads = {"H": 32, "HKV": 8, "D": 128}
                out.append(
                    ("attention", dtype, {"B": int(2 ** rng.uniform(0, 6)), "S": s, "KV": s, **heads}, device)
                )
                out.append(
                    ("attention", dtype, {"B": int(2 ** rng.uniform(0, 6)), "S": 1, "KV": s, **heads}, device)
                )
    return out


def answers() -> dict[str, Any]:
    from components.devices.catalog import load_catalog
    from components.opmodel.loading import engine_for

    engine = engine_for(_Predictor())
    catalog = load_catalog()
    devices = [d for d in [*sorted(engine.measured.devices()), *EXTRA_GPUS] if d in catalog]
    rows: dict[str, Any] = {}
    for family, dtype, shape, device in questions(devices):
        try:
            times = engine.predict(family, dtype, shape, catalog.get(device))
            value: Any = [
                float(times.duration_us[0]),
                float(times.lo[0]),
                float(times.hi[0]),
                str(times.tier[0]),
                str(times.support[0]),
            ]
        except Exception as exc:  # an error is an answer too: it must not change either
            value = f"error {type(exc).__name__}: {exc}"
        rows[f"{family}|{dtype}|{json.dumps(shape, sort_keys=True)}|{device}"] = value
    return {"rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the JSON file to write")
    args = parser.parse_args()
    out = answers()
    errors = sum(isinstance(v, str) for v in out["rows"].values())
    print(f"{len(out['rows'])} questions, {errors} errors", file=sys.stderr)
    args.out.write_text(json.dumps(out, indent=0, sort_keys=True))


if __name__ == "__main__":
    main()
