"""The decode split of the disaggregated runs that record none (issue 35): how each rule reads the inputs,
and what it does to the silicon scores on the training side and held out.

    cd TREE && KERNELCAST_HOME=<state> KERNELCAST_DATASETS_DIR=... PYTHONPATH=. \\
        python benchmarks/silicon_disagg_split.py agree                 # rules vs the recorded splits
    ... python benchmarks/silicon_inner_lomo.py simulate REF.pkl        # every run, the default rule
    ... python benchmarks/silicon_disagg_split.py simulate RULE OUT.pkl # the derived runs only, under RULE
    ... python benchmarks/silicon_disagg_split.py score REF.pkl [OUT.pkl]

``agree`` blanks the worker counts of the 36 disaggregated runs that record them and derives them again
under each rule: no measurement is read, only the deployments. ``score`` takes REF's simulation, with the
rows of OUT's runs replaced by OUT's, and prints the inner leave-one-model-out per GPU (each GPU's runs
fitted and scored among themselves: the outer fold's training side) and the leave-one-GPU-out scores the
gate's family ``deployment`` reports (``bench_engines.leave_one_gpu_out``).
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import numpy as np

import components.deployments.bench_engines as be
from components.deployments import disagg_workers as dw

sys.path.insert(0, str(Path(__file__).resolve().parent))
from silicon_inner_lomo import inner_lomo  # a sibling script, not a package

RULES = {"fewest": dw.fewest_decode_workers, "pow2": dw.power_of_two_decode_workers}


def _inputs():
    from components.deployments.bench import bench_engine
    from components.deployments.bench_common import op_sources
    from components.deployments.data import read_silicon_runs
    from components.deployments.ops import ENGINE_SOURCE, ROOFLINE_SOURCE
    from components.devices import load_catalog

    ds = Path(os.environ["KERNELCAST_DATASETS_DIR"])
    sources = op_sources(bench_engine(), False)
    return ds, load_catalog(), sources.get(ENGINE_SOURCE, sources[ROOFLINE_SOURCE]), read_silicon_runs(ds)


def agree() -> None:
    ds, catalog, fn, runs = _inputs()
    rec = (runs["mode"] == "disagg") & runs["decode_num_workers"].notna() & runs["id"].str.contains(r"_c\d+_")
    truth = runs.loc[rec, ["id", "backend", "device_id", "prefill_num_workers", "decode_num_workers"]]
    blank = runs[rec].copy()
    blank[["prefill_num_workers", "decode_num_workers", "decode_batch_size"]] = np.nan
    for name, rule in RULES.items():
        out = dw.with_derived_workers(blank, catalog, ds, fn, decode_rule=rule)
        both = truth.merge(
            out[["id", "prefill_num_workers", "decode_num_workers"]], on="id", suffixes=("", "_d")
        )
        for (engine, gpu), g in [(("all", ""), both), *both.groupby(["backend", "device_id"])]:
            same_d = int((g["decode_num_workers"] == g["decode_num_workers_d"]).sum())
            same_p = int((g["prefill_num_workers"] == g["prefill_num_workers_d"]).sum())
            where = f"{name:7s} {engine}/{gpu:9s}"
            print(f"{where} decode workers as recorded {same_d}/{len(g)}, prefill {same_p}/{len(g)}")


def simulate(rule: str, out: Path) -> None:
    from components.deployments.bench_silicon import silicon_deployments

    ds, catalog, fn, runs = _inputs()
    runs = dw.with_derived_workers(runs, catalog, ds, fn, decode_rule=RULES[rule])
    runs = runs[runs["workers_derived"]]
    out.write_bytes(pickle.dumps(be.simulate_runs(runs, catalog, ds, fn, silicon_deployments, print)))


def splice(ref: be.Simulated, new: be.Simulated) -> be.Simulated:
    """``ref`` with the feature and floor rows of ``new``'s runs (by id) replaced by ``new``'s."""
    where = {run: k for k, run in enumerate(ref.runs["id"])}
    rows = [where[run] for run in new.runs["id"]]
    for name in ("ttft_x", "ttft_extra", "tpot_x"):
        for key, values in getattr(ref, name).items():
            values[rows] = getattr(new, name)[key]
    for key, parts in ref.floors.items():
        for mine, theirs in zip(parts, new.floors[key], strict=True):
            mine[rows] = theirs
    return ref


def score(ref_path: Path, new_path: Path | None) -> None:
    sim = pickle.loads(ref_path.read_bytes())
    if new_path is not None:
        sim = splice(sim, pickle.loads(new_path.read_bytes()))
    for dev, (ttft, tpot) in inner_lomo(sim).items():
        print(f"inner leave-one-model-out {dev:9s} TTFT {ttft:.1%} TPOT {tpot:.1%}")
    frame, _ = be.leave_one_gpu_out(sim)
    for s in be.scores(frame):
        where = f"{s['scope']:13s} {s['key'] or 'all':22s} n={s['n']:5d}"
        print(f"held out {where} TTFT {s['ttft_mape']:.1%} TPOT {s['tpot_mape']:.1%}")


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "agree":
        agree()
    elif command == "simulate":
        simulate(sys.argv[2], Path(sys.argv[3]))
    else:
        score(Path(sys.argv[2]), Path(sys.argv[3]) if len(sys.argv) > 3 else None)
