"""How far a relative carries: the transfer tier's answer for a GPU whose nearest relative is of another
generation, chosen on the training GPUs only.

A relative of the same vendor and architecture (H100 for H200: the same SMs, clocks and pipes, more DRAM
bandwidth) carries over by physics (bf16 GEMM: 5% either way). A relative of another generation carries
kernel choices the asked GPU may not make. Two standings are told apart there:

- **kin**: the same vendor and memory class (HBM, GDDR) but another architecture -- a generation jump within
  one line (A100 for H100, Hopper for Blackwell, MI300X for MI355X);
- **far**: everything else (A100 or H100 for L40S, a GDDR part; NVIDIA GPUs for an AMD or Intel one).

For either, the choice is the transfer tier's answer, the spec tier's, or their geometric blend, per op
family, whichever errs least by inner leave-one-GPU-out over the training GPUs (each answered by the transfer
tier from the others, and by a spec model fitted without it: ``spec_without``, supplied by the caller, who
caches the fits). The far choice is made on every training regime without a near relative (kin ones included,
as before kin was told apart); the kin choice on the kin cases alone: training regimes whose relatives are
kin, and training regimes with a near relative answered as if their generation were unseen (H100 with H200
left out of the relatives and of the spec model: only A100 remains of its line), where the transfer tier may
also carry from the line's relatives alone (``|kin``), and ``nested`` says whether that choice beats the
pooled far choice on kin cases it was not made on. Transfer comes first, then blend, then spec: ties keep the
earlier one.

The engine answers kin GPUs by the far choice: measured on the aiconfigurator and aiter tables
(docs/transfer-tier.md, branch transfer7), carrying a generation jump like a near relative lost to the
pooled far choice in GEMM and attention on the training GPUs, and a kin choice made apart lost in GEMM and
MoE, won attention by 0.8 points on the full training set but not in every fold, and where a fold's nested
test adopted it (H200's GEMMs) the held-out GPU regressed. ``choose_kin`` stays as the measurement
(``fit_transfer(kin=True)``, ``benchmarks/unseen_catalog_answers.py``) for when a measured pair of adjacent
HBM generations (Hopper and Blackwell) arrives.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

FAR_CHOICES: tuple[str, ...] = ("transfer", "blend", "spec")
# the kin standing may also carry from its line's relatives alone ("|kin": A100 from H100 and H200, without
# L40S beside them in the blend)
KIN_CHOICES: tuple[str, ...] = (*FAR_CHOICES, "transfer|kin", "blend|kin")


def near(x: Any, y: Any) -> bool:
    """Two GPUs of one generation: the same vendor and architecture."""
    return str(x.vendor).lower() == str(y.vendor).lower() and (
        str(x.architecture).lower() == str(y.architecture).lower()
    )


def memory_class(spec: Any) -> str:
    """The memory technology without its generation: HBM3e -> hbm, GDDR6X -> gddr, LPDDR5X -> lpddr."""
    found = re.match(r"[a-z]+", str(spec.memory_type).lower())
    return found.group(0) if found else ""


def kin(x: Any, y: Any) -> bool:
    """Another generation of one vendor's line: the same vendor and memory class, another architecture."""
    same_vendor = str(x.vendor).lower() == str(y.vendor).lower()
    return same_vendor and memory_class(x) == memory_class(y) and not near(x, y)


def standing(asked: Any, relatives: list[Any]) -> str:
    """``near`` when a relative is of the asked GPU's generation, else ``kin`` when one is of its line,
    else ``far`` (relatives: their specs)."""
    if any(near(asked, r) for r in relatives):
        return "near"
    return "kin" if any(kin(asked, r) for r in relatives) else "far"


def combine(choice: str, transfer: np.ndarray, spec: np.ndarray) -> np.ndarray:
    """The answer of a far regime under ``choice`` (NaN where the transfer tier has none; a ``|kin`` scope
    is the caller's: ``transfer`` is then the answer of the kin relatives)."""
    choice = choice.partition("|")[0]
    if choice == "spec":
        return np.where(np.isfinite(transfer), spec, np.nan)
    if choice == "blend":
        return np.sqrt(transfer * spec)
    return transfer


def _relatives(group: Any, train: list[str]) -> set[str]:
    return {c.device for c in group.carried if c.device in train and c.device != group.target}


def far_group(group: Any, train: list[str], specs: dict[str, Any]) -> bool:
    """A pair group is far when none of its relatives among the other training GPUs is of its GPU's
    generation: as ``TransferTier.far_choice`` decides per regime (H200's int8 GEMMs have A100 and L40S, no
    H100: far, though its bf16 ones have H100)."""
    relatives = _relatives(group, train)
    return bool(relatives) and not any(near(specs[group.target], specs[d]) for d in relatives)


def far_targets(groups: list[Any], train: list[str], specs: dict[str, Any]) -> set[str]:
    """The training GPUs with a far pair group (``far_group``)."""
    return {g.target for g in groups if g.target in train and far_group(g, train, specs)}


def kin_cases(
    groups: list[Any], train: list[str], specs: dict[str, Any]
) -> list[tuple[Any, tuple[str, ...]]]:
    """(group, left out) of every kin case: a training regime answered without its GPU's generation (the
    target, then its near relatives, left out of the relatives and of the spec model) that keeps a kin
    relative. A100's GEMMs (from Hopper), H100's with H200 left out (from A100)."""
    out = []
    for g in groups:
        if g.target not in train or g.shape is None:
            continue
        relatives = _relatives(g, train)
        nears = sorted(d for d in relatives if near(specs[g.target], specs[d]))
        if any(kin(specs[g.target], specs[d]) for d in relatives - set(nears)):
            out.append((g, (g.target, *nears)))
    return out


def label(left_out: tuple[str, ...]) -> str:
    """A case's name: the target GPU, and the relatives of its generation left out with it."""
    return left_out[0] + (f" without {','.join(left_out[1:])}" if len(left_out) > 1 else "")


def choose(
    cases: list[tuple[Any, tuple[str, ...]]],
    specs: dict[str, Any],
    predict_without: Any,
    spec_without: Any,
    options: tuple[str, ...] = FAR_CHOICES,
) -> dict[str, dict[str, Any]]:
    """Per family over ``cases`` ((group, left out: the target first)): the best of ``options`` and the
    inner scores (mean per-case MAPE; ``per_gpu``: each case's). ``predict_without(group, *left_out,
    only=None)``: the transfer tier's answer from the training GPUs but ``left_out`` (``only``: the relatives
    that may answer); ``spec_without(*left_out)``: the spec model fitted without them."""
    from components.opmodel.engine import OpEngine

    apes: dict[str, dict[str, dict[str, list[np.ndarray]]]] = {}
    for left_out in sorted({out for _, out in cases}):
        engine = None
        for g in (g for g, out in cases if out == left_out):
            got = predict_without(g, *left_out)
            ok = np.isfinite(got)
            if not ok.any():
                continue
            answers = {"": got[ok]}
            if any(o.endswith("|kin") for o in options):
                line = {c.device for c in g.carried if kin(specs[g.target], specs[c.device])}
                own = predict_without(g, *left_out, only=line)[ok]
                answers["kin"] = np.where(np.isfinite(own), own, got[ok])
            engine = engine or OpEngine(None, spec_without(*left_out))
            shape = {k: v[ok] for k, v in g.shape.items()}
            base = engine.raw_predict(g.family, g.dtype, shape, specs[g.target], g.kv).duration_us
            per_case = apes.setdefault(g.family, {}).setdefault(label(left_out), {})
            for name in options:
                carried = answers[name.partition("|")[2]]
                ape = np.abs(combine(name, carried, base) - g.actual[ok]) / g.actual[ok]
                per_case.setdefault(name, []).append(ape)
    out = {}
    for family, per_gpu in sorted(apes.items()):
        scores = {
            case: {name: float(np.concatenate(v[name]).mean()) for name in options}
            for case, v in per_gpu.items()
        }
        means = {name: float(np.mean([s[name] for s in scores.values()])) for name in options}
        out[family] = {
            "tier": best_of(means, options),
            **{k: round(v, 4) for k, v in means.items()},
            "gpus": sorted(per_gpu),
            "per_gpu": {c: {k: round(v, 4) for k, v in s.items()} for c, s in sorted(scores.items())},
        }
    return out


def best_of(means: dict[str, float], options: tuple[str, ...]) -> str:
    """The option of the lowest score; ties keep the earlier one."""
    return min(options, key=lambda name: (round(means[name], 9), options.index(name)))


def _mean_over(per_case: dict[str, dict[str, float]], options: tuple[str, ...]) -> dict[str, float]:
    return {o: float(np.mean([s[o] for s in per_case.values()])) for o in options}


def nested(kin_family: dict[str, Any], far_family: dict[str, Any] | None) -> tuple[float, float] | None:
    """Whether a separate kin choice beats the pooled far choice, judged on the kin cases it was not made on:
    each kin case in turn is left out, the kin choice made on the other kin cases and the far choice on the
    far cases of other GPUs; (mean score of the kin choices, of the far choices) on the left-out cases. None
    with fewer than two kin cases."""
    cases = kin_family["per_gpu"]
    if len(cases) < 2:
        return None
    far_cases = (far_family or {}).get("per_gpu", {})
    kin_scores, far_scores = [], []
    for case, scores in cases.items():
        others = {c: s for c, s in cases.items() if c != case}
        target = case.split(" without ")[0]
        rest = {c: s for c, s in far_cases.items() if c != target}
        pooled = (
            best_of(_mean_over(rest, FAR_CHOICES), FAR_CHOICES)
            if rest
            else (far_family or {}).get("tier", "transfer")
        )
        kin_scores.append(scores[best_of(_mean_over(others, KIN_CHOICES), KIN_CHOICES)])
        far_scores.append(scores[pooled])
    return float(np.mean(kin_scores)), float(np.mean(far_scores))


def choose_far(
    groups: list[Any],
    train: list[str],
    specs: dict[str, Any],
    predict_without: Any,
    spec_without: Any,
) -> dict[str, dict[str, Any]]:
    """Per family: the far choice and its inner scores (mean per-GPU MAPE over the far training GPUs)."""
    cases = [
        (g, (g.target,))
        for g in groups
        if g.target in train and g.shape is not None and far_group(g, train, specs)
    ]
    return choose(cases, specs, predict_without, spec_without)


def choose_kin(
    groups: list[Any],
    train: list[str],
    specs: dict[str, Any],
    predict_without: Any,
    spec_without: Any,
    far: dict[str, dict[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per family: the kin choice over the kin cases (``kin_cases``), among ``KIN_CHOICES``, kept only where
    it beats the pooled far choice by the nested leave-one-case-out (``nested``: ``separate`` true); else the
    family's far choice (``separate`` false). A family without kin cases is absent (its kin standing takes
    the far choice)."""
    far = far or {}
    out = choose(kin_cases(groups, train, specs), specs, predict_without, spec_without, KIN_CHOICES)
    for family, entry in out.items():
        scores = nested(entry, far.get(family))
        separate = scores is not None and scores[0] < scores[1] - 1e-9
        entry["own_choice"] = entry["tier"]
        entry["separate"] = separate
        entry["nested"] = None if scores is None else {"kin": round(scores[0], 4), "far": round(scores[1], 4)}
        if not separate:
            entry["tier"] = far.get(family, {}).get("tier", "transfer")
    return out
