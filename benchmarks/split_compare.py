"""Two splits of one op engine store (``opmodel.store_cache``) compared: files both hold byte for byte, and
the measured tier's table pickles (whose bytes differ between two processes that pickle the same table)
by value, unpickled and compared array by array. Also the serving chain of evaluate's side process, profiled.

Usage (``PYTHONPATH`` the code to run)::

    python benchmarks/split_compare.py compare SPLIT_A SPLIT_B
    python benchmarks/split_compare.py serving OUT.json PREDICTOR_DIR/opmodel   (KERNELCAST_HOME: the state)
"""

from __future__ import annotations

import json
import math
import pickle
import sys
import time
from pathlib import Path
from typing import Any


def same_value(a: Any, b: Any, where: str = "") -> str | None:
    """None where ``a`` and ``b`` are equal (NaN equal to NaN, arrays by dtype, shape and elements), else
    where they first differ."""
    import numpy as np
    import pandas as pd

    if type(a) is not type(b):
        return f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, np.ndarray):
        nan = a.dtype.kind in "fc"
        ok = a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=nan)
        return None if ok else f"{where}: array"
    if isinstance(a, pd.DataFrame | pd.Series | pd.Index):
        return None if a.equals(b) else f"{where}: pandas"
    if isinstance(a, dict):
        if list(a) != list(b):
            return f"{where}: keys"
        return next((r for k in a if (r := same_value(a[k], b[k], f"{where}[{k!r}]"))), None)
    if isinstance(a, list | tuple):
        if len(a) != len(b):
            return f"{where}: length"
        pairs = enumerate(zip(a, b, strict=True))
        return next((r for i, (x, y) in pairs if (r := same_value(x, y, f"{where}[{i}]"))), None)
    if isinstance(a, float):
        return None if a == b or (math.isnan(a) and math.isnan(b)) else f"{where}: {a} vs {b}"
    if hasattr(a, "__dict__") and not isinstance(a, type):
        return same_value(vars(a), vars(b), f"{where}.")
    return None if a == b else f"{where}: {a!r} vs {b!r}"


def compare(first: Path, second: Path) -> int:
    names = {p.relative_to(first).as_posix() for p in first.rglob("*") if p.is_file()}
    common = sorted(names & {p.relative_to(second).as_posix() for p in second.rglob("*") if p.is_file()})
    differ = 0
    for name in common:
        a, b = (first / name).read_bytes(), (second / name).read_bytes()
        if a == b:
            continue
        why = same_value(pickle.loads(a), pickle.loads(b)) if name.endswith(".pkl") else "bytes"
        if why is not None:
            differ += 1
            print(f"{name}: {why}")
    pickles = sum(n.endswith(".pkl") for n in common)
    print(f"{len(common)} files in both ({pickles} pickles compared by value): {differ} differ")
    return differ


def serving(out: Path, opmodel_dir: Path) -> None:
    """The two serving splits in turn in one process, as ``report._SideEntries`` runs them."""
    import cProfile

    from components.platform.config import get_settings
    from components.platform.runtime import configure_environment

    configure_environment(get_settings())
    from components.evaluation.report import _serving_side_entry

    profile = cProfile.Profile(time.process_time)
    wall, cpu = time.time(), time.process_time()
    profile.enable()
    entries = {
        s: _serving_side_entry(s, "tabular", opmodel_dir)
        for s in ("llm-serving-pipeweave", "llm-serving-silicon")
    }
    profile.disable()
    print(f"wall {time.time() - wall:.1f} s, CPU {time.process_time() - cpu:.1f} s", file=sys.stderr)
    profile.dump_stats(f"{out}.prof")
    for entry in entries.values():
        entry.pop("seconds", None)
        entry.pop("timings", None)
    out.write_text(json.dumps(entries, sort_keys=True, indent=1, default=str))


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("compare", "serving"):
        raise SystemExit(__doc__)
    if sys.argv[1] == "compare":
        raise SystemExit(1 if compare(Path(sys.argv[2]), Path(sys.argv[3])) else 0)
    serving(Path(sys.argv[2]), Path(sys.argv[3]))
