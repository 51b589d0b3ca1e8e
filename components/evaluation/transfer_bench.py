"""The transfer tier on ``aiconfigurator-unseen-gpu``: each GPU held out of the store, answered by the op
engine.

For a held-out GPU the store keeps every other GPU (its relatives); the transfer model is fitted on those GPUs
only (``transfer_fit.fit_transfer``: its settings chosen by inner leave-one-GPU-out over them, never on the
held-out GPU), and the engine answers the held-out GPU's rows (capped by hash per dtype) from its spec sheet:
the transfer tier where a relative answers, else the spec tier. Beside it, on the same rows: the spec tier
alone (today's answer), and the sibling-physics rule of the issue (the most similar measured GPU's answer at
the shape times ``(roof_X + 3 us) / (roof_Y + 3 us)``, no learning), and the roofline.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

BENCH_FAMILIES: tuple[str, ...] = ("gemm", "attention", "moe")
SIBLING_FLOOR_US = 3.0  # the rule: roof + 3 us
ANSWERS: dict[str, str] = {"sum_ape": "", "sum_spec": "spec_", "sum_sibling": "sibling_"}


class SpecFits:
    """Spec models fitted without a set of GPUs, each set once: the held-out GPU's model, and its inner folds'
    (the far choice: ``{A, B}`` serves held A with inner B and held B with inner A). ``store``: the families
    without a booster take their priors from it (the engine's spec tier), None for the spec tier alone."""

    def __init__(
        self, rows: dict[str, pd.DataFrame], store: dict | None, specs: dict, fit_args: dict[str, Any]
    ) -> None:
        self.rows, self.store, self.specs, self.fit_args = rows, store, specs, fit_args
        self.fits: dict[frozenset[str], Any] = {}

    def __call__(self, *left_out: str) -> Any:
        from components.opmodel import spec as spec_tier

        key = frozenset(left_out)
        if key not in self.fits:
            train = {f: r[~r["device_id"].isin(key)] for f, r in self.rows.items()}
            model = spec_tier.fit(train, self.specs, **self.fit_args)
            if self.store is not None:
                rest = {
                    f: v[~v["device_id"].isin(key)] for f, v in self.store.items() if f not in model.boosters
                }
                spec_tier.fit_priors(model, rest, self.specs)
            self.fits[key] = model
        return self.fits[key]


def sibling_model() -> Any:
    """The issue's rule as a transfer model: the nearest relative, no correction, a 3 us floor everywhere."""
    from components.opmodel.transfer import TransferModel, TransferSettings

    plain = TransferSettings(k=1, tau=1.0, ridge=None)
    model = TransferModel(settings={f: plain for f in BENCH_FAMILIES})
    model.near_settings = dict(model.settings)  # the most similar GPU, whatever its standing
    model.floors = {f: SIBLING_FLOOR_US for f in BENCH_FAMILIES}
    return model


def held_gpu_scores(
    store: dict[str, pd.DataFrame],
    held: str,
    spec_model: Any,
    test_per_group: int | None,
    pair_rows: int,
    full: Any = None,
    memo: dict | None = None,
    spec_without: Any = None,
    detail: list | None = None,
) -> tuple[list[dict[str, Any]], Any]:
    """``full``: the measured tier of every GPU of ``store`` (its ``without(held)`` answers); ``memo``: kept
    across the held-out GPUs of one store (``transfer_fit.fit_transfer``'s); ``spec_without``: a training GPU
    -> the spec model fitted without it and ``held`` (the far choice's inner folds); ``detail``: given, each
    group's rows with every answer are appended to it (``row_detail``). Per (family,
    dtype[, kv]) group of ``held``'s rows: summed APEs of the engine (transfer tier, else
    spec), of the spec tier alone, of the sibling rule (over the rows it answers) and of the roofline; and
    the fitted transfer model."""
    from components.devices.catalog import load_catalog
    from components.opmodel.engine import OpEngine
    from components.opmodel.measured import LAYOUTS, MeasuredTier
    from components.opmodel.spec import fit_priors
    from components.opmodel.transfer import CURVE_FAMILIES, TransferTier
    from components.opmodel.transfer_fit import asked_rows, fit_transfer, groups_of, shape_of

    catalog = load_catalog()
    train = {f: v[v["device_id"] != held] for f, v in store.items()}
    devices = sorted({str(d) for v in train.values() for d in v["device_id"].unique() if d in catalog})
    specs = {d: catalog.get(d) for d in devices}
    if full is None:  # every GPU's measured tier, to share its site tables across held-out GPUs
        full = MeasuredTier(
            {f: v for f, v in store.items() if f in LAYOUTS}, {**specs, held: catalog.get(held)}
        )
    measured = full.without(held)
    curves = {f: v for f, v in train.items() if f in CURVE_FAMILIES}
    fit_priors(spec_model, {f: v for f, v in train.items() if f not in spec_model.boosters}, specs)
    memo = {} if memo is None else memo
    model = fit_transfer(measured, train, devices, pair_rows, memo=memo, spec_without=spec_without)
    tables = memo.setdefault("curve_tables", {})
    engine = OpEngine(measured, spec_model, transfer=TransferTier(measured, curves, model, tables))
    spec_only = OpEngine(None, spec_model)
    # the rule as the issue has it: the ratio for every relative, a twin's too
    sibling = TransferTier(measured, curves, sibling_model(), tables, hold=False, twins=False)
    spec = catalog.get(held)
    results = []
    for family in BENCH_FAMILIES:
        frame = store.get(family)
        if frame is None:
            continue
        rows = asked_rows(family, frame[frame["device_id"] == held], test_per_group, "test")
        for dtype, kv, part in groups_of(family, rows):
            shape = shape_of(family, part)
            true = part["latency_us"].to_numpy(dtype="float64")
            got = engine.predict(family, dtype, shape, spec, kv_dtype=kv)
            base = spec_only.predict(family, dtype, shape, spec, kv_dtype=kv).duration_us
            rule = sibling.resolve(family, got.roof.choice.dtype, shape, spec, got.roof, kv)
            rule_t = rule[0] if rule is not None else np.full(len(true), np.nan)
            ok = np.isfinite(rule_t)
            if detail is not None:
                raw = engine.transfer.resolve(family, got.roof.choice.dtype, shape, spec, got.roof, kv)
                answers = {"engine": got.duration_us, "spec": base, "sibling": rule_t}
                answers["transfer"] = raw[0] if raw is not None else np.full(len(true), np.nan)
                detail.append(row_detail(part, held, got, answers).assign(family=family))
            results.append(
                {
                    "family": family,
                    "device": held,
                    "dtype": "|".join(x for x in (dtype, kv) if x),
                    "n": len(part),
                    "transfer_share": float(np.mean(got.tier == "transfer")),
                    "sum_ape": float(np.sum(np.abs(got.duration_us - true) / true)),
                    "sum_spec": float(np.sum(np.abs(base - true) / true)),
                    "sum_sibling": float(np.sum(np.abs(rule_t[ok] - true[ok]) / true[ok])),
                    "n_sibling": int(ok.sum()),
                    "sum_roof": float(np.sum(np.abs(got.roof.time_us - true) / true)),
                }
            )
    return results, model


def row_detail(part: pd.DataFrame, held: str, got: Any, answers: dict[str, np.ndarray]) -> pd.DataFrame:
    """One held-out group's rows: the shape, the measured time, each answer (``answers``; ``transfer``: the
    transfer tier's blend before the far choice, the envelope and the achievable cap), the engine's tier and
    the roofline's bound (compute or memory)."""
    out = part.reset_index(drop=True).assign(device=held, tier=got.tier, support=got.support)
    out["bound"] = np.where(got.roof.compute_us >= got.roof.memory_us, "compute", "memory")
    for name, values in answers.items():
        out[name] = values
    return out


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The engine's, the spec tier's and the sibling rule's metrics and per-GPU tables (prefixes ``spec_``,
    ``sibling_``; the engine's unprefixed, as the gate reads them)."""
    from components.evaluation.opmodel_bench import _summary

    out: dict[str, Any] = {"metrics": {}, "per_gpu": {}}
    for column, prefix in ANSWERS.items():
        rows = [
            {
                **r,
                "sum_ape": r[column],
                "n": r["n_sibling"] if column == "sum_sibling" else r["n"],
                **({"coverage": r["n_sibling"] / r["n"]} if column == "sum_sibling" and r["n"] else {}),
            }
            for r in results
            if column != "sum_sibling" or r["n_sibling"] > 0
        ]
        part = _summary(rows)
        for key, value in part["metrics"].items():
            if prefix and "roofline" in key:
                continue
            out["metrics"][f"{prefix}{key}"] = value
        out["per_gpu" if not prefix else f"per_gpu_{prefix.rstrip('_')}"] = part["per_gpu"]
    return out
