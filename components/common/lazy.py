"""A module loaded on its first attribute use: for a module-level alias (``pd = lazy_module("pandas")``) in a
file whose many functions use it at run time while the code paths that answer a question use none of them."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class _LazyModule:
    """Stands for a module until an attribute is asked for; then imports it (once: Python caches modules)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _module(self) -> ModuleType:
        return importlib.import_module(self._name)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._module(), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def lazy_module(name: str) -> Any:
    """``name``, imported when one of its attributes is first used (not in ``sys.modules`` before)."""
    return _LazyModule(name)
