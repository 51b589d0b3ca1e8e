"""Data validation: Great Expectations suites as code over the canonical tables.

``validate_measurements(measurements, catalog, params, kernels=None) -> ValidationResult``
splits rows into ``valid`` and ``quarantine`` (each failing row with a ``failed_expectations``
JSON list) plus a ``summary``; ``write_validation`` writes them atomically with an HTML report;
``run.validate_dir`` is the whole stage on folders (CLI + flow); ``drift_report`` compares
distributions. GX itself is imported only when a suite runs (~3 s).
"""

from components.validation.drift import drift_report
from components.validation.run import (
    FAILED_COLUMN,
    validate_kernels,
    validate_measurements,
    write_validation,
)

__all__ = [
    "FAILED_COLUMN",
    "drift_report",
    "validate_kernels",
    "validate_measurements",
    "write_validation",
]
