"""The measured tier's answers before and after a change of its code, on one fixed, generated question set.

Loads ``components/opmodel/measured.py`` as it was at a git revision (``--base``) beside the working tree's,
builds the measured store of the real aiconfigurator tables of the GPUs asked (``--gpus``), draws the
questions (seeded: exact hits, held-out sites, random and off-grid sizes, batched GEMMs, prefill chunks,
unmeasured head sizes, each batch also asked one question at a time) and counts the questions whose five
answer fields (runtime, exact, neighbours, distance, spread) are identical, and times both.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/measured_search_compare.py --base main [--gpus h100_sxm] \
        [--datasets ../shared/datasets]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT.parent / "shared" / "datasets"
DATA = "aic-core/src/aiconfigurator_core/systems/data"
TABLES = (
    "gemm/vllm/0.24.0/gemm_perf.parquet",
    "attention/vllm/0.24.0/context_attention_perf.parquet",
    "attention/vllm/0.24.0/generation_attention_perf.parquet",
)
FIELDS = ("duration_us", "exact", "neighbours", "distance", "spread")


def module_at(revision: str) -> ModuleType:
    """``components.opmodel.measured`` as committed at ``revision``, imported under another name."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{revision}:components/opmodel/measured.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "measured_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("measured_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["measured_before"] = module
    spec.loader.exec_module(module)
    return module


def build(datasets: Path, gpus: list[str]) -> dict:
    from components.opmodel.store import build_store, load_store

    root = Path(tempfile.mkdtemp())
    for gpu in gpus:
        for table in TABLES:
            source = datasets / "aiconfigurator" / DATA / gpu / table
            if source.is_file():
                link = root / DATA / gpu / table
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(source)
    build_store(root, root / "store", families=("gemm", "attention"))
    return load_store(root / "store")


def gemm_questions(part, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    from components.opmodel.spec import hash_fraction

    held = hash_fraction(part, ["N", "K"]) < 0.2
    seen = part[~held].sample(min(n, int((~held).sum())), random_state=int(rng.integers(1 << 30)))
    unseen = part[held].sample(min(n, int(held.sum())), random_state=int(rng.integers(1 << 30)))
    # random sizes, and on-grid N with K past the grid
    random = {a: rng.integers(1, 16385, n) for a in "MNK"}
    past = {
        "M": rng.integers(1, 4096, n),
        "N": rng.choice(part["N"].to_numpy(), n),
        "K": rng.integers(1, 70000, n),
    }
    shape = {a: np.concatenate([seen[a], unseen[a], random[a], past[a]]).astype("float64") for a in "MNK"}
    shape["B"] = np.where(rng.random(len(shape["M"])) < 0.1, 4.0, 1.0)
    return shape, part[~held]


def attention_questions(part, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    sites = part[["phase", "D", "W", "B", "H", "HKV"]].astype(str).agg("|".join, axis=1)
    held = sites.isin(sites.drop_duplicates().sample(frac=0.2, random_state=int(rng.integers(1 << 30))))
    ask = np.concatenate([rng.choice(np.flatnonzero(~held), n), rng.choice(np.flatnonzero(held), n)])
    shape = {k: part[k].to_numpy(dtype="float64")[ask] for k in ("B", "S", "KV", "H", "HKV", "D", "W")}
    off = rng.random(len(ask)) < 0.4
    shape["B"] = np.where(off, rng.integers(1, 300, len(ask)), shape["B"])
    shape["H"] = np.where(off, rng.choice([6, 12, 20, 40, 96], len(ask)), shape["H"])
    shape["D"] = np.where(rng.random(len(ask)) < 0.05, 96.0, shape["D"])
    chunk = (rng.random(len(ask)) < 0.05) & (shape["S"] > 1)
    shape["S"] = np.where(chunk, np.maximum(shape["S"] // 2, 2), shape["S"])
    return shape, part[~held]


def same(a, b) -> np.ndarray:
    """Per question: every field equal (NaN equal to NaN, floats to 1e-12 relative)."""
    ok = np.ones(len(a.duration_us), bool)
    for field in FIELDS:
        x, y = getattr(a, field), getattr(b, field)
        if x.dtype.kind == "f":
            both_nan = np.isnan(x) & np.isnan(y)
            with np.errstate(invalid="ignore"):
                close = np.abs(x - y) <= 1e-12 * np.abs(y)
            ok &= both_nan | close
        else:
            ok &= x == y
    return ok


def tie_at_a_cut(module: ModuleType, table, shape: dict[str, np.ndarray], i: int) -> bool:
    """Whether equally distant sites compete for the last kept nearest place or the last blended one at
    question ``i``'s site: where the former selection (``np.argpartition``) picked one of them arbitrarily."""
    one = {k: v[i : i + 1] for k, v in shape.items()}
    columns = module._question_columns(table.family, one, 1, table.dtype)
    code = table._category_codes(columns, 1)
    if not np.isfinite(code).all():
        return False
    coords = np.log2([[float(columns[a][0]) for a in table.layout.site_axes]])
    dist = np.sort(table.within_gate(np.column_stack([code, coords]))[2])
    return any(
        k < len(dist) and dist[k - 1] == dist[k] for k in (module.NEAREST_KEPT, table.layout.neighbours)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="main")
    parser.add_argument("--datasets", type=Path, default=DATASETS)
    parser.add_argument("--gpus", nargs="+", default=["h100_sxm", "h200_sxm"])
    parser.add_argument("--n", type=int, default=300, help="questions per kind and table")
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    from components.devices.catalog import load_catalog
    from components.opmodel import measured as after
    from components.physics import roofline as physics

    before = module_at(args.base)
    store = build(args.datasets, args.gpus)
    catalog = load_catalog()
    total = identical = tied = 0
    seconds = {"before": 0.0, "after": 0.0}
    worst = 0.0
    for family in ("gemm", "attention"):
        keys = ["device_id", "dtype"] + (["kv_dtype"] if family == "attention" else [])
        for key, part in store[family].groupby(keys, sort=True):
            device, dtype = key[0], key[1]
            kv = key[2] if family == "attention" else None
            spec = catalog.get(device)
            part = part[part["M"] >= 1] if family == "gemm" else part
            for seed in range(args.seeds):
                rng = np.random.default_rng(1000 * seed + 7)
                make = gemm_questions if family == "gemm" else attention_questions
                shape, train = make(part, rng, args.n)
                roof = physics.roofline(family, dtype, shape, spec, kv).time_us
                tables = {
                    name: module.SiteTable(family, train, spec, dtype, kv)
                    for name, module in (("before", before), ("after", after))
                }
                answers = {}
                for name, table in tables.items():
                    start = time.perf_counter()
                    answers[name] = table.resolve(shape, roof)
                    seconds[name] += time.perf_counter() - start
                match = same(answers["after"], answers["before"])
                tied += sum(tie_at_a_cut(after, tables["after"], shape, i) for i in np.flatnonzero(~match))
                singles = rng.choice(len(roof), 40, replace=False)
                for i in singles:  # one-question batches: the batch decides which path is taken
                    one = {k: v[i : i + 1] for k, v in shape.items()}
                    pair = [t.resolve(one, roof[i : i + 1]) for t in (tables["after"], tables["before"])]
                    match = np.append(match, same(*pair))
                    tied += int(not match[-1] and tie_at_a_cut(after, tables["after"], one, 0))
                a, b = answers["after"].duration_us, answers["before"].duration_us
                finite = np.isfinite(a) & np.isfinite(b)
                if finite.any():
                    worst = max(worst, float(np.max(np.abs(a[finite] / b[finite] - 1))))
                total += len(match)
                identical += int(match.sum())
                name = "/".join(map(str, key))
                print(f"{family} {name} seed {seed}: {int(match.sum())}/{len(match)} identical")
    print(f"identical {identical} of {total} questions, different {total - identical}", end="")
    print(f" ({tied} of them where equally distant sites tie for a kept or blended place)")
    print(f"largest runtime difference among answered questions: {100 * worst:.3g}%")
    print(f"resolve seconds (batches): before {seconds['before']:.2f}, after {seconds['after']:.2f}")


if __name__ == "__main__":
    main()
