"""Answer a whole-program question: a KernelBench-style PyTorch module on one or more GPUs.

The module is traced in the sandbox (``trace``) into aten calls, each mapped to an op question
(``ops``); every op x device is scored by the op-level predictor in one feature table
(``program_features``); the program model (``overheads``) adds learned launch and framework
overheads and a program-level correction. The answer carries the per-op breakdown (top ops by
predicted time, each with its bound) and the program's roofline class and bounding pipe.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.physics.bounds import class_of_bound
from components.programs.errors import ProgramError
from components.programs.ops import ProgramOps, display_name, program_ops
from components.programs.overheads import ProgramModel, kind_sums
from components.programs.program_features import FEATURE_KINDS, L2_WARM, op_terms

PROGRAMS_DIR = "programs"  # under KERNELCAST_HOME/models: one program model per op-predictor basis
ROOFLINE_BASIS = "roofline"
BREAKDOWN_TOP = 8
DTYPES: tuple[str, ...] = ("fp32", "fp16", "bf16", "fp64", "fp8")


def basis_id(predictor: Any) -> str:
    """What a program model was fitted on: ``roofline``, or the op predictor's family + a fingerprint of
    its fitted state (config, feature columns, conformal/floor numbers) -- the same for the predictor
    the train stage fitted and for any copy loaded from its folder (MLflow, the serving flat trees)."""
    family = str(getattr(predictor, "family", "") or "")
    if predictor is None or family == "roofline":
        return ROOFLINE_BASIS
    cached = getattr(predictor, "_kernelcast_basis_id", None)
    if cached:
        return str(cached)
    state = {}
    for name in (
        "config",
        "feature_columns",
        "categories",
        "classes",
        "conformal",
        "floors",
        "target_bounds",
        "ood",
    ):
        value = getattr(predictor, name, None)
        if value is not None:
            state[name] = asdict(value) if is_dataclass(value) else value
    if state:
        text = json.dumps(state, sort_keys=True, default=str)
    else:  # another family: the rows it was trained on
        text = "\n".join(sorted(getattr(predictor, "trained_on", frozenset()) or ()))
    value = f"{family or 'predictor'}-{hashlib.sha1(text.encode()).hexdigest()[:12]}"
    with contextlib.suppress(AttributeError):
        predictor._kernelcast_basis_id = value  # once per loaded predictor, not per question
    return value


def program_model_path(models_dir: Path, basis: str) -> Path:
    return Path(models_dir) / PROGRAMS_DIR / f"{basis}.json"


def resolve_program_model(op_predictor: Any, models_dir: Path | None = None) -> tuple[ProgramModel, bool]:
    """The program model for this op predictor and whether it is in its basis (``False``: the
    roofline-basis model, or the untrained defaults, answers the total and the op predictor only
    gives the breakdown). Looks at a model attached to the predictor, then the one its folder carries
    (``program_model_file``, set by ``components.models.with_carried``: ``--model DIR``, a champion's
    registry copy) when fitted in its basis, then ``models/programs/<basis>.json``, then
    ``models/programs/roofline.json``: the op predictor's own
    model answers whenever it exists, so the answer is its ops' answers plus the time between them
    (a roofline-basis model rescales every op of a kind by one factor learned on KernelBench's small
    programs: 0.61 of the FP32 peak for every GEMM, where a V100's measured GEMMs reach 0.85)."""
    attached = getattr(op_predictor, "program_model", None)
    if isinstance(attached, ProgramModel):
        return attached, True
    if models_dir is None:
        from components.platform.config import get_settings

        models_dir = get_settings().models_dir
    basis = basis_id(op_predictor)
    carried = getattr(op_predictor, "program_model_file", None)
    candidates: list[tuple[Path, str]] = [(Path(carried), basis)] if carried else []
    candidates += [(program_model_path(models_dir, c), c) for c in dict.fromkeys((basis, ROOFLINE_BASIS))]
    for path, candidate in candidates:
        if path.is_file():
            try:
                model = ProgramModel.load(path)
            except (ValueError, KeyError, TypeError, json.JSONDecodeError):
                continue  # a stale or foreign file: fall through to the next basis
            if model.basis == candidate:  # a folder's file fitted on another predictor's answers: next
                return model, candidate == basis
    # untrained: no factor on any kind, so the ops' times (the engine's answers, else rooflines) stand
    return ProgramModel.untrained(), True


def _check_dtype(dtype: str | None) -> str | None:
    if dtype is None or str(dtype).strip() == "":
        return None
    value = str(dtype).strip().lower()
    if value not in DTYPES:
        raise ProgramError(
            f"dtype {dtype!r}: a module question takes one of {', '.join(DTYPES)} "
            "(or none: the dtypes the module itself uses)"
        )
    return value


def _short_shape(shape: tuple[tuple[str, float], ...]) -> str:
    return ",".join(f"{k}={int(v) if float(v).is_integer() else round(v, 1)}" for k, v in shape)


def program_frames(
    programs: list[ProgramOps], specs: list[Any], op_predictor: Any, model: ProgramModel, matches: bool
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(op rows, program rows) for programs x specs; program rows carry ``pred_<kind>`` in the
    program model's basis and ``predicted_us``."""
    from components.devices import load_catalog
    from components.programs.program_features import timed_programs

    catalog = load_catalog()
    extra = [s for s in specs if s.id not in catalog.ids()]
    if extra:
        catalog = catalog.with_devices(extra)
    ids = [s.id for s in specs]
    times, frame = timed_programs(programs, ids, catalog, op_predictor)
    basis_column = "pred_us" if matches else "basis_roof_us"
    frame = frame.merge(kind_sums(times.frame, basis_column, "pred"), on=["program", "device_id"], how="left")
    frame = frame.fillna({c: 0.0 for c in frame.columns if c.startswith("pred_") and c != "pred_sum_us"})
    frame["predicted_us"] = model.predict(frame)
    frame["ops_us"] = model.config().ops(frame, "pred")  # the ops' GPU time inside predicted_us
    return times.frame, frame


def predict_module(
    module: str, dtype: str | None, specs: list[Any], op_predictor: Any, *, train: bool = False
) -> list[dict[str, Any]]:
    """One answer dict per spec for a KernelBench-style module (path or text); ProgramError when
    the module cannot be traced or the question is malformed. ``train``: one training step --
    forward, backward (autograd's ops, traced on fake tensors) and an Adam step -- with the memory
    it needs (parameters, gradients, Adam's moments, activations) checked against each GPU's."""
    from components.programs.trace import trace_module

    dtype = _check_dtype(dtype)
    if not specs:
        raise ProgramError("a module question needs at least one device")
    trace = trace_module(module, train=train)
    from components.programs.program_features import with_dtype

    program = with_dtype(program_ops(trace.ops), dtype)
    model, matches = resolve_program_model(op_predictor)
    times, frame = program_frames([program], list(specs), op_predictor, model, matches)
    answers = [
        _answer(
            program,
            spec,
            times[times["device_id"] == spec.id],
            frame[frame["device_id"] == spec.id].iloc[0],
            model,
            matches,
            op_predictor,
            trace.name,
        )
        for spec in specs
    ]
    if train:
        for answer, spec in zip(answers, specs, strict=True):
            _training_notes(answer, trace, spec)
    return answers


def _training_notes(answer: dict[str, Any], trace: Any, spec: Any) -> None:
    """What a training step's answer adds: kernels per phase and whether its state fits the GPU."""
    from collections import Counter

    phases = Counter(op.get("phase", "forward") for op in trace.ops if not op.get("view"))
    need = float(sum(trace.memory.values()))
    have = float(spec.memory_gb) * 2**30
    parts = ", ".join(f"{k} {v / 2**30:.3g} GiB" for k, v in trace.memory.items())
    fits = need <= have
    notes = [
        "training step: "
        + ", ".join(f"{phases.get(p, 0)} {p} calls" for p in ("forward", "backward", "optimizer"))
        + " (loss = sum of the outputs; Adam, one step)",
        f"memory {'fits' if fits else 'does NOT fit'}: needs {need / 2**30:.3g} GiB ({parts}) of "
        f"{spec.memory_gb:g} GiB on {spec.name}",
    ]
    answer["note"] = "; ".join([*notes, answer["note"]])
    if not fits:
        answer["ood"] = True


def answer_ops(ops: pd.DataFrame, model: ProgramModel, matches: bool) -> pd.DataFrame:
    """One device's op rows with each op's GPU time in the program (``total_us``, all its calls), its
    roofline (``roof_total``: the L2 roofline for an op that runs from the L2) and pipe (``l2`` there)."""
    config = model.config()
    basis_us = ops["pred_us"] if matches else ops["basis_roof_us"]
    l2 = ops["l2_ratio"].to_numpy("float64") if "l2_ratio" in ops.columns else np.zeros(len(ops))
    scale = pd.Series(op_terms(ops)).map(config.op_scale).to_numpy("float64") if len(ops) else 1.0
    scale = np.where(l2 > 0, config.op_scale(L2_WARM) * l2, scale)
    roof_total = ops["roof_us"] * ops["count"] * np.where(l2 > 0, l2, 1.0)
    pipe = np.where(l2 > 0, "l2", ops["pipe"].astype(str)) if len(ops) else ops["pipe"]
    return ops.assign(total_us=basis_us * scale * ops["count"], roof_total=roof_total, pipe=pipe)


def _answer(
    program: ProgramOps,
    spec: Any,
    ops: pd.DataFrame,
    row: pd.Series,
    model: ProgramModel,
    matches: bool,
    op_predictor: Any,
    name: str,
) -> dict[str, Any]:
    # Each op's GPU time in the program: its time in the program model's basis (the op predictor's
    # answer, or the roofline when the model is the roofline-basis one) times the model's factor for
    # its kind (>= 1); an op that runs from the L2 (``l2_ratio`` > 0) at its L2 time times the L2 term's
    # factor. These sum to the model's ops time, and the total is that plus the learned time between the
    # ops (>= 0): one model, never below its ops' GPU time nor the roofline (memory-bound ops that fit in
    # the L2 at the L2's bandwidth).
    ops = answer_ops(ops, model, matches)
    l2 = ops["l2_ratio"].to_numpy("float64") if "l2_ratio" in ops.columns else np.zeros(len(ops))
    roof = float(ops["roof_total"].sum())
    ops_time = float(ops["total_us"].sum())
    # Kinds the program model has no term for (unknown aten ops, estimated by bytes moved) add on top.
    # (an unknown op that fits in the L2 is in the model's L2 term)
    outside = (~ops["kind"].isin(list(FEATURE_KINDS)) & (l2 <= 0)) if len(ops) else pd.Series(dtype=bool)
    duration = float(row["predicted_us"]) + float(ops.loc[outside, "total_us"].sum())
    # DRAM traffic: an op that runs from the L2 reads what its producer left there
    moved = float((ops["bytes_moved"] * ops["count"] * (l2 <= 0)).sum())
    launch_dominated = ops_time < 0.5 * duration
    pipe_time = ops.groupby("pipe")["roof_total"].sum() if len(ops) else pd.Series(dtype=float)
    bound_pipe = "launch" if launch_dominated or pipe_time.empty else str(pipe_time.idxmax())
    roofline_class = class_of_bound(bound_pipe)  # the side of the bound: latency when launches dominate
    top = ops.sort_values("total_us", ascending=False).head(BREAKDOWN_TOP)
    breakdown = [
        {
            "op": f"{display_name(program.questions[int(r.question)])} [{r.kind}] "
            f"{_short_shape(program.questions[int(r.question)].shape)}",
            "count": int(r.count),
            "duration_us": round(float(r.total_us), 3),
            "bound": str(r.pipe),
            "roofline_class": class_of_bound(str(r.pipe)),
            "tier": str(getattr(r, "tier", r.pred_source)),
        }
        for r in top.itertuples()
    ]
    flops = _program_flops(ops)
    notes = [
        f"{program.n_kernels} kernels from {program.n_aten} aten calls; on the host "
        f"{program.n_modules} nn.Module calls, {program.n_pycalls} torch calls from Python"
    ]
    if program.unmapped:
        names = ", ".join(f"{k} x{v}" for k, v in program.unmapped.most_common(5))
        notes.append(
            f"{sum(program.unmapped.values())} calls of unknown aten ops estimated by bytes moved ({names})"
        )
    if not model.fitted:
        notes.append("no learned program model yet (run the train stage): op times plus default overheads")
    elif not matches:
        notes.append(
            "program total from the roofline-basis program model (none fitted on this op predictor's "
            "times): each op its roofline time scaled by its kind's learned factor"
        )
    uses_roofline = int((ops["pred_source"] == "roofline").sum()) if "pred_source" in ops else 0
    if uses_roofline:
        notes.append(
            f"{uses_roofline} of {len(ops)} distinct ops outside the op engine's families (GEMM, bmm, "
            "attention): roofline time x their kind's factor learned on KernelBench programs"
        )
    if "tier" in ops.columns and len(ops):
        tiers = ops.groupby("tier")["total_us"].sum().sort_values(ascending=False)
        notes.append(
            "op time by tier: "
            + ", ".join(f"{t} {100 * v / max(ops_time, 1e-12):.0f}%" for t, v in tiers.items())
        )
    notes.append(
        f"total = the ops' GPU time {ops_time:.4g} us + time between them (launch gaps, host dispatch, "
        f"RNN time steps) "
        f"{max(duration - ops_time, 0.0):.4g} us"
    )
    seconds = duration * 1e-6
    ood = (not model.fitted) or bool(program.unmapped)
    answer: dict[str, Any] = {
        "question": 0,
        "device": spec.id,
        "device_name": spec.name,
        "kind": "module",
        "duration_us": duration,
        "duration_us_lo": None,
        "duration_us_hi": None,
        "achieved_gbps": moved / seconds / 1e9 if seconds > 0 else None,
        "gflops": flops / seconds / 1e9 if seconds > 0 and flops > 0 else None,
        "l1_hit_rate": None,
        "l2_hit_rate": None,
        "arith_intensity": flops / moved if moved > 0 and flops > 0 else None,
        "roofline_class": roofline_class,
        "bound_pipe": bound_pipe,
        "roofline_us": roof,
        "headroom": duration / roof if roof > 0 else None,
        "ood": bool(ood),
        "note": "; ".join(notes),
        "model_version": None,
        "breakdown": json.dumps(breakdown),
    }
    interval = _interval(model, duration)
    if interval is not None:
        floor = max(ops_time, roof)
        answer["duration_us_lo"], answer["duration_us_hi"] = max(interval[0], floor), max(interval[1], floor)
    return answer


def _program_flops(ops: pd.DataFrame) -> float:
    """FLOPs of the program's ops by their definitions (the analytical features' ``f_flops``)."""
    return float((ops["flops"].fillna(0.0) * ops["count"]).sum()) if "flops" in ops.columns else 0.0


def _interval(model: ProgramModel, duration: float) -> tuple[float, float] | None:
    config = model.configs.get("eager")
    q = getattr(config, "q_log", None) if config is not None else None
    if q is None or not np.isfinite(q):
        return None
    return duration * math.exp(-q), duration * math.exp(q)
