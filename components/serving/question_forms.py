"""The question schema and its strict parser: what a question may say, and ``parse_questions``.

A question is one kernel on one device (``docs/answers.md``): a device (catalog name) XOR
a full device spec, a dtype, and exactly one kernel form -- op + shape, CUDA/HIP source + language
+ launch, or a PyTorch module. ``parse_questions`` validates strictly: every error names the row
and the field, and what would be accepted (``kernel_error`` restates such an error about a request's
kernel). Answering is ``components.serving.questions``.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any

from components.registry.question_columns import KERNEL_QUESTION_FIELDS
from components.serving.query import (
    DTYPES,
    FAMILY_OF_OP,
    SHAPE_DIMS,
    QueryError,
    canonical_op_dtype,
    check_bounds,
    check_shape,
    shape_from_text,
    whole_number,
)

# train: a module question asks for its training step (forward + backward + Adam).
QUESTION_COLUMNS: tuple[str, ...] = (*KERNEL_QUESTION_FIELDS, "train")
KINDS: tuple[str, ...] = ("op", "source", "module")
LANGUAGES: tuple[str, ...] = ("cuda", "hip")
LAUNCH_KEYS: tuple[str, ...] = ("grid", "block", "kernel", "defines", "shared_bytes", "args")
MAX_SOURCE_CHARS: int = 200_000  # a kernel file, not a code base: the compiler runs on it per request
MAX_MODULE_CHARS: int = 200_000
MAX_GRID: int = 2**31 - 1  # CUDA's gridDim.x limit
MAX_BLOCK_THREADS: int = 1024  # every NVIDIA and AMD GPU in the catalog
MAX_SHARED_BYTES: int = 1 << 20


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
    train: bool = False  # a module's training step (forward + backward + Adam), not its forward

    def kernel_key(self) -> str:
        """Identity of the kernel (not the device): questions sharing it are answered together."""
        if self.kind == "op":
            return json.dumps(["op", self.op, self.dtype, self.shape], sort_keys=True)
        if self.kind == "source":
            return json.dumps(["source", self.source, self.language, self.launch, self.dtype], sort_keys=True)
        return json.dumps(["module", self.module, self.dtype, self.train])


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


def _int(value: Any, where: str, low: int, high: int, what: str = "value") -> int:
    """An integer in [low, high] (an integral float such as 4096.0 from a CSV counts)."""
    return whole_number(value, where, low, high, what)


def _shape(value: Any, where: str) -> dict[str, int]:
    """A dict of sizes, its JSON object text, or the CLI's ``M=4096,N=4096,K=4096``: one shape syntax
    whatever carried it (``--shape``, a CSV cell, a JSONL line, an HTTP request)."""
    from components.physics.shape_rules import ZERO_DIMS
    from components.serving.query import MAX_DIM

    if isinstance(value, str) and not value.strip().startswith("{"):
        return shape_from_text(value, where)
    raw = _object(value, where)
    if not raw:
        raise QueryError(f'{where}: empty; e.g. {{"M": 4096, "N": 4096, "K": 4096}}')
    # a convolution's padding may be 0 (check_bounds says for which family); every other size is >= 1
    return {
        str(k): _int(v, f"{where}.{k}", 0 if k in ZERO_DIMS else 1, MAX_DIM, "size") for k, v in raw.items()
    }


def _triple(value: Any, where: str, high: int) -> list[int]:
    if isinstance(value, Integral) and not isinstance(value, bool):  # numpy's integers are Integral
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
            raise QueryError(
                f'{where}: missing {key!r} (e.g. {{"grid": [4096, 1, 1], "block": [256, 1, 1]}})'
            )
    launch: dict[str, Any] = {
        "grid": _triple(raw["grid"], f"{where}.grid", MAX_GRID),
        "block": _triple(raw["block"], f"{where}.block", MAX_BLOCK_THREADS),
    }
    if math.prod(launch["block"]) > MAX_BLOCK_THREADS:
        raise QueryError(
            f"{where}.block {launch['block']}: {math.prod(launch['block'])} threads per block; "
            f"at most {MAX_BLOCK_THREADS}"
        )
    if not _absent(raw.get("kernel")):
        if not isinstance(raw["kernel"], str) or not raw["kernel"].replace("_", "a").isalnum():
            raise QueryError(f"{where}.kernel {raw['kernel']!r}: expected a C identifier")
        launch["kernel"] = raw["kernel"]
    if not _absent(raw.get("defines")):
        defines = _object(raw["defines"], f"{where}.defines")
        for name, text in defines.items():
            if (
                not str(name).replace("_", "a").isalnum()
                or not isinstance(text, (str, int, float))
                or isinstance(text, bool)
            ):
                raise QueryError(f"{where}.defines.{name}: expected NAME: value (a string or number)")
        launch["defines"] = {str(k): str(v) for k, v in defines.items()}
    if not _absent(raw.get("args")):  # kernel scalar arguments: they count the source's loops
        args = _object(raw["args"], f"{where}.args")
        for name, number in args.items():
            if (
                not str(name).isidentifier()
                or isinstance(number, bool)
                or not isinstance(number, (int, float))
            ):
                raise QueryError(f"{where}.args.{name}: expected NAME: number (a kernel scalar argument)")
        launch["args"] = {str(k): v for k, v in args.items()}
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
            raise QueryError(
                f"{where}: give exactly one of device (a catalog name) or device_spec (a full spec)"
            )
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
                raise QueryError(
                    f"{where}.device_spec: id {resolved.id!r} is a catalog device with other figures; "
                    "give the spec another id"
                )
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
            raise QueryError(
                f"{where}: unknown field {unknown[0]!r}; accepted: {', '.join(QUESTION_COLUMNS)}"
            )
        present = {k: row[k] for k in QUESTION_COLUMNS if k in row and not _absent(row[k])}
        device = resolve(present.get("device"), present.get("device_spec"), where)
        forms = [
            kind
            for kind, keys in (
                ("op", ("op", "shape")),
                ("source", ("source", "language", "launch")),
                ("module", ("module",)),
            )
            if any(k in present for k in keys)
        ]
        if len(forms) != 1:
            raise QueryError(
                f"{where}: give exactly one kernel form -- op + shape, source + language + launch, or "
                f"module{'' if not forms else '; got ' + ' and '.join(forms)}"
            )
        kind = forms[0]
        if (
            kind != "module"
            and "train" in present
            and present["train"] not in (False, "false", "False", 0, "0")
        ):
            raise QueryError(f"{where}.train: applies to a module question, not to a {kind} question")
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
    return Question(
        index,
        "source",
        device,
        _dtype(present, where, None),
        source=source,
        language=language.strip().lower(),
        launch=launch,
    )


def _module_question(index: int, where: str, present: dict[str, Any], device: Any) -> Question:
    module = present["module"]
    if not isinstance(module, str):
        raise QueryError(f"{where}.module: expected a PyTorch module's text (or, from the CLI, its path)")
    if len(module) > MAX_MODULE_CHARS:
        raise QueryError(f"{where}.module: {len(module):,} characters; at most {MAX_MODULE_CHARS:,}")
    train = present.get("train", False)
    if isinstance(train, str) and train.strip().lower() in ("true", "false", "1", "0"):
        train = train.strip().lower() in ("true", "1")
    # a numpy bool only where numpy is loaded already: a question's checks do not load it (a fast error)
    numpy = sys.modules.get("numpy")
    if not (isinstance(train, bool) or (numpy is not None and isinstance(train, numpy.bool_))):
        raise QueryError(f"{where}.train: expected true or false (a module's training step or its forward)")
    return Question(index, "module", device, _dtype(present, where, None), module=module, train=bool(train))


_QUESTION_REF = re.compile(r"^question (\d+)((?:\.[A-Za-z_][\w]*|\[\d+\])*)")


def kernel_error(
    message: str, n_devices: int, prefix: str = "kernels", inner: str = ""
) -> tuple[str, str | None]:
    """A parse error about row ``k*n_devices+d`` restated about ``kernels[k]``: (message, field path)."""
    match = _QUESTION_REF.match(message)
    if not match:
        return message, None
    kernel = int(match[1]) // max(1, n_devices)
    field_path = f"{prefix}[{kernel}]{inner}{match[2]}"
    return field_path + message[match.end() :], field_path
