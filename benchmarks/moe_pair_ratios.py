"""Two GPUs' MoE tables on the same rows: the measured time ratio beside the roofline ratio
(``(roof_X + 3 us) / (roof_Y + 3 us)``), per dtype, routed tokens per expert (``T * topk / E``) and roofline
bound; and per GPU and dtype the 99th percentile of achieved FLOPs per SM per clock (docs/transfer-moe.md).

    PYTHONPATH=. python benchmarks/moe_pair_ratios.py STORE TARGET RELATIVE
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

KEYS = ["dtype", "T", "E", "topk", "H", "I", "tp", "ep", "distribution"]
SIZES = ["T", "E", "topk", "H", "I", "tp", "ep"]


def main(store: str, target: str, relative: str) -> None:
    from components.devices.catalog import load_catalog
    from components.physics import roofline as physics

    catalog = load_catalog()
    frame = pd.read_parquet(Path(store) / "moe.parquet")
    frame = frame[frame["T"] >= 1]
    pairs = frame[frame["device_id"] == target].merge(
        frame[frame["device_id"] == relative], on=KEYS, suffixes=("_x", "_y")
    )
    parts = []
    for dtype, part in pairs.groupby("dtype", observed=True):
        shape = {k: part[k].to_numpy(dtype="float64") for k in SIZES}
        rx, ry = (physics.roofline("moe", str(dtype), shape, catalog.get(d)) for d in (target, relative))
        parts.append(
            part.assign(
                measured=np.log(part["latency_us_x"] / part["latency_us_y"]),
                roofline=np.log((rx.time_us + 3.0) / (ry.time_us + 3.0)),
                bound=np.where(rx.compute_us >= rx.memory_us, "compute", "memory"),
            )
        )
    rows = pd.concat(parts)
    rows["tokens per expert"] = pd.cut(
        rows["T"] * rows["topk"] / rows["E"], [0, 0.5, 2, 8, 32, 128, 512, np.inf]
    )
    table = rows.groupby(["dtype", "tokens per expert", "bound"], observed=True)[["measured", "roofline"]]
    pd.set_option("display.width", 200)
    print(table.median().round(2).join(table.size().rename("n")).to_string())
    for (device, dtype), part in frame[frame["device_id"].isin([target, relative])].groupby(
        ["device_id", "dtype"], observed=True
    ):
        spec = catalog.get(str(device))
        shape = {k: part[k].to_numpy(dtype="float64") for k in SIZES}
        rate = physics.op_work("moe", str(dtype), shape).flops / (part["latency_us"].to_numpy() * 1e-6)
        per_sm_clock = np.quantile(rate, 0.99) / (spec.sms * spec.boost_clock_mhz * 1e6)
        print(f"{device} {dtype}: p99 achieved {per_sm_clock:.0f} FLOP per SM per clock")


if __name__ == "__main__":
    main(*sys.argv[1:])
