"""What the catalog's GPUs without measurements get: the transfer model fitted on every measured GPU of the
store (at the gate's caps), its far and kin choices with their inner leave-one-GPU-out scores per case (the
train side), then per unseen GPU a grid of GEMMs (bf16/fp8/fp8_block, M 1..8192, N = K 4096/8192), attention
(prefill and decode) and MoE (Mixtral's layer): the engine's tier and relatives, the share of the dtype's
datasheet peak and of DRAM bandwidth reached, and the sibling rule's answer beside it (support texts cut
at 160 characters: the relatives column shows the first few; ``blend``: the transfer tier blended with the
spec tier). The kin record (``tier_choice.choose_kin``: a generation jump within one line answered apart
from the far cases, with its nested test) is measured here, not applied by the engine.
Physics checks: no share of a peak above the learned achievable one, runtime non-decreasing along M / KV / T.

    PYTHONPATH=. KERNELCAST_HOME=... python benchmarks/unseen_catalog_answers.py STORE DATASETS OUT.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

GPUS = ("b200", "gb200", "b300", "mi325x", "mi350x", "mi355x", "arc-pro-b60", "rtx-pro-6000")
M_GRID = 2.0 ** np.arange(0, 14)


def questions() -> list[tuple[str, str, str | None, dict[str, np.ndarray], str]]:
    """(family, dtype, kv dtype, shape, the axis runtime must not fall along) of the grid."""
    out = []
    for dtype in ("bf16", "fp8", "fp8_block"):
        for nk in (4096.0, 8192.0):
            shape = {"M": M_GRID, "N": np.full(len(M_GRID), nk), "K": np.full(len(M_GRID), nk)}
            out.append(("gemm", dtype, None, shape, "M"))
    kv = 2.0 ** np.arange(7, 15)
    heads = {"H": np.full(len(kv), 32.0), "HKV": np.full(len(kv), 8.0), "D": np.full(len(kv), 128.0)}
    one = np.ones(len(kv))
    out.append(("attention", "bf16", "bf16", {"B": one, "S": kv, "KV": kv, **heads}, "KV"))
    for batch in (1.0, 64.0):
        out.append(("attention", "bf16", "bf16", {"B": one * batch, "S": one, "KV": kv, **heads}, "KV"))
    tokens = 2.0 ** np.arange(0, 14, 2)
    n = len(tokens)
    moe = {"T": tokens, "E": np.full(n, 8.0), "topk": np.full(n, 2.0), "H": np.full(n, 4096.0)}
    moe |= {"I": np.full(n, 14336.0), "tp": np.ones(n), "ep": np.ones(n)}
    for dtype in ("bf16", "fp8_block"):
        out.append(("moe", dtype, None, {**moe, "distribution": np.full(n, "balanced", dtype=object)}, "T"))
    return out


def answer_rows(engine, sibling, gpu, spec, achievable) -> list[dict]:
    from components.opmodel.achievable import share_of

    rows = []
    for family, dtype, kv, shape, _axis in questions():  # each grid varies along _axis only
        try:
            got = engine.predict(family, dtype, shape, spec, kv_dtype=kv)
        except Exception as exc:  # a GPU the engine cannot answer is reported, not fatal
            rows.append({"gpu": gpu, "family": family, "dtype": dtype, "error": str(exc)[:120]})
            continue
        roof = got.roof
        rule = sibling.resolve(family, roof.choice.dtype, shape, spec, roof, kv)
        rule_t = rule[0] if rule is not None else np.full(len(roof.time_us), np.nan)
        t = got.duration_us
        falls = int(np.sum(np.diff(t) < -1e-9 * t[:-1]))
        pipe = f"{roof.choice.pipe}|{roof.choice.dtype}"
        cap = share_of(achievable, getattr(spec, "architecture", None), family, pipe)[0]
        for i in range(len(t)):
            phase = "decode" if family == "attention" and shape["S"][i] == 1 else "prefill"
            rows.append(
                {
                    "gpu": gpu,
                    "family": family,
                    "dtype": phase if family == "attention" else dtype,
                    "size": {k: float(np.asarray(v)[i]) for k, v in shape.items() if k != "distribution"},
                    "tier": str(got.tier[i]),
                    "support": str(got.support[i])[:160],
                    "us": float(t[i]),
                    "peak_share": float(roof.compute_us[i] / t[i]),
                    "dram_share": float(roof.memory_us[i] / t[i]),
                    "sibling_us": float(rule_t[i]),
                    "over_achievable": bool(
                        roof.compute_us[i] / t[i] > cap + 1e-6
                        or roof.memory_us[i] / t[i] > achievable.get("dram", 1.0) + 1e-6
                    ),
                    "falls_along_axis": falls,
                }
            )
    return rows


def main(store_dir: str, datasets: str, out: str) -> None:
    from components.devices.catalog import load_catalog
    from components.evaluation.transfer_bench import SpecFits, sibling_model
    from components.opmodel import spec as spec_tier
    from components.opmodel.engine import OpEngine
    from components.opmodel.measured import LAYOUTS, MeasuredTier
    from components.opmodel.store import load_store
    from components.opmodel.transfer import CURVE_FAMILIES, TransferTier
    from components.opmodel.transfer_fit import fit_transfer

    started = time.perf_counter()
    catalog = load_catalog()
    store = load_store(Path(store_dir), ("gemm", "attention", "moe"))
    rows = spec_tier.training_rows(store, Path(datasets), per_group=600)
    devices = sorted({str(d) for f in store.values() for d in f["device_id"].unique() if d in catalog})
    specs = {d: catalog.get(d) for d in devices}
    fits = SpecFits(rows, store, specs, {"rounds": 40, "params": None, "configs": None})
    measured = MeasuredTier({f: v for f, v in store.items() if f in LAYOUTS}, specs)
    model = fit_transfer(measured, store, devices, 80, spec_without=fits, kin=True)
    print("far", json.dumps(model.far, indent=1))
    print("kin", json.dumps(model.kin, indent=1))
    curves = {f: v for f, v in store.items() if f in CURVE_FAMILIES}
    tables: dict = {}
    engine = OpEngine(measured, fits(), transfer=TransferTier(measured, curves, model, tables))
    sibling = TransferTier(measured, curves, sibling_model(), tables, hold=False, twins=False)
    every = []
    for gpu in GPUS:
        every.extend(answer_rows(engine, sibling, gpu, catalog.get(gpu), model.achievable))
    result = {"far": model.far, "kin": model.kin, "achievable": model.achievable, "answers": every}
    frame = pd.DataFrame([r for r in every if "error" not in r])
    frame["relatives"] = frame["support"].str.extract(r"carried over from ([^;]*?) by")[0].fillna("-")
    frame["tier"] = frame["tier"].where(~frame["support"].str.contains("blended with the spec"), "blend")
    frame["vs_sibling"] = frame["us"] / frame["sibling_us"]
    summary = frame.groupby(["gpu", "family", "dtype"], sort=False).agg(
        tier=("tier", lambda t: ",".join(sorted(set(t)))),
        relatives=("relatives", lambda r: r.iloc[len(r) // 2][:60]),
        peak_max=("peak_share", "max"),
        dram_max=("dram_share", "max"),
        vs_sib_median=("vs_sibling", "median"),
        over=("over_achievable", "sum"),
        falls=("falls_along_axis", "max"),
    )
    pd.set_option("display.width", 220)
    print(summary.round(3).to_string())
    errors = [r for r in every if "error" in r]
    if errors:
        print("errors", errors)
    result["seconds"] = time.perf_counter() - started
    Path(out).write_text(json.dumps(result, indent=1, default=str))
    print(f"seconds {result['seconds']:.0f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
