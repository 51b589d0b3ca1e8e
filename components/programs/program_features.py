"""Per-op times of traced programs on GPUs, and the program-level features the overhead model reads.

All programs x devices go through ONE feature table (``build_feature_table``) and one
``predict`` call: each distinct op question (family, op, shape, dtype) becomes one canonical
kernel, each (kernel, device) one query row, exactly as ``components.serving.query`` builds an
op question.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from components.opmodel.routing import LEARNED_TIER
from components.programs.aten_names import KINDS
from components.programs.ops import OpQuestion, ProgramOps

# Kinds whose time the program features report separately (shares of the roofline time).
FEATURE_KINDS: tuple[str, ...] = tuple(k for k in KINDS if k not in ("free", "unmapped"))
# The program-level term of memory-bound ops whose traffic fits in the GPU's L2 (``l2_ratio``).
L2_WARM = "l2warm"
# The program-level term of FP32 GEMMs (mm/addmm/bmm) on GPUs whose FP32 lanes share INT32's datapath
# (``DeviceSpec.fp32_lanes_shared_with_int32``): the op engine answers them at the share of the FP32 peak
# GPUs with dedicated FP32 lanes reach (0.74 on KernelBench's level-1 FP32 GEMMs), where L4, A10, L40S,
# A6000 and A10G reach 0.43-0.61 of it; a factor is learned for the term on the other such GPUs' programs.
FP32_SHARED = "gemm_fp32_shared"
FP32_SHARED_KINDS: tuple[str, ...] = ("gemm", "bmm")
# Analytical per-pipe times -> the pipe name an op's roofline time is spent on.
PIPE_COLUMNS: dict[str, str] = {
    "f_tensor_time_us": "tensor",
    "f_fma_time_us": "fp32",
    "f_sfu_time_us": "sfu",
    "f_dram_time_us": "dram",
    "f_l2_time_us": "l2",
}


def _kernel_id(question: OpQuestion) -> str:
    from components.ingest.schema import canonical_json, stable_id

    return stable_id(
        "program-op", question.family, question.op, canonical_json(dict(question.shape)), question.dtype
    )


def with_dtype(program: ProgramOps, dtype: str | None) -> ProgramOps:
    """The program with every floating op in ``dtype`` (a user asking "in fp16"); None: as traced."""
    if not dtype:
        return program
    from dataclasses import replace

    floating = {"fp32", "fp16", "bf16", "fp64", "fp8"}
    questions = [replace(q, dtype=dtype) if q.dtype in floating else q for q in program.questions]
    return replace(program, questions=questions, dtype=dtype)


@dataclass
class OpTimes:
    """One row per (program, distinct op, device): count, roofline and predicted time, bound."""

    frame: (
        pd.DataFrame
    )  # program, device_id, aten, kind, family, op, dtype, count, roof_us, pred_us, bound, ...


def op_times(
    programs: Sequence[ProgramOps],
    device_ids: Sequence[str],
    catalog: Any,
    op_predictor: Any | None = None,
    engine: Any | None = None,
    learned_only: bool = False,
) -> OpTimes:
    """Roofline and (when ``op_predictor`` is given) predicted time of every op of every program on
    every device. With ``engine`` (the op engine, ``components.opmodel``), the families it covers (GEMM,
    bmm, attention) take its answer instead (``programs.engine_ops``). ``pred_us`` falls back to the
    roofline time where nothing answers; ``pred_source`` says who answered (op engine, op model,
    roofline) and ``tier`` the engine's tier (else the same as ``pred_source``). ``learned_only``: the op
    predictor answers only the GEMMs the one routing gives the learned tier (``engine_ops.learned_gemm``)."""
    from components.features.build import build_feature_table
    from components.ingest.schema import (
        KERNEL_COLUMNS,
        MEASUREMENT_COLUMNS,
        canonical_json,
        conform,
        stable_id,
    )

    kernels: dict[str, dict[str, Any]] = {}
    links: list[tuple[int, int, str]] = []  # (program index, question index, kernel id)
    for p_index, program in enumerate(programs):
        for q_index, question in enumerate(program.questions):
            kid = _kernel_id(question)
            links.append((p_index, q_index, kid))
            if kid not in kernels:
                shape_json = canonical_json(
                    {k: (int(v) if float(v).is_integer() else v) for k, v in question.shape}
                )
                kernels[kid] = {
                    "kernel_id": kid,
                    "source": "query",
                    "family": question.family,
                    "op": question.op,
                    "name": f"{question.aten}:{question.op}",
                    "language": "op",
                    "shape_json": shape_json,
                    "dtype": question.dtype,
                    "kind": question.kind,
                }
    kernel_frame = conform(
        pd.DataFrame(
            list(kernels.values()),
            columns=["kernel_id", "source", "family", "op", "name", "language", "shape_json", "dtype"],
        ),
        KERNEL_COLUMNS,
    )
    kids = list(kernels)
    rows = [
        {
            "measurement_id": stable_id("program-op", kid, d),
            "kernel_id": kid,
            "device_id": d,
            "source": "query",
            "params_json": kernels[kid]["shape_json"],
            "run_id": "query",
        }
        for kid in kids
        for d in device_ids
    ]
    measurements = conform(
        pd.DataFrame(
            rows, columns=["measurement_id", "kernel_id", "device_id", "source", "params_json", "run_id"]
        ),
        MEASUREMENT_COLUMNS,
    )
    table = build_feature_table(measurements, kernel_frame, catalog)
    roof = pd.to_numeric(table["f_roofline_time_us"], errors="coerce").to_numpy("float64")
    pipes = pd.to_numeric(table["f_pipes_time_us"], errors="coerce").to_numpy("float64")
    bound = table["f_bound"].astype("string").fillna("bandwidth").to_numpy()
    pred = np.full(len(table), np.nan)
    if op_predictor is not None and len(table):
        raw = measurements[["measurement_id", "params_json"]].merge(
            kernel_frame[["kernel_id", "shape_json", "name"]],
            left_on=measurements["kernel_id"],
            right_on="kernel_id",
            how="left",
        )
        scored = table.drop(columns=[c for c in ("params_json", "shape_json", "name") if c in table.columns])
        scored = scored.merge(
            raw[["measurement_id", "params_json", "shape_json", "name"]], on="measurement_id", how="left"
        )
        out = op_predictor.predict(scored)
        if "pred_duration_us" in out.columns:
            pred = pd.to_numeric(out["pred_duration_us"], errors="coerce").to_numpy("float64")
    has_pred = np.isfinite(pred) & (pred > 0)
    if learned_only and len(table):
        from components.programs.engine_ops import learned_gemm

        wanted = {k: learned_gemm(str(v["family"]), str(v["dtype"])) for k, v in kernels.items()}
        has_pred &= table["kernel_id"].map(wanted).fillna(False).to_numpy(bool)
        pred = np.fmax(pred, roof)
    pipe_times = (
        np.column_stack(
            [pd.to_numeric(table[c], errors="coerce").fillna(0.0).to_numpy("float64") for c in PIPE_COLUMNS]
        )
        if len(table)
        else np.zeros((0, len(PIPE_COLUMNS)))
    )
    names = np.array(list(PIPE_COLUMNS.values()))
    pipe = names[pipe_times.argmax(axis=1)] if len(table) else np.array([], dtype=object)
    pipe = np.where(pipe_times.max(axis=1) > 0, pipe, "dram") if len(table) else pipe
    per_kernel = pd.DataFrame(
        {
            "kernel_id": table["kernel_id"].to_numpy(),
            "device_id": table["device_id"].to_numpy(),
            "roof_us": roof,
            "pipes_us": pipes,
            "bound": bound,
            "pred_us": np.where(has_pred, pred, roof),
            "pred_source": np.where(has_pred, "op model", "roofline").astype(object),
            "pipe": pipe,
            "flops": pd.to_numeric(table["f_flops"], errors="coerce").to_numpy("float64"),
            "active": pd.to_numeric(table["f_active_sm_fraction"], errors="coerce")
            .fillna(1.0)
            .clip(lower=1.0 / 64, upper=1.0)
            .to_numpy("float64"),
        }
    )
    # the op model's answer is the op engine's learned tier (components.opmodel.routing), as in `predict`
    per_kernel["tier"] = np.where(
        per_kernel["pred_source"] == "op model", LEARNED_TIER, per_kernel["pred_source"]
    ).astype(object)
    per_kernel = _grouped_on_cuda_cores(per_kernel, kernels, device_ids, catalog)
    if engine is not None:
        per_kernel = _with_engine(per_kernel, programs, links, device_ids, catalog, engine)
    per_kernel = per_kernel.merge(_l2_numbers(device_ids, catalog), on="device_id", how="left")
    link_frame = pd.DataFrame(links, columns=["program", "question", "kernel_id"])
    q_info = pd.DataFrame(
        [
            {
                "program": p,
                "question": q,
                "aten": programs[p].questions[q].aten,
                "kind": programs[p].questions[q].kind,
                "family": programs[p].questions[q].family,
                "op": programs[p].questions[q].op,
                "dtype": programs[p].questions[q].dtype,
                "bytes_moved": programs[p].questions[q].bytes_moved,
                "count": programs[p].counts[q],
            }
            for p, q, _ in links
        ]
    )
    if q_info.empty:
        q_info = pd.DataFrame(
            columns=["program", "question", "aten", "kind", "family", "op", "dtype", "bytes_moved", "count"]
        )
    frame = link_frame.merge(q_info, on=["program", "question"]).merge(per_kernel, on="kernel_id", how="left")
    return OpTimes(l2_warm(frame))


def _grouped_on_cuda_cores(
    per_kernel: pd.DataFrame, kernels: dict[str, dict[str, Any]], device_ids: Sequence[str], catalog: Any
) -> pd.DataFrame:
    """``per_kernel`` with FP32 grouped/depthwise convolutions timed on the FMA pipe (``cuda_core_us``).

    The roofline puts every FP32 convolution on the TF32 tensor pipe (cuDNN's default), but cuDNN runs
    grouped and depthwise convolutions -- a few channels per group, no GEMM deep enough for an MMA tile --
    on CUDA-core kernels: their compute floor is the FP32 FMA peak, 2x (L4) to 8x (A100) slower than TF32.
    ``pred_us`` (the basis the program model scales) is raised to that floor, ``basis_roof_us`` is the
    roofline on that pipe (the basis of a roofline-basis program model) and the op counts as compute-bound
    there; ``roof_us`` stays the speed of light, which the answer is never below either way."""
    from components.features.device_numbers import device_table

    grouped = {k for k, v in kernels.items() if v["kind"] == "conv_grouped" and v["dtype"] == "fp32"}
    rows = per_kernel["kernel_id"].isin(grouped).to_numpy()
    fma = device_table(device_ids, catalog)["fma_fp32"]
    peak = per_kernel["device_id"].map(fma).to_numpy("float64")
    with np.errstate(divide="ignore", invalid="ignore"):
        floor = np.where(rows & (peak > 0), per_kernel["flops"].to_numpy("float64") / peak * 1e6, 0.0)
    floor = np.nan_to_num(floor, nan=0.0)
    lifted = floor > per_kernel["pred_us"].to_numpy("float64")
    return per_kernel.assign(
        basis_roof_us=np.maximum(per_kernel["roof_us"].to_numpy("float64"), floor),
        pred_us=np.where(lifted, floor, per_kernel["pred_us"]),
        bound=np.where(lifted, "compute", per_kernel["bound"]),
        pipe=np.where(lifted, "fp32", per_kernel["pipe"]),
    )


def _l2_numbers(device_ids: Sequence[str], catalog: Any) -> pd.DataFrame:
    """Per device: L2 capacity (bytes), DRAM / L2 bandwidth (the features' numbers) and whether its FP32
    lanes share INT32's datapath (``fp32_shared``)."""
    from components.features.device_numbers import device_table

    table = device_table(device_ids, catalog)
    size = [float(getattr(catalog.get(d), "l2_mb", None) or 0.0) * 1e6 for d in table.index]
    return pd.DataFrame(
        {
            "device_id": table.index,
            "l2_bytes": size,
            "dram_over_l2": (table["dram_Bps"] / table["l2_Bps"]).clip(upper=1.0).fillna(1.0).to_numpy(),
            "fp32_shared": [bool(catalog.get(d).fp32_lanes_shared_with_int32) for d in table.index],
        }
    )


def op_terms(frame: pd.DataFrame) -> np.ndarray:
    """The program-model term each op row's time counts in: its kind, but ``FP32_SHARED`` for an FP32
    GEMM/bmm on a GPU whose FP32 lanes share INT32's datapath (the L2 term, where ``l2_ratio`` > 0, is
    the caller's: it comes first)."""
    kind = frame["kind"].astype(object).to_numpy()
    if "fp32_shared" not in frame.columns:
        return kind
    shared = (
        frame["fp32_shared"].fillna(False).astype(bool).to_numpy()
        & frame["kind"].isin(FP32_SHARED_KINDS).to_numpy()
        & (frame["dtype"].astype(str) == "fp32").to_numpy()
    )
    return np.where(shared, FP32_SHARED, kind)


def l2_warm(frame: pd.DataFrame) -> pd.DataFrame:
    """``l2_ratio`` per op row: inside a program, a memory-bound op whose tensors (read + written) fit in
    the L2 finds them there -- its producer just wrote them -- so its traffic streams at L2 bandwidth: its
    time is the DRAM-basis time times DRAM/L2 bandwidth (the L2 roofline). 0 for every other op (compute-
    bound, or larger than the L2: its basis time stands)."""
    fits = frame["bytes_moved"].to_numpy("float64") <= frame["l2_bytes"].fillna(0.0).to_numpy("float64")
    memory = frame["bound"].astype(str).to_numpy() != "compute"
    ratio = frame["dram_over_l2"].fillna(1.0).to_numpy("float64")
    warm = np.where(fits & memory, ratio, 0.0)
    return frame.assign(l2_ratio=warm).drop(columns=["l2_bytes", "dram_over_l2"])


def _with_engine(
    per_kernel: pd.DataFrame,
    programs: Sequence[ProgramOps],
    links: list[tuple[int, int, str]],
    device_ids: Sequence[str],
    catalog: Any,
    engine: Any,
) -> pd.DataFrame:
    """``per_kernel`` with the engine's answer on the rows it covers (never below the op's roofline)."""
    from components.programs.engine_ops import engine_times

    seen: dict[str, OpQuestion] = {}
    for p, q, kid in links:
        seen.setdefault(kid, programs[p].questions[q])
    questions = pd.DataFrame(
        [{"kernel_id": k, "family": v.family, "shape": v.shape, "dtype": v.dtype} for k, v in seen.items()],
        columns=["kernel_id", "family", "shape", "dtype"],
    )
    answers = engine_times(questions, device_ids, catalog, engine)
    if answers.empty:
        return per_kernel
    answers = answers.rename(columns={"tier": "engine_tier"})
    merged = per_kernel.merge(answers, on=["kernel_id", "device_id"], how="left")
    value = pd.to_numeric(merged["engine_us"], errors="coerce").to_numpy("float64")
    ok = np.isfinite(value) & (value > 0)
    roof = merged["roof_us"].to_numpy("float64")
    merged["pred_us"] = np.where(ok, np.maximum(value, roof), merged["pred_us"])
    merged["pred_source"] = np.where(ok, "op engine", merged["pred_source"])
    merged["tier"] = np.where(ok, merged["engine_tier"], merged["tier"])
    return merged.drop(columns=["engine_us", "engine_tier"])


def _device_columns(device_ids: Sequence[str], catalog: Any) -> pd.DataFrame:
    from components.features.device_numbers import device_table

    table = device_table(device_ids, catalog)
    return pd.DataFrame(
        {
            "device_id": table.index,
            "dram_gbps": table["dram_Bps"].to_numpy() / 1e9,
            "sms": table["sms"].to_numpy(),
            "clock_ghz": table["clock_hz"].to_numpy() / 1e9,
            "fp32_tflops": table["fma_fp32"].to_numpy() / 1e12,
        }
    )


def program_features(
    programs: Sequence[ProgramOps], times: OpTimes, device_ids: Sequence[str], catalog: Any
) -> pd.DataFrame:
    """One row per (program, device): sums of op times, kernel counts, shares per kind; ratios only
    (no device identity), so a model on them transfers to a GPU it never saw."""
    f = times.frame.copy()
    f["roof_total"] = f["roof_us"] * f["count"]
    f["pipes_total"] = f["pipes_us"] * f["count"]
    f["pred_total"] = f["pred_us"] * f["count"]
    f["compute_total"] = np.where(f["bound"] == "compute", f["roof_total"], 0.0)
    grouped = f.groupby(["program", "device_id"])
    base = grouped[["roof_total", "pipes_total", "pred_total", "compute_total", "count"]].sum()
    base.columns = ["roof_sum_us", "pipes_sum_us", "pred_sum_us", "compute_roof_us", "n_kernels"]
    kinds = f.pivot_table(
        index=["program", "device_id"], columns="kind", values="roof_total", aggfunc="sum", fill_value=0.0
    )
    counts = f.pivot_table(
        index=["program", "device_id"], columns="kind", values="count", aggfunc="sum", fill_value=0.0
    )
    base = base.join(kinds.reindex(columns=list(FEATURE_KINDS), fill_value=0.0).add_prefix("roof_"))
    base = base.join(counts.reindex(columns=list(FEATURE_KINDS), fill_value=0.0).add_prefix("n_"))
    base = base.reset_index()
    # Programs x devices with no kernel at all still get a row (all zeros).
    full = pd.MultiIndex.from_product(
        [range(len(programs)), list(device_ids)], names=["program", "device_id"]
    )
    base = base.set_index(["program", "device_id"]).reindex(full, fill_value=0.0).reset_index()
    base["n_aten"] = [programs[p].n_aten for p in base["program"]]
    base["n_unmapped"] = [sum(programs[p].unmapped.values()) for p in base["program"]]
    base["rnn_steps"] = [programs[p].rnn_steps for p in base["program"]]
    base["n_modules"] = [programs[p].n_modules for p in base["program"]]
    base["n_pycalls"] = [programs[p].n_pycalls for p in base["program"]]
    base["n_forwards"] = 1.0  # one timed call of the module per answer (a forward, or a training step)
    base["dtype"] = [programs[p].dtype for p in base["program"]]
    base = base.merge(_device_columns(device_ids, catalog), on="device_id", how="left")
    return base


def transfer_features(frame: pd.DataFrame) -> pd.DataFrame:
    """The overhead model's inputs: logs of times and counts, time shares per kind (no device id)."""
    eps = 1e-3
    roof = frame["roof_sum_us"].clip(lower=eps)
    out = pd.DataFrame(index=frame.index)
    out["log_roof"] = np.log(roof)
    out["log_pred"] = np.log(frame["pred_sum_us"].clip(lower=eps))
    out["log_pipes_over_roof"] = np.log(frame["pipes_sum_us"].clip(lower=eps) / roof)
    out["log_kernels"] = np.log1p(frame["n_kernels"])
    out["log_aten"] = np.log1p(frame["n_aten"])
    out["log_roof_per_kernel"] = np.log(roof / frame["n_kernels"].clip(lower=1))
    out["compute_share"] = frame["compute_roof_us"] / roof
    for kind in FEATURE_KINDS:
        out[f"share_{kind}"] = frame[f"roof_{kind}"] / roof
    out["fp32"] = (frame["dtype"] == "fp32").astype(float)
    out["clock_ghz"] = frame["clock_ghz"]
    # GPU class, as ratios and orders of magnitude (never an id): the ridge point, and DRAM
    # bandwidth as a proxy for the host generation that sets the per-call CPU overhead.
    out["log_dram_gbps"] = np.log(frame["dram_gbps"].clip(lower=1.0))
    out["ridge_flop_per_byte"] = frame["fp32_tflops"] * 1e3 / frame["dram_gbps"].clip(lower=1.0)
    return out.replace([math.inf, -math.inf], np.nan).fillna(0.0)


def timed_programs(
    programs: list[ProgramOps], devices: list[str], catalog: Any, op_predictor: Any
) -> tuple[Any, pd.DataFrame]:
    """(op times, program features) of ``programs`` on ``devices``: the families the op engine beside
    ``op_predictor`` covers (GEMM, bmm, attention) answered by it, every other op at its roofline time (the
    program model learns a factor per kind for those). The tabular op predictor does not answer inside a
    program: on KernelBench, GPU-held-out (3 folds), its answers put the program model's level-3 median
    error at 38% where roofline times with a factor per kind give 22%, and so do the engine's answers for
    the engine's families with those factors for the rest. The GEMMs take the one routing
    (``engine_ops.routed_times``); with ``engine_ops.FP32_FALLBACK == "learned"`` the tabular predictor
    answers the FP32/FP64 GEMMs no measured kernel is near, as an op question's (docs/programs.md
    "programs14": not adopted)."""
    from components.programs import engine_ops

    trained = op_predictor is not None and getattr(op_predictor, "family", "") != "roofline"
    engine = engine_ops.op_engine(op_predictor if trained else None)
    learned = trained and engine is not None and engine_ops.FP32_FALLBACK == "learned"
    times = op_times(
        programs, devices, catalog, op_predictor if learned else None, engine, learned_only=learned
    )
    return times, program_features(programs, times, devices, catalog)
