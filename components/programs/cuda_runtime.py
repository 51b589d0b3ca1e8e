"""Moved to ``components.models.cuda_runtime`` (the tabular model answers program rows with it); this
name stays for callers above models that import it from here."""

from components.models.cuda_runtime import program_runtime, unpredicted_reasons  # noqa: F401
