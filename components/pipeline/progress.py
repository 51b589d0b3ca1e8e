"""Progress of a pipeline run, as it goes: stage, what DVC did, rows written, elapsed time.

Rows are read from the stage's own outputs (parquet footers, the evaluation report's ``n``), so the
figure is what was written, not what a stage said it would write.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


def _parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.read_metadata(path).num_rows)


def output_rows(root: Path, outs: tuple[str, ...] | list[str]) -> int | None:
    """Rows a stage wrote: the measurements table of a table folder, a parquet file's rows, or a
    JSON report's ``n`` / ``rows_valid``; ``None`` when no output holds rows (a model folder)."""
    for out in outs:
        path = Path(root) / out
        try:
            if path.is_dir():
                tables = (
                    [path / "measurements.parquet"]
                    if (path / "measurements.parquet").is_file()
                    else sorted(path.glob("*.parquet"))
                )
                if tables:
                    return _parquet_rows(tables[0])
            elif path.suffix == ".parquet" and path.is_file():
                return _parquet_rows(path)
            elif path.suffix == ".json" and path.is_file():
                report = json.loads(path.read_text())
                for key in ("n", "rows_valid", "rows"):
                    if isinstance(report.get(key), int):
                        return int(report[key])
        except (OSError, ValueError):
            continue  # a progress line never fails a run
    return None


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}:{secs:02d}"


@dataclass
class Progress:
    """Prints one line as each stage starts and ends, with the run's elapsed time."""

    total: int
    echo: Callable[[str], None] = print
    started: float = field(default_factory=time.monotonic)
    done: int = 0

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def start(self, stage: str) -> None:
        elapsed = _clock(self.elapsed())
        self.echo(f"[{self.done + 1}/{self.total}] {stage:<9} running ...  (elapsed {elapsed})")

    def finish(self, stage: str, action: str, seconds: float, rows: int | None) -> None:
        self.done += 1
        rows_text = f"{rows:>9,} rows" if rows is not None else " " * 14
        self.echo(
            f"[{self.done}/{self.total}] {stage:<9} {action:<8} {rows_text} {seconds:7.1f} s  "
            f"(elapsed {_clock(self.elapsed())})"
        )


__all__ = ["Progress", "output_rows"]
