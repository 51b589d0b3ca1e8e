"""Where vLLM's held-out H100 TPOT error is, and the running batch the measured runs imply (issue 35,
vllm35; docs/engines.md "vLLM on H100, held out: where the TPOT error is").

    cd TREE && KERNELCAST_HOME=<state> KERNELCAST_DATASETS_DIR=... PYTHONPATH=. \\
        python benchmarks/silicon_inner_lomo.py simulate SIM.pkl
    cd TREE && KERNELCAST_DATASETS_DIR=... PYTHONPATH=. python benchmarks/silicon_vllm_h100_map.py map SIM.pkl
    cd TREE && KERNELCAST_HOME=<state> KERNELCAST_DATASETS_DIR=... PYTHONPATH=. \\
        python benchmarks/silicon_vllm_h100_map.py capped SIM.pkl    # or: fits SIM.pkl

``map``: vLLM's H100 runs held out (``bench_engines.leave_one_gpu_out``: constants fitted on H200), the
TPOT error mass (summed absolute relative errors) and the signed ratio predicted / measured by model,
version x quantisation, TP, concurrency C and ISL/OSL; then, for every aggregated run of any engine with
C > 100, the running batch its closed loop implies: a client waits (C / B - 1) request lifetimes, so
B = C / (1 + TTFT / ((OSL - 1) x TPOT)).

``fits``: variants of the constants' fit, each scored on the training side (inner leave-one-model-out
within each GPU, ``silicon_inner_lomo.inner_lomo``) and held out: the settings candidate chosen per engine,
and the per-layer (with the per-sequence or base) step cost refitted per engine.

``capped``: a diagnostic, not a choice -- the runs whose implied batch sits near 100 at C = 512
(vLLM gpt-oss-120b on H100) simulated again with 100 clients, spliced into the simulation, and vLLM's H100
TPOT held out before -> after (what that block is worth if the cap were known; their TTFT would need the
clients' wait for a connection added, not modelled here).
"""

from __future__ import annotations

import copy
import os
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

CAP = 100  # the clients the diagnostic gives the capped runs (what their implied batch says)


def _frame(sim: Any, datasets: Path) -> pd.DataFrame:
    import components.deployments.bench_engines as be
    from components.deployments.data import read_silicon_runs

    frame, _ = be.leave_one_gpu_out(sim)
    runs = read_silicon_runs(datasets).drop_duplicates("id").set_index("id")
    keep = ["backend_version", "isl", "osl", "tp_size", "gemm_quant_mode", "silicon_data_source"]
    out = frame.join(runs[keep], on="id")
    out["C"] = out["silicon_data_source"].str.extract(r"silicon_concurrency=(\d+)")[0].astype(float)
    out["model"] = out["model_path"].str.split("/").str[-1]
    out["r_tpot"] = out["tpot_pred_us"] / out["tpot_us"]
    out["r_ttft"] = out["ttft_pred_us"] / out["ttft_us"]
    out["e_tpot"] = (out["r_tpot"] - 1).abs()
    out["B_implied"] = out["C"] / (1 + out["ttft_us"] / ((out["osl"] - 1) * out["tpot_us"]))
    return out


def error_map(sim_path: Path, datasets: Path) -> None:
    sim = pickle.loads(sim_path.read_bytes())
    frame = _frame(sim, datasets)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_rows", 500)
    v = frame[(frame["engine"] == "vllm") & (frame["device_id"] == "h100-sxm")]
    total = v["e_tpot"].sum()
    print(f"vLLM H100 held out: {len(v)} runs, TPOT MAPE {v['e_tpot'].mean():.1%}, mass {total:.1f}")
    for keys in (
        ["model"],
        ["model", "backend_version", "gemm_quant_mode"],
        ["model", "tp_size"],
        ["model", "C"],
        ["model", "isl", "osl"],
    ):
        table = v.groupby(keys, dropna=False).agg(
            n=("id", "size"),
            mass=("e_tpot", "sum"),
            mape=("e_tpot", "mean"),
            ratio_median=("r_tpot", "median"),
            ratio_min=("r_tpot", "min"),
            ratio_max=("r_tpot", "max"),
        )
        table["share"] = table["mass"] / total
        print(table.sort_values("mass", ascending=False).round(3).to_string(), "\n")
    rest = v[~((v["model"] == "gpt-oss-120b") & (v["C"] == 512))]
    print(f"without gpt-oss-120b at C = 512: {len(rest)} runs, TPOT MAPE {rest['e_tpot'].mean():.1%}\n")
    big = frame[(frame["mode"] == "agg") & (frame["C"] > 100)].copy()
    big["source"] = big["silicon_data_source"].str.extract(r"(image=[^;]+|source_file=[^;]+)")[0]
    print("== aggregated runs with C > 100: the running batch B their closed loop implies ==")
    cols = ["engine", "device_id", "model", "backend_version", "C"]
    implied = big.groupby(cols, dropna=False).agg(
        n=("id", "size"),
        B_median=("B_implied", "median"),
        B_min=("B_implied", "min"),
        B_max=("B_implied", "max"),
        tpot_ratio=("r_tpot", "median"),
    )
    print(implied.round(1).to_string())


def capped(sim_path: Path, datasets: Path) -> None:
    import components.deployments.bench_engines as be
    from components.deployments.bench import bench_engine
    from components.deployments.bench_common import op_sources
    from components.deployments.bench_silicon import silicon_deployments
    from components.deployments.data import read_silicon_runs
    from components.deployments.ops import ENGINE_SOURCE, ROOFLINE_SOURCE
    from components.devices import load_catalog

    sim = pickle.loads(sim_path.read_bytes())
    frame = _frame(sim, datasets)
    pick = frame[(frame["engine"] == "vllm") & (frame["C"] == 512) & (frame["B_implied"] < 1.2 * CAP)]
    print(f"{len(pick)} runs: implied B {pick['B_implied'].min():.1f}-{pick['B_implied'].max():.1f}")
    runs = read_silicon_runs(datasets).drop_duplicates("id")
    runs = runs[runs["id"].isin(pick["id"])].copy()
    runs["id"] = runs["id"].str.replace("_c512_", f"_c{CAP}_")
    runs["batch_size"] = float(CAP)
    sources = op_sources(bench_engine(), False)
    fn = sources.get(ENGINE_SOURCE, sources[ROOFLINE_SOURCE])
    part = be.simulate_runs(runs, load_catalog(), datasets, fn, silicon_deployments, print)
    out = copy.deepcopy(sim)
    index = {rid: i for i, rid in enumerate(sim.runs["id"])}
    for j, rid in enumerate(part.runs["id"]):
        i = index[rid.replace(f"_c{CAP}_", "_c512_")]
        for key in sim.ttft_x:
            out.ttft_x[key][i], out.tpot_x[key][i] = part.ttft_x[key][j], part.tpot_x[key][j]
            out.ttft_extra[key][i] = part.ttft_extra[key][j]
            for a, b in zip(out.floors[key], part.floors[key], strict=True):
                a[i] = b[j]
    after = _frame(out, datasets).set_index("id")
    cols = ["model", "backend_version", "tp_size", "isl", "osl", "B_implied", "tpot_us", "r_tpot"]
    per_run = frame.set_index("id").loc[pick["id"], cols]
    per_run[f"r_tpot_{CAP}_clients"] = after.loc[pick["id"], "r_tpot"]
    print(per_run.round(3).to_string())
    after = after.reset_index()
    for label, f in (("before", frame), (f"after ({CAP} clients)", after)):
        v = f[(f["engine"] == "vllm") & (f["device_id"] == "h100-sxm")]
        mine = v[v["id"].isin(pick["id"])]
        print(
            f"{label:22s} vLLM H100 TPOT MAPE {v['e_tpot'].mean():.1%} (the {len(mine)} runs: "
            f"{mine['e_tpot'].mean():.1%}, ratio {mine['r_tpot'].min():.2f}-{mine['r_tpot'].max():.2f})"
        )


def settings_per_engine(main: Any) -> Any:
    """``main`` (``bench_engines.fit_engines``) with the settings candidate (defaults / AIConfigurator's)
    chosen per engine: the shared step cost fitted under each candidate, each engine taking the candidate
    whose cost (its front end refitted) errs least on its own runs."""
    import components.deployments.bench_engines as be
    from components.common.metrics import mape

    def fit(sim: Any, mask: np.ndarray) -> dict[str, tuple[tuple[float, str], np.ndarray, dict]]:
        engines = sim.runs["engine"].to_numpy()
        y1, y2 = sim.runs["ttft_us"].to_numpy(), sim.runs["tpot_us"].to_numpy()
        shared = {}
        for key in sim.ttft_x:
            x1, x2, e1 = sim.ttft_x[key][mask], sim.tpot_x[key][mask], sim.ttft_extra[key][mask]
            shared[key] = be.fit_cost(x1, x2, y1[mask] - e1, y2[mask], y1[mask])
        out = main(sim, mask)  # engines without runs in ``mask`` as main
        for name in sorted(set(engines)):
            mine = mask & (engines == name)
            best = None
            for key, coef in shared.items() if mine.any() else ():
                cost = be.fit_front(sim, key, coef, mine)
                ttft, tpot = sim.predict(key, mine, cost)
                err = {"ttft": mape(y1[mine], ttft), "tpot": mape(y2[mine], tpot)}
                if best is None or err["ttft"] + err["tpot"] < best[0]:
                    best = (err["ttft"] + err["tpot"], key, cost, err)
            if best is not None:
                out[name] = best[1:]
        return out

    return fit


def terms_per_engine(main: Any, terms: list[int]) -> Any:
    """``main`` (``bench_engines.fit_engines``) with the step-cost ``terms`` (indices) refitted per engine
    on its own runs (TTFT and TPOT, least absolute relative error, the other terms as the shared fit has
    them)."""
    import components.deployments.bench_engines as be
    from components.common.metrics import mape
    from components.deployments.bench_common import relative_l1

    def fit(sim: Any, mask: np.ndarray) -> dict[str, tuple[tuple[float, str], np.ndarray, dict]]:
        out = main(sim, mask)
        engines = sim.runs["engine"].to_numpy()
        y1, y2 = sim.runs["ttft_us"].to_numpy(), sim.runs["tpot_us"].to_numpy()
        keep = [i for i in range(be.N_COST) if i not in terms]
        for name, (key, coef, _) in list(out.items()):
            mine = mask & (engines == name)
            if not mine.any():
                continue
            x = np.vstack([sim.ttft_x[key][mine], sim.tpot_x[key][mine]])
            y = np.r_[y1[mine] - sim.ttft_extra[key][mine], y2[mine]]
            cost = np.array(coef, dtype="float64")
            cost[terms] = relative_l1(
                x[:, terms],
                y - x[:, keep] @ coef[keep],
                np.r_[y1[mine], y2[mine]],
                [be.COST_BOUNDS[i] for i in terms],
            )
            cost = be.fit_front(sim, key, cost, mine)
            ttft, tpot = sim.predict(key, mine, cost)
            out[name] = (key, cost, {"ttft": mape(y1[mine], ttft), "tpot": mape(y2[mine], tpot)})
        return out

    return fit


def fits(sim_path: Path, _datasets: Path) -> None:
    """Each fit variant: inner leave-one-model-out per GPU (the training side), then held out per engine x
    GPU (reported, not chosen on)."""
    import components.deployments.bench_engines as be

    sys.path.insert(0, str(Path(__file__).parent))
    import silicon_inner_lomo as lomo

    sim = pickle.loads(sim_path.read_bytes())
    names = list(be.StepCost.__dataclass_fields__)
    main = be.fit_engines
    variants = [
        ("main (shared settings and step cost)", main),
        ("settings per engine", settings_per_engine(main)),
    ]
    for group in (["per_layer_us"], ["per_seq_us", "per_layer_us"], ["base_us", "per_layer_us"]):
        variants.append(
            (f"{' + '.join(group)} per engine", terms_per_engine(main, [names.index(t) for t in group]))
        )
    try:
        for label, fn in variants:
            be.fit_engines = fn
            inner = lomo.inner_lomo(sim)
            print(label, "| inner leave-one-model-out TTFT / TPOT:", end="")
            print("".join(f"  {dev} {a:.1%} / {b:.1%}" for dev, (a, b) in inner.items()), flush=True)
            frame, _ = be.leave_one_gpu_out(sim)
            for s in be.scores(frame):
                if s["scope"] in ("all", "engine x gpu"):
                    where = f"{s['key'] or 'all':20s} n={s['n']:5d}"
                    print(f"    held out {where} {s['ttft_mape']:.1%} / {s['tpot_mape']:.1%}")
    finally:
        be.fit_engines = main


if __name__ == "__main__":
    data = Path(os.environ["KERNELCAST_DATASETS_DIR"])
    {"map": error_map, "capped": capped, "fits": fits}[sys.argv[1]](Path(sys.argv[2]), data)
