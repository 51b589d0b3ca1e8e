"""How far a relative carries: the transfer tier's answer for a GPU whose nearest relative is of another
generation, chosen on the training GPUs only.

A relative of the same vendor and architecture (H100 for H200: the same SMs, clocks and pipes, more DRAM
bandwidth) carries over by physics (bf16 GEMM: 5% either way). A relative of another generation carries
kernel choices the asked GPU may not make. Two standings are told apart there:

- **kin**: the same vendor and memory class (HBM, GDDR) but another architecture -- a generation jump within
  one line (A100 for H100, Hopper for Blackwell, MI300X for MI355X);
- **far**: everything else (A100 or H100 for L40S, a GDDR part; NVIDIA GPUs for an AMD or Intel one).

In either, the answer is the transfer tier's, the spec tier's, or their geometric blend, per op family,
whichever errs least by inner leave-one-GPU-out over the training GPUs (each answered by the transfer tier
from the others, and by a spec model fitted without it: ``spec_without``, supplied by the caller, who caches
the fits). The far choice is made on every training regime without a near relative (kin ones included, as
before kin was told apart); the kin choice on the kin cases alone: training regimes whose relatives are kin,
and training regimes with a near relative answered as if their generation were unseen (H100 with H200 left
out of the relatives and of the spec model: only A100 remains of its line). Without kin cases the kin
standing takes the far choice. Transfer comes first, then blend, then spec: ties keep the earlier one.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

FAR_CHOICES: tuple[str, ...] = ("transfer", "blend", "spec")


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
    """The answer of a far regime under ``choice`` (NaN where the transfer tier has none)."""
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
    cases: list[tuple[Any, tuple[str, ...]]], specs: dict[str, Any], predict_without: Any, spec_without: Any
) -> dict[str, dict[str, Any]]:
    """Per family over ``cases`` ((group, left out: the target first)): the choice and its inner scores (mean
    per-case MAPE; ``per_gpu``: each case's). ``predict_without(group, *left_out)``: the transfer tier's
    answer from the training GPUs but ``left_out``; ``spec_without(*left_out)``: the spec model fitted
    without them."""
    from components.opmodel.engine import OpEngine

    apes: dict[str, dict[str, dict[str, list[np.ndarray]]]] = {}
    for left_out in sorted({out for _, out in cases}):
        engine = None
        for g in (g for g, out in cases if out == left_out):
            got = predict_without(g, *left_out)
            ok = np.isfinite(got)
            if not ok.any():
                continue
            engine = engine or OpEngine(None, spec_without(*left_out))
            shape = {k: v[ok] for k, v in g.shape.items()}
            base = engine.raw_predict(g.family, g.dtype, shape, specs[g.target], g.kv).duration_us
            per_case = apes.setdefault(g.family, {}).setdefault(label(left_out), {})
            for name in FAR_CHOICES:
                ape = np.abs(combine(name, got[ok], base) - g.actual[ok]) / g.actual[ok]
                per_case.setdefault(name, []).append(ape)
    out = {}
    for family, per_gpu in sorted(apes.items()):
        scores = {
            case: {name: float(np.concatenate(v[name]).mean()) for name in FAR_CHOICES}
            for case, v in per_gpu.items()
        }
        means = {name: float(np.mean([s[name] for s in scores.values()])) for name in FAR_CHOICES}
        best = min(FAR_CHOICES, key=lambda name: (round(means[name], 9), FAR_CHOICES.index(name)))
        out[family] = {
            "tier": best,
            **{k: round(v, 4) for k, v in means.items()},
            "gpus": sorted(per_gpu),
            "per_gpu": {c: {k: round(v, 4) for k, v in s.items()} for c, s in sorted(scores.items())},
        }
    return out


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
) -> dict[str, dict[str, Any]]:
    """Per family: the kin choice and its inner scores over the kin cases (``kin_cases``); a family without
    any is absent (its kin standing takes the far choice)."""
    return choose(kin_cases(groups, train, specs), specs, predict_without, spec_without)
