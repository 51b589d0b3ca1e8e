"""Where the simulated engines err on AIConfigurator's co-located (aggregated) serving runs, broken down on
the TRAINING side of each fold (issue 35): per engine, the step cost is fitted on one GPU's runs and the
same runs' errors are grouped by concurrency, ISL/OSL, model and whether C requests' KV cache fits. The
held-out GPU's figure is printed once per engine, never broken down (nothing is chosen on it).

    cd TREE && KERNELCAST_HOME=... PYTHONPATH=. python benchmarks/silicon_colocated.py simulate
    cd TREE && KERNELCAST_HOME=... PYTHONPATH=. python benchmarks/silicon_colocated.py report
    cd TREE && KERNELCAST_HOME=... PYTHONPATH=. python benchmarks/silicon_colocated.py timeline RUN_ID ...

``simulate`` runs every aggregated run once (the bench's ``simulate_runs``) and keeps the features under
``$KERNELCAST_HOME/cache/silicon_colocated.pkl``; ``report`` reads them; ``timeline`` prints, for a few runs,
the simulated steps (batch, prefill tokens, step time) under the training fold's fitted cost beside the
measured TTFT / TPOT.
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from components.common.metrics import mape
from components.deployments.bench import bench_engine
from components.deployments.bench_common import op_sources
from components.deployments.bench_engines import BENCH_PER_CLIENT, fit_engine, simulate_runs
from components.deployments.bench_silicon import silicon_deployments
from components.deployments.data import read_silicon_runs
from components.deployments.engines.aic_benchmark import as_benchmarked
from components.deployments.engines.registry import engine_for, engine_name
from components.deployments.ops import ENGINE_SOURCE, ROOFLINE_SOURCE
from components.deployments.serve import kv_capacity, lifetime_us, one_prefill_us
from components.deployments.stepmodel import build_step_models
from components.devices import load_catalog
from components.platform.config import DEFAULT_DATASETS_DIR


def _cache() -> Path:
    home = Path(os.environ.get("KERNELCAST_HOME", ".kernelcast"))
    tag = os.environ.get("SC_VARIANT", "")
    return home / "cache" / f"silicon_colocated{'-' + tag if tag else ''}.pkl"


def _setup() -> tuple[Path, object, object, pd.DataFrame]:
    ds = Path(os.environ.get("KERNELCAST_DATASETS_DIR", DEFAULT_DATASETS_DIR))
    catalog = load_catalog()
    sources = op_sources(bench_engine(), False)
    fn = sources.get(ENGINE_SOURCE, sources[ROOFLINE_SOURCE])
    print("op source:", ENGINE_SOURCE if ENGINE_SOURCE in sources else ROOFLINE_SOURCE)
    runs = read_silicon_runs(ds)
    if os.environ.get("SC_ALL"):  # every run, the disaggregated ones too (their workers derived where needed)
        from components.deployments.disagg_workers import with_derived_workers

        return ds, catalog, fn, with_derived_workers(runs, catalog, ds, fn).reset_index(drop=True)
    return ds, catalog, fn, runs[runs["mode"] == "agg"].reset_index(drop=True)


def simulate_all() -> None:
    ds, catalog, fn, runs = _setup()
    if "SC_SETTINGS" in os.environ:  # experiment: only these settings candidates (defaults, aiconfigurator)
        import components.deployments.bench_engines as be

        be.SETTINGS = tuple(os.environ["SC_SETTINGS"].split(","))
    if "SC_PARTS" in os.environ:  # experiment: only these of AIConfigurator's settings
        import components.deployments.bench_engines as be

        be.BENCHMARKED_PARTS = tuple(os.environ["SC_PARTS"].split(","))
    if "SC_STAGGER" in os.environ:  # experiment: the clients' start spread, x one request's lifetime
        import components.deployments.serve as serve

        scale, life = float(os.environ["SC_STAGGER"]), serve.lifetime_us
        serve.lifetime_us = lambda *a, **k: scale * life(*a, **k)
    sim = simulate_runs(runs, catalog, ds, fn, silicon_deployments, print)
    extra = []
    for row in runs[runs["id"].isin(sim.runs["id"])].to_dict("records"):
        d, _ = silicon_deployments(row, catalog, ds)
        eng = engine_for(engine_name(row["backend"]), d.gpu, fitted=False)
        kv, _ = kv_capacity(d, eng)
        extra.append(
            {
                "id": row["id"],
                "c": d.concurrency,
                "isl": d.isl,
                "osl": d.osl,
                "tp": d.tp,
                "kv_tokens": kv,
                "kv_fits": d.concurrency * (d.isl + d.osl) <= kv,
                "precision": row.get("precision"),
            }
        )
    sim.runs = sim.runs.merge(pd.DataFrame(extra), on="id", how="left")
    _cache().parent.mkdir(parents=True, exist_ok=True)
    _cache().write_bytes(pickle.dumps(sim))
    print("kept", _cache())


def _bucket(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    out["c_bin"] = pd.cut(out["c"], [0, 1, 4, 16, 64, 256, 10**6]).astype(str)
    out["isl_osl"] = out["isl"].astype(str) + "/" + out["osl"].astype(str)
    out["model"] = out["model_path"].str.split("/").str[-1]
    return out


def _err_table(g: pd.DataFrame, by: str) -> pd.DataFrame:
    rows = []
    for key, h in g.groupby(by):
        et = np.abs(h["ttft_pred_us"] / h["ttft_us"] - 1)
        ep = np.abs(h["tpot_pred_us"] / h["tpot_us"] - 1)
        rows.append(
            {
                by: key,
                "n": len(h),
                "ttft_mape": et.mean(),
                "ttft_mass": et.sum(),
                "ttft_med_ratio": (h["ttft_pred_us"] / h["ttft_us"]).median(),
                "tpot_mape": ep.mean(),
                "tpot_mass": ep.sum(),
                "tpot_med_ratio": (h["tpot_pred_us"] / h["tpot_us"]).median(),
            }
        )
    return pd.DataFrame(rows).sort_values("ttft_mass", ascending=False)


def summary() -> None:
    """Per engine and training GPU: train MAPE and the other GPU's (one line each)."""
    sim = pickle.loads(_cache().read_bytes())
    frame = sim.runs
    for name in sorted(frame["engine"].unique()):
        for device in sorted(frame["device_id"].unique()):
            train = ((frame["engine"] == name) & (frame["device_id"] == device)).to_numpy()
            test = ((frame["engine"] == name) & (frame["device_id"] != device)).to_numpy()
            off, coef, err = fit_engine(sim, train)
            y1, y2 = frame["ttft_us"].to_numpy()[test], frame["tpot_us"].to_numpy()[test]
            p1, p2 = sim.predict(off, test, coef)
            print(
                f"{name:7s} train {device:9s} ({off[1]:14s}) n={train.sum():4d} "
                f"TTFT {err['ttft']:.1%} TPOT {err['tpot']:.1%}"
                f" | other GPU n={test.sum():4d} TTFT {mape(y1, p1):.1%} TPOT {mape(y2, p2):.1%}"
            )


def mass() -> None:
    """Where the error mass is on the TRAINING side: every engine x GPU fitted on its own runs, the runs'
    absolute relative errors summed per engine, GPU, model and concurrency (share of all runs' mass)."""
    sim = pickle.loads(_cache().read_bytes())
    frame = _bucket(sim.runs)
    parts = []
    for name in sorted(frame["engine"].unique()):
        for device in sorted(frame["device_id"].unique()):
            train = ((frame["engine"] == name) & (frame["device_id"] == device)).to_numpy()
            if train.any():
                off, coef, _ = fit_engine(sim, train)
                g = frame[train].copy()
                g["ttft_pred_us"], g["tpot_pred_us"] = sim.predict(off, train, coef)
                parts.append(g)
    g = pd.concat(parts)
    g["ttft_err"] = np.abs(g["ttft_pred_us"] / g["ttft_us"] - 1)
    g["tpot_err"] = np.abs(g["tpot_pred_us"] / g["tpot_us"] - 1)
    print(f"train side, n={len(g)}: TTFT {g['ttft_err'].mean():.1%} TPOT {g['tpot_err'].mean():.1%}")
    pd.set_option("display.width", 200)
    pd.set_option("display.max_rows", 60)
    for by in (
        ["engine", "device_id"],
        ["engine", "device_id", "model"],
        ["engine", "device_id", "model", "c_bin"],
    ):
        t = g.groupby(by).agg(n=("id", "size"), ttft=("ttft_err", "sum"), tpot=("tpot_err", "sum"))
        t["ttft_share"], t["tpot_share"] = t["ttft"] / g["ttft_err"].sum(), t["tpot"] / g["tpot_err"].sum()
        t["ttft_mape"], t["tpot_mape"] = t["ttft"] / t["n"], t["tpot"] / t["n"]
        for col in ("ttft", "tpot"):
            print(
                t.sort_values(col, ascending=False)
                .head(15)[["n", "ttft_share", "tpot_share", "ttft_mape", "tpot_mape"]]
                .round(3)
                .to_string()
            )


def report() -> None:
    sim = pickle.loads(_cache().read_bytes())
    frame = _bucket(sim.runs)
    pd.set_option("display.width", 200)
    pd.set_option("display.max_rows", 80)
    for name in sorted(frame["engine"].unique()):
        for device in sorted(frame["device_id"].unique()):
            train = ((frame["engine"] == name) & (frame["device_id"] == device)).to_numpy()
            test = ((frame["engine"] == name) & (frame["device_id"] != device)).to_numpy()
            if not train.any():
                continue
            off, coef, err = fit_engine(sim, train)
            g = frame[train].copy()
            g["ttft_pred_us"], g["tpot_pred_us"] = sim.predict(off, train, coef)
            held = ""
            if test.any():
                y1, y2 = frame["ttft_us"].to_numpy()[test], frame["tpot_us"].to_numpy()[test]
                p1, p2 = sim.predict(off, test, coef)
                held = f"; held-out other GPU TTFT {mape(y1, p1):.1%} TPOT {mape(y2, p2):.1%}"
            print(
                f"\n=== {name} trained on {device} ({off[1]} settings): n={len(g)} "
                f"train TTFT {err['ttft']:.1%} "
                f"TPOT {err['tpot']:.1%}{held}"
            )
            print("cost", np.round(coef, 3).tolist())
            for by in ("c_bin", "kv_fits", "isl_osl", "model", "tp"):
                print(_err_table(g, by).round(3).to_string(index=False))


def timeline(ids: list[str]) -> None:
    """Per run: the simulated timeline under the training fold's cost (fit on the same GPU's runs)."""
    import components.deployments.bench_engines as be
    from components.deployments.engines.base import StepCost
    from components.deployments.simulate import Workload, _Sim

    ds, catalog, fn, runs = _setup()
    sim = pickle.loads(_cache().read_bytes())
    frame = sim.runs
    for rid in ids:
        row = runs[runs["id"] == rid].iloc[0].to_dict()
        name = engine_name(row["backend"])
        train = ((frame["engine"] == name) & (frame["device_id"] == row["device_id"])).to_numpy()
        off, coef, _ = fit_engine(sim, train)
        d, _ = silicon_deployments(row, catalog, ds)
        eng = engine_for(name, d.gpu, fitted=False).with_cost(StepCost.from_vector(coef))
        plain = eng
        parts = be.BENCHMARKED_PARTS if off[1] == be.BENCHMARKED else be.RECORDED_PARTS
        eng = as_benchmarked(eng, d.isl, d.concurrency, parts, row.get("backend_version"))
        step = build_step_models([d], fn)[0]
        kv, _ = kv_capacity(d, eng)
        measured, warm = BENCH_PER_CLIENT
        kw = {"requests": measured * d.concurrency, "warmup": warm * d.concurrency}
        w = Workload(d.isl, d.osl, d.concurrency, stagger_us=lifetime_us(d, eng, step), **kw)
        stats = _Sim(step, eng, kv, w).run()
        m = stats.metrics()
        wave = _Sim(step, eng, kv, Workload(d.isl, d.osl, d.concurrency, **kw)).run().metrics()
        alone = _Sim(step, plain, kv, w).run().metrics()
        print(
            f"\n{rid}: C={d.concurrency} isl={d.isl} osl={d.osl} tp={d.tp} kv={kv:.0f} tokens "
            f"(C x (isl+osl) = {d.concurrency * (d.isl + d.osl)})"
        )
        print(
            f"  one prefill (kernels) {one_prefill_us(d, eng, step) / 1e3:.1f} ms; decode step at C "
            f"{step.decode_us(d.concurrency, d.isl + d.osl / 2) / 1e3:.2f} ms (kernels)"
        )
        print(f"  measured TTFT {row['silicon_ttft_ms']:.1f} ms TPOT {row['silicon_tpot_ms']:.2f} ms")
        front = coef[6] + coef[7] * d.concurrency
        print(
            f"  simulated TTFT {m['ttft_ms']:.1f} ms (+ front end {front / 1e3:.1f} ms) "
            f"TPOT {m['tpot_ms']:.2f} ms; mean decode batch {stats.decode_batch:.1f}; "
            f"preemptions {stats.preemptions}"
        )
        print(
            f"  the engine's defaults instead ({plain.policy}, mixed chunk {plain.mixed_chunk}, budget "
            f"{plain.max_num_batched_tokens}): TTFT {alone['ttft_ms']:.1f} ms TPOT {alone['tpot_ms']:.2f} ms"
        )
        print(
            f"  simulated with {eng.policy}, mixed chunk {eng.mixed_chunk}, "
            f"budget {eng.max_num_batched_tokens}"
        )
        print(
            f"  clients started at once (waves): TTFT {wave['ttft_ms']:.1f} ms TPOT {wave['tpot_ms']:.2f} ms"
        )


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "report"
    {
        "simulate": lambda: simulate_all(),
        "report": lambda: report(),
        "summary": lambda: summary(),
        "mass": lambda: mass(),
    }.get(cmd, lambda: timeline(sys.argv[2:]))()
