"""What every source adapter returns, and the errors it raises.

An adapter reads one public source in its upstream layout from a local directory and returns the
canonical tables (see ``schema``). Rows it cannot parse go to ``rejects`` with the file, row and
reason; ``rows_in == len(measurements) + len(rejects)`` always holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from components.ingest.schema import KERNEL_COLUMNS, MEASUREMENT_COLUMNS, REJECT_COLUMNS, conform


class IngestError(Exception):
    """A source cannot be read at all (missing directory, unreadable/truncated file). Names the file."""


@dataclass
class AdapterOutput:
    source: str
    measurements: pd.DataFrame
    kernels: pd.DataFrame
    rejects: pd.DataFrame
    rows_in: int
    notes: list[str] = field(default_factory=list)
    # GPUs the source describes itself (e.g. an aiconfigurator spec sheet of a GPU the catalog lacks),
    # validated DeviceSpecs: whoever validates or featurises these rows adds them to its catalog.
    devices: list = field(default_factory=list)

    @classmethod
    def conformed(
        cls,
        source: str,
        measurements: pd.DataFrame | list[dict],
        kernels: pd.DataFrame | list[dict],
        rejects: pd.DataFrame | list[dict],
        rows_in: int | None = None,
        notes: list[str] | None = None,
        devices: list | None = None,
    ) -> AdapterOutput:
        """An adapter's answer: each table (a frame or a list of row dicts) conformed to its canonical schema,
        and the balance checked (every input row canonical or rejected); ``rows_in`` None: the adapter's
        input rows are exactly its canonical and rejected rows (it counted nothing else)."""

        def table(rows: pd.DataFrame | list[dict], columns: dict[str, str]) -> pd.DataFrame:
            return conform(rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows), columns)

        output = cls(
            source,
            table(measurements, MEASUREMENT_COLUMNS),
            table(kernels, KERNEL_COLUMNS),
            table(rejects, REJECT_COLUMNS),
            len(measurements) + len(rejects) if rows_in is None else rows_in,
            notes=list(notes or []),
            devices=list(devices or []),
        )
        output.check_balance()
        return output

    def check_balance(self) -> None:
        """Nothing is lost: every input row is either canonical or rejected."""
        if self.rows_in != len(self.measurements) + len(self.rejects):
            raise AssertionError(
                f"{self.source}: rows_in {self.rows_in} != measurements {len(self.measurements)}"
                f" + rejects {len(self.rejects)}"
            )


def require_dir(path: Path, source: str) -> Path:
    if not path.is_dir():
        raise IngestError(f"{source}: source directory not found: {path}")
    return path


def require_file(path: Path, source: str) -> Path:
    if not path.is_file():
        raise IngestError(f"{source}: expected file is missing: {path}")
    return path
