"""The fields of one kernel question, in one place: the pyfunc's input signature and the serving parser both
build their column lists from ``KERNEL_QUESTION_FIELDS`` (``docs/answers.md``).

No imports: the serving floor reads it without loading MLflow (``registry.pyfunc`` imports mlflow at the top).
"""

from __future__ import annotations

# A device (catalog name) or its full spec, a dtype, and one kernel form: op + shape, source + language +
# launch, or module.
KERNEL_QUESTION_FIELDS: tuple[str, ...] = (
    "device",
    "device_spec",
    "dtype",
    "op",
    "shape",
    "source",
    "language",
    "launch",
    "module",
)
