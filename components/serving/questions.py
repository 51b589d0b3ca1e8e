"""One question schema for ``kernelcast predict``, the HTTP server and the registered pyfunc.

A question is one kernel on one device (``/tmp/team/interfaces.md``): a device (catalog name) XOR
a full device spec, a dtype, and exactly one kernel form -- op + shape, CUDA/HIP source + language
+ launch, or a PyTorch module. ``parse_questions`` validates strictly (every error names the row
and the field, and what would be accepted); ``answer_questions`` answers op questions in one
vectorised batch (``components.serving.featurise``) and hands source and module questions to their
program predictors. Every answer has the same keys (``ANSWER_KEYS``), None where unknown.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from components.serving.memory_fit import check_memory_fit
from components.serving.query import (
    DTYPES,
    FAMILY_OF_OP,
    QueryError,
    SHAPE_DIMS,
    canonical_op_dtype,
    check_bounds,
    check_shape,
)

QUESTION_COLUMNS: tuple[str, ...] = ("device", "device_spec", "dtype", "op", "shape", "source", "language", "launch",
                                     "module")
ANSWER_KEYS: tuple[str, ...] = (
    "question", "device", "device_name", "kind", "duration_us", "duration_us_lo", "duration_us_hi", "achieved_gbps",
    "gflops", "l1_hit_rate", "l2_hit_rate", "arith_intensity", "roofline_class", "bound_pipe", "roofline_us",
    "headroom", "ood", "note", "model_version", "breakdown", "tier", "support",
)
METRICS: tuple[str, ...] = ("duration_us", "achieved_gbps", "gflops", "l1_hit_rate", "l2_hit_rate", "arith_intensity")
KINDS: tuple[str, ...] = ("op", "source", "module")
LANGUAGES: tuple[str, ...] = ("cuda", "hip")
LAUNCH_KEYS: tuple[str, ...] = ("grid", "block", "kernel", "defines", "shared_bytes")
MAX_SOURCE_CHARS: int = 200_000  # a kernel file, not a code base: the compiler runs on it per request
MAX_MODULE_CHARS: int = 200_000
MAX_GRID: int = 2**31 - 1  # CUDA's gridDim.x limit
MAX_BLOCK_THREADS: int = 1024  # every NVIDIA and AMD GPU in the catalog
MAX_SHARED_BYTES: int = 1 << 20
# A kernel whose roofline time is this short is bound by its launch and latency, not by a pipe.
LAUNCH_BOUND_US: float = 5.0

__all__ = ["ANSWER_KEYS", "DTYPES", "KINDS", "QUESTION_COLUMNS", "Question", "QueryError", "answer_frame",
           "answer_questions", "parse_questions", "SHAPE_DIMS"]


@dataclass(frozen=True)
class Question:
    """One kernel on one device, validated. ``index`` is the row it came from."""

    index: int
    kind: str  # op | source | module
    device: Any  # components.devices.DeviceSpec
    dtype: str | None
    op: str | None = None  # the name asked (gemm, add, ...); family/op_name are the canonical pair
    family: str | None = None
    op_name: str | None = None
    shape: dict[str, int] | None = field(default=None, hash=False)
    source: str | None = None
    language: str | None = None
    launch: dict[str, Any] | None = field(default=None, hash=False)
    module: str | None = None

    def kernel_key(self) -> str:
        """Identity of the kernel (not the device): questions sharing it are answered together."""
        if self.kind == "op":
            return json.dumps(["op", self.op, self.dtype, self.shape], sort_keys=True)
        if self.kind == "source":
            return json.dumps(["source", self.source, self.language, self.launch, self.dtype], sort_keys=True)
        return json.dumps(["module", self.module, self.dtype])


# ------------------------------------------------------------------------------------------ parsing


def _absent(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and not value.strip()


def _object(value: Any, where: str) -> dict[str, Any]:
    """A dict, or JSON object text -> dict; QueryError otherwise."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise QueryError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if isinstance(parsed, dict):
            return parsed
    raise QueryError(f"{where}: expected a JSON object, got {type(value).__name__}")


def _int(value: Any, where: str, low: int, high: int) -> int:
    """An integer in [low, high] (an integral float such as 4096.0 from a CSV counts)."""
    if isinstance(value, bool):
        raise QueryError(f"{where} = {value!r}: expected an integer from {low:,} to {high:,}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, (int, np.integer)) or not low <= int(value) <= high:
        raise QueryError(f"{where} = {value!r}: expected an integer from {low:,} to {high:,}")
    return int(value)


def _shape(value: Any, where: str) -> dict[str, int]:
    from components.serving.query import MAX_DIM

    raw = _object(value, where)
    if not raw:
        raise QueryError(f"{where}: empty; e.g. {{\"M\": 4096, \"N\": 4096, \"K\": 4096}}")
    return {str(k): _int(v, f"{where}.{k}", 1, MAX_DIM) for k, v in raw.items()}


def _triple(value: Any, where: str, high: int) -> list[int]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = [int(value)]
    if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= 3:
        raise QueryError(f"{where}: expected a list of 1 to 3 positive integers, e.g. [256, 1, 1]")
    dims = [_int(v, f"{where}[{i}]", 1, high) for i, v in enumerate(value)]
    return dims + [1] * (3 - len(dims))


def _launch(value: Any, where: str) -> dict[str, Any]:
    raw = _object(value, where)
    unknown = sorted(set(raw) - set(LAUNCH_KEYS))
    if unknown:
        raise QueryError(f"{where}: unknown key {unknown[0]!r}; accepted: {', '.join(LAUNCH_KEYS)}")
    for key in ("grid", "block"):
        if key not in raw:
            raise QueryError(f"{where}: missing {key!r} (e.g. {{\"grid\": [4096, 1, 1], \"block\": [256, 1, 1]}})")
    launch: dict[str, Any] = {"grid": _triple(raw["grid"], f"{where}.grid", MAX_GRID),
                              "block": _triple(raw["block"], f"{where}.block", MAX_BLOCK_THREADS)}
    if int(np.prod(launch["block"])) > MAX_BLOCK_THREADS:
        raise QueryError(f"{where}.block {launch['block']}: {int(np.prod(launch['block']))} threads per block; "
                         f"at most {MAX_BLOCK_THREADS}")
    if not _absent(raw.get("kernel")):
        if not isinstance(raw["kernel"], str) or not raw["kernel"].replace("_", "a").isalnum():
            raise QueryError(f"{where}.kernel {raw['kernel']!r}: expected a C identifier")
        launch["kernel"] = raw["kernel"]
    if not _absent(raw.get("defines")):
        defines = _object(raw["defines"], f"{where}.defines")
        for name, text in defines.items():
            if not str(name).replace("_", "a").isalnum() or not isinstance(text, (str, int, float)) \
                    or isinstance(text, bool):
                raise QueryError(f"{where}.defines.{name}: expected NAME: value (a string or number)")
        launch["defines"] = {str(k): str(v) for k, v in defines.items()}
    if not _absent(raw.get("shared_bytes")):
        launch["shared_bytes"] = _int(raw["shared_bytes"], f"{where}.shared_bytes", 0, MAX_SHARED_BYTES)
    return launch


class _DeviceResolver:
    """Catalog names resolved once per distinct spelling; full specs validated once per text."""

    def __init__(self) -> None:
        from components.devices import load_catalog

        self.catalog = load_catalog()
        self._cache: dict[str, Any] = {}

    def __call__(self, name: Any, spec: Any, where: str) -> Any:
        from components.devices import CatalogError, DeviceSpec, spec_from_mapping

        if isinstance(name, DeviceSpec) and _absent(spec):
            return name  # already resolved (the server resolves a request's devices once)
        if _absent(name) == _absent(spec):
            raise QueryError(f"{where}: give exactly one of device (a catalog name) or device_spec (a full spec)")
        if not _absent(name):
            if not isinstance(name, str):
                raise QueryError(f"{where}.device: expected a catalog name, got {type(name).__name__}")
            key = "n:" + name
            if key not in self._cache:
                try:
                    self._cache[key] = self.catalog.resolve(name)
                except LookupError as exc:
                    raise QueryError(f"{where}.device: {exc.args[0] if exc.args else exc}") from None
            return self._cache[key]
        data = _object(spec, f"{where}.device_spec")
        key = "s:" + json.dumps(data, sort_keys=True, default=str)
        if key not in self._cache:
            try:
                resolved = spec_from_mapping(data, f"{where}.device_spec")
            except CatalogError as exc:
                raise QueryError(str(exc)) from None
            known = self.catalog._by_id.get(resolved.id) if hasattr(self.catalog, "_by_id") else None
            if known is not None and known != resolved:
                raise QueryError(f"{where}.device_spec: id {resolved.id!r} is a catalog device with other figures; "
                                 "give the spec another id")
            self._cache[key] = resolved
        return self._cache[key]


def parse_questions(rows: Iterable[Mapping[str, Any]]) -> list[Question]:
    """Validated questions, one per row; a QueryError names the row index and field of the first problem."""
    resolve = _DeviceResolver()
    questions: list[Question] = []
    for index, row in enumerate(rows):
        where = f"question {index}"
        if not isinstance(row, Mapping):
            raise QueryError(f"{where}: expected an object with fields {', '.join(QUESTION_COLUMNS)}")
        unknown = sorted(str(k) for k in row if k not in QUESTION_COLUMNS and not _absent(row[k]))
        if unknown:
            raise QueryError(f"{where}: unknown field {unknown[0]!r}; accepted: {', '.join(QUESTION_COLUMNS)}")
        present = {k: row[k] for k in QUESTION_COLUMNS if k in row and not _absent(row[k])}
        device = resolve(present.get("device"), present.get("device_spec"), where)
        forms = [kind for kind, keys in (("op", ("op", "shape")), ("source", ("source", "language", "launch")),
                                         ("module", ("module",))) if any(k in present for k in keys)]
        if len(forms) != 1:
            raise QueryError(f"{where}: give exactly one kernel form -- op + shape, source + language + launch, or "
                             f"module{'' if not forms else '; got ' + ' and '.join(forms)}")
        kind = forms[0]
        if kind == "op":
            questions.append(_op_question(index, where, present, device))
        elif kind == "source":
            questions.append(_source_question(index, where, present, device))
        else:
            questions.append(_module_question(index, where, present, device))
    return questions


def _dtype(present: dict[str, Any], where: str, default: str | None) -> str | None:
    if "dtype" not in present:
        return default
    if not isinstance(present["dtype"], str):
        raise QueryError(f"{where}.dtype: expected a string; choose one of {', '.join(DTYPES)}")
    return canonical_op_dtype(present["dtype"], f"{where}.dtype")


def _op_question(index: int, where: str, present: dict[str, Any], device: Any) -> Question:
    op = present.get("op")
    if not isinstance(op, str) or op.strip().lower() not in FAMILY_OF_OP:
        raise QueryError(f"{where}.op {op!r}: choose one of {', '.join(sorted(FAMILY_OF_OP))}")
    op = op.strip().lower()
    if "shape" not in present:
        accepted = " or ".join(", ".join(d) for d in SHAPE_DIMS[FAMILY_OF_OP[op][0]])
        raise QueryError(f"{where}.shape: missing; {op} takes {accepted}")
    shape = _shape(present["shape"], f"{where}.shape")
    dtype = _dtype(present, where, "fp32")
    check_shape(op, shape, f"{where}.shape for op {op}")
    check_bounds(op, shape, dtype, f"{where}.shape")
    family, op_name = FAMILY_OF_OP[op]
    return Question(index, "op", device, dtype, op=op, family=family, op_name=op_name, shape=shape)


def _source_question(index: int, where: str, present: dict[str, Any], device: Any) -> Question:
    for key in ("source", "language", "launch"):
        if key not in present:
            raise QueryError(f"{where}.{key}: missing; a source question needs source, language and launch")
    source, language = present["source"], present["language"]
    if not isinstance(source, str):
        raise QueryError(f"{where}.source: expected the kernel's text")
    if len(source) > MAX_SOURCE_CHARS:
        raise QueryError(f"{where}.source: {len(source):,} characters; at most {MAX_SOURCE_CHARS:,}")
    if not isinstance(language, str) or language.strip().lower() not in LANGUAGES:
        raise QueryError(f"{where}.language {language!r}: choose one of {', '.join(LANGUAGES)}")
    launch = _launch(present["launch"], f"{where}.launch")
    return Question(index, "source", device, _dtype(present, where, None), source=source,
                    language=language.strip().lower(), launch=launch)


def _module_question(index: int, where: str, present: dict[str, Any], device: Any) -> Question:
    module = present["module"]
    if not isinstance(module, str):
        raise QueryError(f"{where}.module: expected a PyTorch module's text (or, from the CLI, its path)")
    if len(module) > MAX_MODULE_CHARS:
        raise QueryError(f"{where}.module: {len(module):,} characters; at most {MAX_MODULE_CHARS:,}")
    return Question(index, "module", device, _dtype(present, where, None), module=module)


# ------------------------------------------------------------------------------------------ answering


def _blank(question: Question, model_version: str) -> dict[str, Any]:
    answer = dict.fromkeys(ANSWER_KEYS)
    answer.update(question=question.index, device=question.device.id, device_name=question.device.name,
                  kind=question.kind, model_version=model_version)
    return answer


def _plain(value: Any) -> Any:
    """numpy/pandas scalars -> Python; NaN/NA -> None."""
    if value is None:
        return None
    try:
        import pandas as pd

        if value is pd.NA:
            return None
    except ImportError:  # pragma: no cover
        pass
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer, np.floating, float, int)):
        number = float(value)
        return None if not math.isfinite(number) else number
    return value if isinstance(value, str) else str(value)


def _op_dims(questions: list[Question]) -> np.ndarray:
    from components.features.analytical import DIMS

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
            raise QueryError(f"question {question.index}: device id {spec.id!r} names two different specs in one batch")
        index[row] = position[spec.id]
    return list(specs.values()), index


def op_table(questions: list[Question], raw: bool = False) -> Any:
    """The feature table of op questions (one row each, same order); ``raw`` adds the shape text an llm reads."""
    from components.serving.featurise import op_feature_table

    specs, device_index = _distinct_specs(questions)
    table = op_feature_table(np.array([q.family for q in questions], dtype=object),
                             np.array([q.op_name for q in questions], dtype=object),
                             np.array([q.dtype for q in questions], dtype=object),
                             _op_dims(questions), device_index, specs)
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


PIPE_TIMES: tuple[tuple[str, str], ...] = (("f_tensor_time_us", "tensor"), ("f_fma_time_us", "fma"),
                                           ("f_sfu_time_us", "sfu"), ("f_dram_time_us", "dram"),
                                           ("f_l2_time_us", "l2"))


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


BOUND_LABELS = np.array(["bandwidth", "compute", None], dtype=object)  # by code 0, 1, -1
NOTE_LABELS = np.array(["no analytical formula for this op and shape",
                        "device missing peak/bandwidth for this precision", None], dtype=object)


def _predicted(predictor: Any, questions: list[Question], cols: dict[str, Any]) -> dict[str, np.ndarray]:
    """``pred_*`` arrays: the array fast path for transfer tabular models, else ``predictor.predict``."""
    from components.serving.fastpath import fast_model
    from components.serving.featurise import table_of

    fast = fast_model(predictor)
    if fast is not None:
        return fast.predict(cols)
    table = table_of(cols)
    if getattr(predictor, "family", "") not in ("tabular", "roofline"):
        table = _with_raw_query(table, questions)
    frame = predictor.predict(table).reset_index(drop=True)
    return {c: frame[c].to_numpy(dtype=object) for c in frame.columns}


def _calibrated(predicted: dict[str, np.ndarray], questions: list[Question],
                cols: dict[str, Any]) -> dict[str, np.ndarray]:
    """``predicted`` with each calibrated GPU's runtime correction applied (``kernelcast calibrate``
    stores one per GPU under the state folder); GPUs without one are untouched. Why here: a
    correction fitted on a GPU's own calibration rows is the cheapest accuracy gain on that GPU."""
    import pandas as pd

    from components.config import get_settings
    from components.models.calibration import apply_corrections, load_corrections

    asked = {q.device.id for q in questions}
    corrections = {d: c for d, c in load_corrections(get_settings().state_dir).items() if d in asked}
    if not corrections or "pred_duration_us" not in predicted:
        return predicted
    from components.serving.featurise import table_of

    rows = table_of(cols)
    rows["device_id"] = [q.device.id for q in questions]
    rows["family"] = [q.family for q in questions]
    frame = pd.DataFrame({k: pd.to_numeric(pd.Series(v), errors="coerce") if k.startswith("pred_duration")
                          or k in ("pred_gflops", "pred_achieved_gbps") else pd.Series(v)
                          for k, v in predicted.items()})
    if "pred_roofline_class" not in frame.columns:
        frame["pred_roofline_class"] = BOUND_LABELS[cols["_bound_code"]]
    corrected = apply_corrections(rows, frame, corrections)
    out = dict(predicted)
    for column in ("pred_duration_us", "pred_duration_us_lo", "pred_duration_us_hi", "pred_gflops",
                   "pred_achieved_gbps"):
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
    """Modern families (tensor-dtype GEMMs, attention, MoE, all-reduce) by the op engine, the rest by the
    champion; every answer through one physics pass (``components.serving.engine_answers``)."""
    from components.serving.engine_answers import answer_with_engine, engine_for, uses_engine

    modern = [i for i, q in enumerate(questions) if uses_engine(q.family, q.dtype)]
    if not modern:
        return _answer_champion_ops(predictor, questions, model_version)
    answers: list[dict[str, Any] | None] = [None] * len(questions)
    chosen = set(modern)
    rest = [q for i, q in enumerate(questions) if i not in chosen]
    for i, answer in zip((i for i in range(len(questions)) if i not in chosen),
                         _answer_champion_ops(predictor, rest, model_version) if rest else [], strict=True):
        answers[i] = answer
    engine_rows = [questions[i] for i in modern]
    for i, fields in zip(modern, answer_with_engine(engine_for(predictor), engine_rows), strict=True):
        answer = _blank(questions[i], model_version)
        answer.update(fields)
        answer["note"] = answer.get("note") or questions[i].device.unsupported_reason(questions[i].dtype)
        answers[i] = answer
    return [a for a in answers if a is not None]


def _answer_champion_ops(predictor: Any, questions: list[Question],
                         model_version: str) -> list[dict[str, Any]]:
    from components.serving.engine_answers import gemm_physics_pass, physics_pass
    from components.serving.featurise import op_feature_columns

    specs, device_index = _distinct_specs(questions)
    cols = op_feature_columns(np.array([q.family for q in questions], dtype=object),
                              np.array([q.op_name for q in questions], dtype=object),
                              np.array([q.dtype for q in questions], dtype=object),
                              _op_dims(questions), device_index, specs)
    predicted = _calibrated(_predicted(predictor, questions, cols), questions, cols)
    n = len(questions)

    def column(name: str) -> np.ndarray:
        return predicted[name] if name in predicted else np.full(n, None, dtype=object)

    duration = np.array([_plain(v) if _plain(v) is not None else np.nan for v in column("pred_duration_us")],
                        dtype="float64")
    roof = np.asarray(cols["f_roofline_time_us"], dtype="float64")
    with np.errstate(divide="ignore", invalid="ignore"):
        headroom = duration / roof
    fallback_class = BOUND_LABELS[cols["_bound_code"]]
    # the class is the analytical bound's where the features have one: it must agree with the bound pipe
    classes = np.array([f if f is not None else _plain(k) for k, f in
                        zip(column("pred_roofline_class"), fallback_class)], dtype=object)
    duration = np.where(np.isfinite(roof), np.fmax(duration, roof), duration)
    pipes = bound_pipes(cols, cols["dtype"], duration, classes)
    notes, ood = column("pred_note"), column("pred_ood")
    feature_notes = NOTE_LABELS[cols["_note_code"]]
    extra = [c for c in predicted if c.startswith("pred_") and c.endswith(("_lo", "_hi")) and c[5:] not in ANSWER_KEYS]
    metrics = {m: column(f"pred_{m}") for m in (*METRICS, "duration_us_lo", "duration_us_hi")}
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
        answer["note"] = (_plain(notes[row]) or feature_notes[row]
                          or question.device.unsupported_reason(question.dtype))
        calibrated = "runtime calibrated" in str(answer["note"] or "")
        answer["tier"] = "calibrated" if calibrated else "spec"
        with_calibration = " with this GPU's calibration" if calibrated else ""
        answer["support"] = f"the champion model ({model_version}){with_calibration}"
        answers.append(answer)
    physics_pass(answers, cols, np.arange(n))
    gemm_physics_pass(answers, questions)
    return answers


def _program_answers(kind: str, predictor: Any, group: list[Question], model_version: str) -> list[dict[str, Any]]:
    """Source or module questions sharing one kernel: one program-predictor call for all their devices."""
    from components.programs.errors import ProgramError

    first = group[0]
    specs = [q.device for q in group]
    try:
        if kind == "source":
            try:
                from components.programs.source_predict import predict_source
            except ImportError as exc:
                raise QueryError(f"question {first.index}: source questions are not available in this install "
                                 f"(components.programs.source_predict: {exc})") from None
            results = predict_source(first.source, first.language, dict(first.launch or {}), first.dtype, specs,
                                     predictor)
        else:
            try:
                from components.programs.module_predict import predict_module
            except ImportError as exc:
                raise QueryError(f"question {first.index}: module questions are not available in this install "
                                 f"(components.programs.module_predict: {exc})") from None
            results = predict_module(first.module, first.dtype, specs, predictor)
    except ProgramError as exc:
        message = str(exc)
        if message.startswith(f"{kind}:"):  # the predictor names the field itself
            message = message[len(kind) + 1:].lstrip()
        raise QueryError(f"question {first.index}.{kind}: {message}") from None
    if len(results) != len(group):
        raise RuntimeError(f"{kind} predictor returned {len(results)} answers for {len(group)} devices")
    answers = []
    for question, result in zip(group, results, strict=True):
        answer = _blank(question, model_version)
        for key, value in dict(result).items():
            if key in ("question", "device", "device_name", "kind", "model_version"):
                continue
            if key == "breakdown" and isinstance(value, str):
                value = json.loads(value)  # nested in every answer; answer_frame writes it as text for MLflow
            answer[key] = value if key in ("breakdown", "note", "roofline_class", "bound_pipe") else _plain(value)
        if answer.get("ood") is not None:
            answer["ood"] = bool(answer["ood"])
        if answer.get("headroom") is None and answer.get("duration_us") and answer.get("roofline_us"):
            answer["headroom"] = answer["duration_us"] / answer["roofline_us"]
        answers.append(answer)
    return answers


def answer_questions(predictor: Any, questions: list[Question], *, model_version: str,
                     allow_modules: bool = False) -> list[dict[str, Any]]:
    """One answer dict (``ANSWER_KEYS``) per question, in question order."""
    modules = [q for q in questions if q.kind == "module"]
    if modules and not allow_modules:
        raise QueryError(f"question {modules[0].index}.module: module questions are disabled here "
                         "(they trace user code; the operator enables them with --allow-modules)")
    from components.serving.deadline import check as check_deadline

    answers: dict[int, dict[str, Any]] = {}
    ops = [q for q in questions if q.kind == "op"]
    for question in ops:  # refuse what cannot run on the GPU at all (components.serving.memory_fit)
        check_memory_fit(question)
    if ops:
        check_deadline(f"question {ops[0].index} (op questions)")
        for question, answer in zip(ops, _answer_ops(predictor, ops, model_version), strict=True):
            answers[id(question)] = answer
    groups: dict[tuple[str, str], list[Question]] = {}
    for question in questions:
        if question.kind != "op":
            groups.setdefault((question.kind, question.kernel_key()), []).append(question)
    for (kind, _), group in groups.items():
        check_deadline(f"question {group[0].index} ({kind})")
        for question, answer in zip(group, _program_answers(kind, predictor, group, model_version), strict=True):
            answers[id(question)] = answer
    for answer in answers.values():  # every answer has every key (program answers carry no tier)
        for key in ANSWER_KEYS:
            answer.setdefault(key, None)
    return [answers[id(q)] for q in questions]


def answer_frame(predictor: Any, frame: Any, *, model_version: str, allow_modules: bool = True) -> Any:
    """Question columns in, answer columns out (one row per question): what the registered pyfunc calls."""
    import pandas as pd

    rows = [{k: v for k, v in record.items() if k in QUESTION_COLUMNS or not _absent(v)}
            for record in frame.to_dict("records")]
    answers = answer_questions(predictor, parse_questions(rows), model_version=model_version,
                               allow_modules=allow_modules)
    columns = list(ANSWER_KEYS) + sorted({k for a in answers for k in a} - set(ANSWER_KEYS))
    frame = pd.DataFrame(answers, columns=columns)
    # The pyfunc's output schema is flat (components.registry.pyfunc): the breakdown stays JSON text there.
    frame["breakdown"] = [None if b is None else json.dumps(b) for b in frame["breakdown"]]
    return frame


_QUESTION_REF = re.compile(r"^question (\d+)((?:\.[A-Za-z_][\w]*|\[\d+\])*)")


def kernel_error(message: str, n_devices: int, prefix: str = "kernels", inner: str = "") -> tuple[str, str | None]:
    """A parse error about row ``k*n_devices+d`` restated about ``kernels[k]``: (message, field path)."""
    match = _QUESTION_REF.match(message)
    if not match:
        return message, None
    kernel = int(match[1]) // max(1, n_devices)
    field_path = f"{prefix}[{kernel}]{inner}{match[2]}"
    return field_path + message[match.end():], field_path
