"""Op questions answered in one vectorised batch by the one op engine: its data tiers, its measured tier,
or its learned tier -- the feature columns (``components.serving.featurise``), the champion's prediction,
each calibrated GPU's correction, the bound pipe -- and one physics pass over every answer
(``components.serving.engine_answers``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from components.features.analytical import BOUND_LABELS
from components.models.base import NUMERIC_TARGETS
from components.opmodel.routing import LEARNED_TIER
from components.serving.answer_fields import ANSWER_KEYS, _blank, _plain
from components.serving.query import QueryError
from components.serving.question_forms import Question

# A kernel whose roofline time is this short is bound by its launch and latency, not by a pipe.
LAUNCH_BOUND_US: float = 5.0


def _featurise_args(questions: list[Question]) -> tuple[Any, ...]:
    """(family, op, dtype, dims, device index, distinct specs) of op questions: what featurise reads."""
    specs, device_index = _distinct_specs(questions)
    return (
        np.array([q.family for q in questions], dtype=object),
        np.array([q.op_name for q in questions], dtype=object),
        np.array([q.dtype for q in questions], dtype=object),
        _op_dims(questions),
        device_index,
        specs,
    )


def _op_dims(questions: list[Question]) -> np.ndarray:
    from components.features.dims import DIMS

    position = {d: i for i, d in enumerate(DIMS)}
    dims = np.full((len(questions), len(DIMS)), np.nan)
    for row, question in enumerate(questions):
        for name, value in (question.shape or {}).items():
            dims[row, position[name]] = value
    return dims


def _distinct_specs(questions: list[Question]) -> tuple[list[Any], np.ndarray]:
    """The distinct device specs asked about, and each question's position among them."""
    specs: dict[str, Any] = {}
    position: dict[str, int] = {}
    index = np.empty(len(questions), dtype="int64")
    for row, question in enumerate(questions):
        spec = question.device
        known = specs.get(spec.id)
        if known is None:
            specs[spec.id], position[spec.id] = spec, len(position)
        elif known is not spec and known != spec:
            raise QueryError(
                f"question {question.index}: device id {spec.id!r} names two different specs in one batch"
            )
        index[row] = position[spec.id]
    return list(specs.values()), index


def op_table(questions: list[Question], raw: bool = False) -> Any:
    """The feature table of op questions (one row each, same order).

    ``raw`` adds the shape text an llm reads.
    """
    from components.serving.featurise import op_feature_columns, table_of

    table = table_of(op_feature_columns(*_featurise_args(questions)))
    return _with_raw_query(table, questions) if raw else table


def _with_raw_query(table: Any, questions: list[Question]) -> Any:
    """The shape text, ids and name beside the features: what predictors that read the kernel (llm) need."""
    from components.ingest.schema import canonical_json

    texts = [canonical_json(q.shape or {}) for q in questions]
    table["measurement_id"] = [f"query-{q.index}" for q in questions]
    table["kernel_id"] = [f"query-{q.kernel_key()}" for q in questions]
    table["params_json"] = texts
    table["shape_json"] = texts
    table["name"] = [f"{q.op_name}{q.shape}" for q in questions]
    return table


PIPE_TIMES: tuple[tuple[str, str], ...] = (
    ("f_tensor_time_us", "tensor"),
    ("f_fma_time_us", "fma"),
    ("f_sfu_time_us", "sfu"),
    ("f_dram_time_us", "dram"),
    ("f_l2_time_us", "l2"),
)


def bound_pipes(cols: Any, dtypes: np.ndarray, duration_us: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """The busiest pipe of the side the roofline class names (compute: tensor, fp32/fp64 FMA or sfu;
    bandwidth: dram or l2), or ``launch`` for a kernel whose roofline time is under LAUNCH_BOUND_US
    and under half its predicted runtime; None where the op has no analytical times.

    ``cols``: the feature columns (a dict of arrays or the feature DataFrame)."""
    times = np.column_stack([np.asarray(cols[c], dtype="float64") for c, _ in PIPE_TIMES])
    times = np.where(np.isfinite(times), times, -1.0)
    compute_side = np.asarray(classes, dtype=object) == "compute"
    compute = times[:, :3].argmax(axis=1)
    memory = 3 + times[:, 3:].argmax(axis=1)
    winner = np.where(compute_side, compute, memory)
    names = np.array([name for _, name in PIPE_TIMES], dtype=object)[winner]
    names = np.where(names == "fma", np.where(np.asarray(dtypes) == "fp64", "fp64", "fp32"), names)
    roof = np.asarray(cols["f_roofline_time_us"], dtype="float64")
    with np.errstate(invalid="ignore"):
        launch = (roof < LAUNCH_BOUND_US) & np.isfinite(duration_us) & (roof < 0.5 * duration_us)
    names = np.where(launch, "launch", names)
    return np.where(np.isfinite(roof), names, None)


def _predicted(predictor: Any, questions: list[Question], cols: dict[str, Any]) -> dict[str, np.ndarray]:
    """``pred_*`` arrays: a tabular model's own ``predict_columns`` on the arrays (the path its evaluation
    takes too, without a DataFrame per request), else ``predictor.predict`` on the feature table."""
    from components.serving.featurise import table_of

    if hasattr(predictor, "predict_columns"):
        return predictor.predict_columns(cols)
    table = table_of(cols)
    if getattr(predictor, "family", "") not in ("tabular", "roofline"):
        table = _with_raw_query(table, questions)
    frame = predictor.predict(table).reset_index(drop=True)
    return {c: frame[c].to_numpy(dtype=object) for c in frame.columns}


def _calibrated(
    predicted: dict[str, np.ndarray], questions: list[Question], cols: dict[str, Any], carried: Any = None
) -> dict[str, np.ndarray]:
    """``predicted`` with each calibrated GPU's runtime correction applied (``kernelcast calibrate``
    stores one per GPU under the state folder; a logged model carries those made before it, in folder
    ``carried``: the state folder's, the newer, win); GPUs without one are untouched. Why here: a
    correction fitted on a GPU's own calibration rows is the cheapest accuracy gain on that GPU."""
    import pandas as pd

    from components.models.calibration import apply_corrections, load_corrections
    from components.platform.config import get_settings

    asked = {q.device.id for q in questions}
    stored = {**(load_corrections(carried) if carried else {}), **load_corrections(get_settings().state_dir)}
    corrections = {d: c for d, c in stored.items() if d in asked}
    if not corrections or "pred_duration_us" not in predicted:
        return predicted
    from components.serving.featurise import table_of

    rows = table_of(cols)
    rows["device_id"] = [q.device.id for q in questions]
    rows["family"] = [q.family for q in questions]
    frame = pd.DataFrame(
        {
            k: pd.to_numeric(pd.Series(v), errors="coerce")
            if k.startswith("pred_duration") or k in ("pred_gflops", "pred_achieved_gbps")
            else pd.Series(v)
            for k, v in predicted.items()
        }
    )
    if "pred_roofline_class" not in frame.columns:
        frame["pred_roofline_class"] = BOUND_LABELS[cols["_bound_code"]]
    corrected = apply_corrections(rows, frame, corrections)
    out = dict(predicted)
    for column in (
        "pred_duration_us",
        "pred_duration_us_lo",
        "pred_duration_us_hi",
        "pred_gflops",
        "pred_achieved_gbps",
    ):
        if column in corrected.columns and column in predicted:
            out[column] = corrected[column].to_numpy(dtype="float64")
    notes = np.array(predicted.get("pred_note", np.full(len(questions), None, dtype=object)), dtype=object)
    for i, q in enumerate(questions):
        c = corrections.get(q.device.id)
        if c is not None:
            tag = f"runtime calibrated on {c.n_rows} profiled rows of this GPU ({c.method})"
            notes[i] = f"{notes[i]}; {tag}" if _plain(notes[i]) else tag
    out["pred_note"] = notes
    return out


def _answer_ops(predictor: Any, questions: list[Question], model_version: str) -> list[dict[str, Any]]:
    """Every op question by the one op engine, which picks the tier per row (``components.opmodel.routing``):
    its data tiers for tensor-dtype GEMMs, attention, MoE and all-reduce; for the other families its measured
    tier where the GPU's own kernels are near, else the learned tier (the champion's prediction). Every
    answer through one physics pass (``components.serving.engine_answers``)."""
    from components.opmodel.routing import data_tiers_answer, may_be_measured
    from components.serving.engine_answers import answer_measured, answer_with_engine, engine_for

    data = [i for i, q in enumerate(questions) if data_tiers_answer(q.family, q.dtype)]
    chosen = set(data)
    learned = [i for i in range(len(questions)) if i not in chosen]
    # an elementwise/norm/softmax/conv-only batch loads no engine: no measured tier keeps those families
    wanted = data or any(may_be_measured(questions[i].family) for i in learned)
    engine = engine_for(predictor) if wanted else None
    answers: list[dict[str, Any]] = [{} for _ in questions]
    if learned:
        rest = [questions[i] for i in learned]
        measured = answer_measured(engine, rest)
        for i, answer, fields in zip(
            learned, _answer_learned_ops(predictor, rest, model_version), measured, strict=True
        ):
            answers[i] = answer if fields is None else _engine_answer(questions[i], fields, model_version)
    if data:
        engine_rows = [questions[i] for i in data]
        for i, fields in zip(data, answer_with_engine(engine, engine_rows), strict=True):
            answers[i] = _engine_answer(questions[i], fields, model_version)
    return answers


def _engine_answer(question: Question, fields: dict[str, Any], model_version: str) -> dict[str, Any]:
    answer = _blank(question, model_version)
    answer.update(fields)
    answer["note"] = answer.get("note") or question.device.unsupported_reason(question.dtype)
    return answer


def _answer_learned_ops(
    predictor: Any, questions: list[Question], model_version: str
) -> list[dict[str, Any]]:
    from components.serving.engine_answers import gemm_physics_pass, physics_pass
    from components.serving.featurise import op_feature_columns

    cols = op_feature_columns(*_featurise_args(questions))
    carried = getattr(predictor, "corrections_home", None)
    predicted = _calibrated(_predicted(predictor, questions, cols), questions, cols, carried)
    n = len(questions)

    def column(name: str) -> np.ndarray:
        return predicted[name] if name in predicted else np.full(n, None, dtype=object)

    duration = np.array(
        [_plain(v) if _plain(v) is not None else np.nan for v in column("pred_duration_us")], dtype="float64"
    )
    roof = np.asarray(cols["f_roofline_time_us"], dtype="float64")
    with np.errstate(divide="ignore", invalid="ignore"):
        headroom = duration / roof
    fallback_class = BOUND_LABELS[cols["_bound_code"]]
    # the class is the analytical bound's where the features have one: it must agree with the bound pipe
    classes = np.array(
        [
            f if f is not None else _plain(k)
            for k, f in zip(column("pred_roofline_class"), fallback_class, strict=False)
        ],
        dtype=object,
    )
    duration = np.where(np.isfinite(roof), np.fmax(duration, roof), duration)
    pipes = bound_pipes(cols, cols["dtype"], duration, classes)
    notes, ood = column("pred_note"), column("pred_ood")
    feature_notes = cols["_feature_note"]
    extra = [
        c
        for c in predicted
        if c.startswith("pred_") and c.endswith(("_lo", "_hi")) and c[5:] not in ANSWER_KEYS
    ]
    metrics = {m: column(f"pred_{m}") for m in (*NUMERIC_TARGETS, "duration_us_lo", "duration_us_hi")}
    answers = []
    for row, question in enumerate(questions):
        answer = _blank(question, model_version)
        for metric, values in metrics.items():
            answer[metric] = _plain(values[row])
        for name in extra:
            answer[name[5:]] = _plain(predicted[name][row])
        answer["roofline_class"] = classes[row]
        answer["bound_pipe"] = pipes[row]
        answer["roofline_us"] = _plain(roof[row])
        answer["headroom"] = _plain(headroom[row])
        flag = _plain(ood[row])
        answer["ood"] = None if flag is None else bool(flag)
        answer["note"] = (
            _plain(notes[row]) or feature_notes[row] or question.device.unsupported_reason(question.dtype)
        )
        calibrated = "runtime calibrated" in str(answer["note"] or "")
        answer["tier"] = "calibrated" if calibrated else LEARNED_TIER
        with_calibration = " with this GPU's calibration" if calibrated else ""
        answer["support"] = f"the champion model ({model_version}){with_calibration}"
        answers.append(answer)
    physics_pass(answers, cols, np.arange(n))
    gemm_physics_pass(answers, questions)
    return answers
