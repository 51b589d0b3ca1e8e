"""What every source adapter returns, and the errors it raises.

An adapter reads one public source in its upstream layout from a local directory and returns the
canonical tables (see ``schema``). Rows it cannot parse go to ``rejects`` with the file, row and
reason; ``rows_in == len(measurements) + len(rejects)`` always holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd


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
