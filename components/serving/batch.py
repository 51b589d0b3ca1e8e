"""Questions from files and command-line options, for ``kernelcast predict`` and ``kernelcast rank``.

A batch file is CSV (a header row of question columns) or JSONL (one JSON object per line), with
the columns of ``components.serving.question_forms.QUESTION_COLUMNS`` (+ ``count`` for a rank workload).
A row without a device is asked on every ``--device``; errors name the file and line.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from components.common.json_object import json_object
from components.serving.query import QueryError
from components.serving.question_forms import QUESTION_COLUMNS

SOURCE_LANGUAGES: dict[str, str] = {".cu": "cuda", ".cuh": "cuda", ".hip": "hip"}
MODULE_SUFFIXES: tuple[str, ...] = (".py",)
BATCH_SUFFIXES: tuple[str, ...] = (".csv", ".jsonl", ".ndjson")
MAX_BATCH_ROWS = 1_000_000


@dataclass
class QuestionRows:
    """Question rows (devices filled in), the origin of each (for errors), and each row's kernel index."""

    rows: list[dict[str, Any]]
    origins: list[str]
    kernel_of_row: list[int]
    counts: list[int]  # per kernel (rank)
    kernel_labels: list[str]


@dataclass
class RowError:
    """A batch row that could not be answered: where it came from and why."""

    row: str
    error: str


def read_batch(
    path: Path, *, allow_count: bool, row_errors: list[RowError] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(origin, row) per record of a CSV or JSONL file; empty cells dropped. With ``row_errors``, a
    JSONL line that is not a JSON object of question fields is listed there instead of stopping the file."""
    path = Path(path)
    if path.suffix.lower() not in BATCH_SUFFIXES:
        raise QueryError(f"--batch {path}: expected a .csv or .jsonl file")
    if not path.is_file():
        raise QueryError(f"--batch {path}: no such file")
    allowed = set(QUESTION_COLUMNS) | ({"count"} if allow_count else set())
    records: list[tuple[str, dict[str, Any]]] = []
    with path.open(newline="", encoding="utf-8") as handle:
        if path.suffix.lower() == ".csv":
            reader = csv.DictReader(handle)
            unknown = sorted(set(reader.fieldnames or []) - allowed)
            if unknown:
                raise QueryError(
                    f"--batch {path}: unknown column {unknown[0]!r}; accepted: {', '.join(sorted(allowed))}"
                )
            for line, row in enumerate(reader, start=2):
                record = {k: v for k, v in row.items() if k and v not in (None, "")}
                records.append((f"{path.name} line {line}", record))
        else:
            for line, text in enumerate(handle, start=1):
                if not text.strip():
                    continue
                try:
                    records.append((f"{path.name} line {line}", _json_row(text, allowed)))
                except QueryError as exc:
                    if row_errors is None:
                        raise QueryError(f"--batch {path} line {line}: {exc}") from None
                    row_errors.append(RowError(f"{path.name} line {line}", f"{path.name} line {line}: {exc}"))
                if len(records) > MAX_BATCH_ROWS:
                    break
    if not records and not row_errors:
        raise QueryError(f"--batch {path}: no questions in the file")
    if len(records) > MAX_BATCH_ROWS:
        raise QueryError(f"--batch {path}: more than {MAX_BATCH_ROWS:,} rows; split the file")
    return records


def _json_row(text: str, allowed: set[str]) -> dict[str, Any]:
    return json_object(text, "", QueryError, allowed)


def answer_rows(
    predictor: Any, rows: QuestionRows, *, model_version: str, allow_modules: bool = True
) -> tuple[list[dict[str, Any]], list[RowError]]:
    """Answers of every row that can be answered (each with ``question`` = its row index) and the
    rows that cannot, each with its error. Why: one bad row of a thousand-row file should cost that
    row, not the file. A bad kernel fails all its rows (one per device) with one error."""
    from components.serving.question_forms import parse_questions
    from components.serving.questions import answer_questions

    questions, errors, failed = [], [], set()

    def fail(row: int, message: str) -> None:
        kernel = rows.kernel_of_row[row]
        if kernel not in failed:
            failed.add(kernel)
            errors.append(RowError(rows.origins[row], restate(message, rows.origins)))

    try:
        questions = parse_questions(rows.rows)
    except QueryError:  # then row by row, to answer the rest
        questions = []
        for row, record in enumerate(rows.rows):
            try:
                (question,) = parse_questions([record])
            except QueryError as exc:
                fail(row, re.sub(r"^question 0", f"question {row}", str(exc)))
                continue
            questions.append(replace(question, index=row))
    while True:
        asked = [q for q in questions if rows.kernel_of_row[q.index] not in failed]
        if not asked:
            return [], sorted(errors, key=lambda e: rows.origins.index(e.row))
        try:
            answers = answer_questions(
                predictor, asked, model_version=model_version, allow_modules=allow_modules
            )
        except QueryError as exc:
            match = re.match(r"^question (\d+)", str(exc))
            if not match or int(match[1]) >= len(rows.rows) or rows.kernel_of_row[int(match[1])] in failed:
                raise
            fail(int(match[1]), str(exc))
            continue
        return answers, sorted(errors, key=lambda e: rows.origins.index(e.row))


def parse_launch(text: str) -> dict[str, Any]:
    """``--launch`` as JSON object text, or ``GRID/BLOCK`` such as ``4096/256`` or ``64,64/16,16``."""
    text = text.strip()
    if text.startswith("{"):
        return json_object(text, "--launch", QueryError)
    match = re.fullmatch(r"(\d+(?:,\d+){0,2})/(\d+(?:,\d+){0,2})", text.replace(" ", ""))
    if not match:
        raise QueryError(
            f"--launch {text!r}: expected GRID/BLOCK such as 4096/256 or 64,64/16,16, or a JSON object"
        )
    return {"grid": [int(v) for v in match[1].split(",")], "block": [int(v) for v in match[2].split(",")]}


def kernel_from_file(
    path: Path, launch: str | None, kernel: str | None, defines: list[str], args: list[str] | None = None
) -> dict[str, Any]:
    """The kernel fields of a ``.cu``/``.hip`` source or a ``.py`` module file; ``args`` are the
    kernel's scalar arguments, NAME=NUMBER (they count the source's loops)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if not path.is_file():
        raise QueryError(f"{path}: no such file")
    text = path.read_text(encoding="utf-8", errors="replace")
    if suffix in MODULE_SUFFIXES:
        if launch or args:
            raise QueryError(f"--launch/--arg apply to a .cu/.hip source, not the module {path.name}")
        return {"module": text}
    if suffix not in SOURCE_LANGUAGES:
        raise QueryError(f"{path}: expected a .cu/.cuh/.hip kernel source or a .py PyTorch module")
    if not launch:
        raise QueryError(f"{path.name}: a source needs --launch GRID/BLOCK (e.g. --launch 4096/256)")
    spec = parse_launch(launch)
    if kernel:
        spec["kernel"] = kernel
    if defines:
        spec["defines"] = {}
        for item in defines:
            name, sep, value = item.partition("=")
            if not sep or not name.strip():
                raise QueryError(f"--define {item!r}: expected NAME=VALUE")
            spec["defines"][name.strip()] = value.strip()
    if args:
        spec["args"] = _kernel_args(args)
    return {"source": text, "language": SOURCE_LANGUAGES[suffix], "launch": spec}


def _kernel_args(items: list[str]) -> dict[str, float]:
    """``--arg NAME=NUMBER`` values (ints stay ints: they are loop bounds)."""
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        # NAME or STRUCT.FIELD (a member of a struct argument: --arg p.kernel_size=9)
        if not sep or not all(w.isidentifier() for w in name.strip().split(".")) or number != number:
            raise QueryError(f"--arg {item!r}: expected NAME=NUMBER, e.g. --arg n=4096")
        out[name.strip()] = int(number) if number.is_integer() else number
    return out


def expand(
    records: list[tuple[str, dict[str, Any]]], devices: list[str], row_errors: list[RowError] | None = None
) -> QuestionRows:
    """Each record on its own device, or on every ``devices`` entry ("all" = the catalog). With
    ``row_errors``, a record without a device (and no ``devices``) is listed there, not raised."""
    names: list[Any] = []
    if devices:
        from components.serving.rank import resolve_devices

        names = resolve_devices(list(devices), "--device", allow_files=True)
    rows, origins, kernel_of_row, counts, labels = [], [], [], [], []
    for k, (origin, record) in enumerate(records):
        count = record.pop("count", 1)
        try:
            counts.append(int(count))
        except (TypeError, ValueError):
            raise QueryError(f"{origin}: count {count!r} is not an integer") from None
        labels.append(origin)
        if record.get("device") or record.get("device_spec"):
            rows.append(record)
            origins.append(origin)
            kernel_of_row.append(k)
            continue
        if not names:
            message = f"{origin}: no device; give the row a device column or pass --device"
            if row_errors is None or len(records) == 1:
                raise QueryError(message)
            row_errors.append(RowError(origin, message))
            continue
        for spec in names:
            rows.append({**record, "device": spec})
            origins.append(origin)
            kernel_of_row.append(k)
    return QuestionRows(rows, origins, kernel_of_row, counts, labels)


def restate(message: str, origins: list[str]) -> str:
    """``question N.field: ...`` -> ``<file> line L: field: ...`` (or the option that made the row)."""
    match = re.match(r"^question (\d+)\.?", message)
    if not match or int(match[1]) >= len(origins):
        return message
    rest = message[match.end() :]
    return f"{origins[int(match[1])]}: {rest.lstrip(': ')}"
