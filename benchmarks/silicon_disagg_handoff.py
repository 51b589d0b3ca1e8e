"""Does the disaggregated runs' TTFT scale with the KV bytes a request hands from its prefill worker to its
decode worker? (issue 35, disagg35; docs/disagg-workers.md "The KV hand-off, tested").

    cd TREE && KERNELCAST_DATASETS_DIR=... PYTHONPATH=. \\
        python benchmarks/silicon_disagg_handoff.py scaling [SIM.pkl]

reads AIConfigurator's measured disaggregated runs (``data.read_silicon_runs``) and prints per run group
the KV bytes per request (ISL x the model's KV bytes per token over all attention layers at the run's KV
dtype: MLA's compressed latent for DeepSeek), the time the path between the workers needs for them at
AIConfigurator's ``inter_node_bw`` (50 GB/s per GPU, one NIC), the light-load TTFT, the TTFT in decode
steps (TTFT / TPOT) and, where a run records its workers, the closed loop's completions per second per
prefill worker (C / (TTFT + (OSL - 1) x TPOT) / prefill workers). With ``SIM.pkl``
(``silicon_inner_lomo.py simulate``) it adds one request's prefill kernel time (the bench's TTFT floor).

    ... python benchmarks/silicon_disagg_handoff.py choose SIM.pkl    # or: heldout SIM.pkl

``choose``: the training-side choice (inner leave-one-model-out within each GPU,
``silicon_inner_lomo.inner_lomo``) among hand-off terms added to the disaggregated runs' TTFT: KV bytes /
a path rate (a grid from the NIC's 50 GB/s per GPU down to 0.1 GB/s) and N of the decode worker's steps (a
grid); each candidate's TTFT / TPOT per GPU, the disaggregated runs alone in brackets. ``heldout``: then
each GPU held out under the candidate its training GPU picked (``bench_engines.leave_one_gpu_out``, the
gate family's folds), before -> after per engine x GPU and for the disaggregated runs alone.
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

NIC_BYTES_PER_S = 50e9  # AIConfigurator systems/h100_sxm.yaml, h200_sxm.yaml: inter_node_bw per GPU (CX7 NDR)


def kv_bytes_per_request(row: dict[str, Any], datasets: Path) -> float:
    """ISL x KV bytes one token keeps over all attention layers, unsharded (what a decode worker needs)."""
    from components.deployments.bench_silicon import model_shape
    from components.physics.dtypes import STORE_BYTES

    model = model_shape(str(row["model_path"]), datasets)
    kv = "fp8" if str(row.get("precision")) in ("fp8", "fp4") else "bf16"
    per_layer = model.kv_elements_per_token_layer(1) * STORE_BYTES[kv]
    return float(row["isl"]) * model.attention_layers * per_layer


def disagg_table(datasets: Path) -> pd.DataFrame:
    """One row per disaggregated run: group keys, bytes, measured TTFT / TPOT, rate per prefill worker."""
    from components.deployments.data import read_silicon_runs

    runs = read_silicon_runs(datasets)
    runs = runs[runs["mode"] == "disagg"].copy()
    runs["C"] = runs["silicon_data_source"].str.extract(r"silicon_concurrency=(\d+)")[0].astype(float)
    runs["recorded"] = runs["prefill_num_workers"].notna()
    runs["kv_mb"] = [kv_bytes_per_request(r, datasets) / 1e6 for r in runs.to_dict("records")]
    runs["nic_ms"] = runs["kv_mb"] * 1e6 / NIC_BYTES_PER_S * 1e3
    ttft, tpot = runs["silicon_ttft_ms"], runs["silicon_tpot_ms"]
    cycle_s = (ttft + (runs["osl"] - 1) * tpot) / 1e3
    runs["rate_per_prefill_worker"] = runs["C"] / cycle_s / runs["prefill_num_workers"]
    runs["ttft_in_steps"] = ttft / tpot
    runs["service_ms"] = (
        1e3 / runs["rate_per_prefill_worker"]
    )  # per request and prefill worker, when saturated
    runs["implied_gb_per_s"] = runs["kv_mb"] / runs["service_ms"]  # the KV rate that service would be
    runs["model"] = runs["model_path"].str.split("/").str[-1]
    return runs


def scaling(datasets: Path, sim_path: Path | None) -> None:
    runs = disagg_table(datasets)
    if sim_path is not None:
        sim = pickle.loads(sim_path.read_bytes())
        key = next(iter(sim.floors))
        prefill = pd.Series(sim.floors[key][2] / 1e3, index=sim.runs["id"].to_numpy())
        runs["prefill_ms"] = runs["id"].map(prefill.groupby(level=0).first())
    pd.set_option("display.width", 250)
    keys = ["backend", "device_id", "model", "isl", "osl"]
    agg: dict[str, Any] = {
        "runs": ("id", "size"),
        "kv_mb": ("kv_mb", "first"),
        "nic_ms": ("nic_ms", "first"),
        "ttft_min_ms": ("silicon_ttft_ms", "min"),
        "ttft_median_ms": ("silicon_ttft_ms", "median"),
        "steps_median": ("ttft_in_steps", "median"),
    }
    if "prefill_ms" in runs:
        agg["prefill_ms"] = ("prefill_ms", "median")
    print("== per group: KV bytes per request, the NIC's time for them, TTFT, TTFT in decode steps ==")
    print(runs.groupby(keys).agg(**agg).round(1).to_string())
    rec = runs[runs["recorded"] & runs["C"].notna()].sort_values([*keys, "C"])
    cols = [*keys, "C", "prefill_num_workers", "prefill_tp_size", "prefill_attention_dp_size"]
    cols += ["decode_num_workers", "decode_batch_size", "silicon_ttft_ms", "silicon_tpot_ms"]
    cols += ["rate_per_prefill_worker", "ttft_in_steps", "service_ms", "implied_gb_per_s"]
    if "prefill_ms" in rec:
        # one prompt's prefill kernels per request of the worker (an attention-DP worker runs dp at once)
        rec = rec.assign(
            service_over_kernels=rec["service_ms"] / (rec["prefill_ms"] / rec["prefill_attention_dp_size"])
        )
        cols.append("service_over_kernels")
    print("\n== runs that record their workers: completions per second per prefill worker ==")
    print(rec[cols].round(2).to_string(index=False))
    same = runs.pivot_table(
        index=["backend", "device_id", "model", "osl", "C", "decode_tp_size", "decode_attention_dp_size"],
        columns="isl",
        values="silicon_ttft_ms",
        aggfunc="median",
    ).dropna(subset=[1024, 8192])
    same["ratio_8192_over_1024"] = same[8192] / same[1024]
    print("\n== same engine, GPU, C and workers: TTFT at ISL 8192 over 1024 (KV bytes x8) ==")
    print(same[[1024, 8192, "ratio_8192_over_1024"]].round(2).to_string())


def with_handoff(sim: Any, disagg: np.ndarray, extra_us: np.ndarray, steps: float) -> Any:
    """A copy of ``sim`` whose disaggregated runs' TTFT adds ``extra_us`` and ``steps`` decode steps."""
    import copy

    out = copy.copy(sim)
    out.ttft_x = {k: v + steps * disagg[:, None] * sim.tpot_x[k] for k, v in sim.ttft_x.items()}
    out.ttft_extra = {k: v + np.where(disagg, extra_us, 0.0) for k, v in sim.ttft_extra.items()}
    return out


def candidates(sim: Any, datasets: Path) -> list[tuple[str, Any]]:
    """(name, ``sim`` with that hand-off on its disaggregated runs' TTFT): none; KV bytes / a path rate
    (the NIC's 50 GB/s per GPU down to 0.1 GB/s); N of the decode worker's steps."""
    table = disagg_table(datasets).set_index("id")
    disagg = (sim.runs["mode"] == "disagg").to_numpy()
    kv = sim.runs["id"].map(table["kv_mb"]).fillna(0.0).to_numpy() * 1e6
    zero = np.zeros(len(disagg))
    out = [("none", sim)]
    for gbps in RATES_GBPS:
        out.append((f"bytes / {gbps:g} GB/s", with_handoff(sim, disagg, kv / (gbps * 1e9) * 1e6, 0.0)))
    for n in DECODE_STEPS:
        out.append((f"{n:g} decode steps", with_handoff(sim, disagg, zero, n)))
    return out


RATES_GBPS = (50.0, 10.0, 5.0, 2.0, 1.0, 0.5, 0.25, 0.1)
DECODE_STEPS = (10.0, 25.0, 50.0, 75.0, 100.0)


def choose(datasets: Path, sim_path: Path) -> dict[str, dict[str, tuple[float, float]]]:
    """Each candidate's inner leave-one-model-out per GPU (all runs; the disaggregated alone printed)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from silicon_inner_lomo import inner_lomo, inner_lomo_predictions

    sim = pickle.loads(sim_path.read_bytes())
    scored: dict[str, dict[str, tuple[float, float]]] = {}
    for name, cand in candidates(sim, datasets):
        frame = inner_lomo_predictions(cand)
        whole, alone = inner_lomo(cand, frame), inner_lomo(cand, frame[frame["mode"] == "disagg"])
        scored[name] = whole
        line = [f"{name:20s}"]
        for dev, (ttft, tpot) in whole.items():
            d = alone.get(dev, (np.nan, np.nan))
            line.append(f"{dev}: {ttft:.1%} / {tpot:.1%} ({d[0]:.1%} / {d[1]:.1%})")
        print("  ".join(line), flush=True)
    return scored


def heldout(datasets: Path, sim_path: Path) -> None:
    """Each GPU held out under the candidate its training GPU's inner leave-one-model-out picks (least
    TTFT + TPOT; ties to the earlier, simpler candidate), against no hand-off: TTFT / TPOT per engine x GPU
    and the disaggregated runs alone."""
    import components.deployments.bench_engines as be

    scored = choose(datasets, sim_path)
    sim = pickle.loads(sim_path.read_bytes())
    named = dict(candidates(sim, datasets))
    before, _ = be.leave_one_gpu_out(sim)
    after = before.copy()
    for held in sorted(sim.runs["device_id"].unique()):
        train = [d for d in sim.runs["device_id"].unique() if d != held]
        pick = min(scored, key=lambda n: round(sum(sum(scored[n][d]) for d in train), 4))
        print(f"{held} held out: trained on {'/'.join(train)}, picked '{pick}'")
        frame, _ = be.leave_one_gpu_out(named[pick])
        mine = (frame["device_id"] == held).to_numpy()
        after.loc[mine, ["ttft_pred_us", "tpot_pred_us"]] = frame.loc[mine, ["ttft_pred_us", "tpot_pred_us"]]
    for label, frame in (("all runs", None), ("disaggregated runs", "disagg")):
        print(f"== held out, {label}: TTFT / TPOT MAPE before -> after ==")
        b = before if frame is None else before[before["mode"] == frame]
        a = after if frame is None else after[after["mode"] == frame]
        for s0, s1 in zip(be.scores(b), be.scores(a), strict=True):
            where = f"{s0['scope']:13s} {s0['key'] or 'all':22s} n={s0['n']:5d}"
            print(
                f"{where} {s0['ttft_mape']:.1%} / {s0['tpot_mape']:.1%} -> "
                f"{s1['ttft_mape']:.1%} / {s1['tpot_mape']:.1%}"
            )


if __name__ == "__main__":
    data = Path(os.environ["KERNELCAST_DATASETS_DIR"])
    if sys.argv[1] == "scaling":
        scaling(data, Path(sys.argv[2]) if len(sys.argv) > 2 else None)
    else:
        {"choose": choose, "heldout": heldout}[sys.argv[1]](data, Path(sys.argv[2]))
