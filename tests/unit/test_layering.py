"""Imports point down only: kernelcast/ (CLI) -> flows/ -> components/.

Walks every module's syntax tree -- imports inside functions and ``TYPE_CHECKING`` blocks count
too -- and fails naming ``file:line`` for each import that runs back up.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS: tuple[str, ...] = ("components", "flows", "kernelcast")  # bottom to top
FORBIDDEN: dict[str, frozenset[str]] = {
    "components": frozenset({"flows", "kernelcast"}),
    "flows": frozenset({"kernelcast"}),
    "kernelcast": frozenset(),
}


def imported_modules(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """``(line, absolute module name)`` for every import statement in ``path`` (under ``root``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = list(path.relative_to(root).parts[:-1])  # the package a relative import starts from
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            found.append((node.lineno, name))
    return found


def upward_imports(root: Path = ROOT) -> list[str]:
    """``file:line: layer imports module`` for each import that runs up the layers."""
    problems = []
    for layer in LAYERS:
        for path in sorted((root / layer).rglob("*.py")):
            for line, module in imported_modules(path, root):
                if module.split(".")[0] in FORBIDDEN[layer]:
                    problems.append(f"{path.relative_to(root)}:{line}: {layer} imports {module}")
    return problems


def test_imports_point_down_only() -> None:
    problems = upward_imports()
    assert not problems, "imports running up the layers (components < flows < kernelcast):\n" + "\n".join(problems)


def test_every_layer_is_scanned() -> None:
    for layer in LAYERS:
        assert list((ROOT / layer).rglob("*.py")), f"no modules under {layer}/"


@pytest.mark.parametrize(("layer", "source", "culprit"), [
    ("components", "from kernelcast.settings import Settings\n", "kernelcast.settings"),
    ("components", "def f():\n    import flows.runtime\n", "flows.runtime"),
    ("components", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kernelcast import cli\n", "kernelcast"),
    ("flows", "def f():\n    from kernelcast.commands.validate import load_params\n", "kernelcast.commands.validate"),
])
def test_an_upward_import_is_named_with_file_and_line(tmp_path: Path, layer: str, source: str, culprit: str) -> None:
    for name in LAYERS:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / layer / "sub").mkdir()
    (tmp_path / layer / "sub" / "mod.py").write_text("import os\n" + source)
    problems = upward_imports(tmp_path)
    assert len(problems) == 1 and problems[0].startswith(f"{layer}/sub/mod.py:")
    assert problems[0].endswith(culprit)
    line = int(problems[0].split(":")[1])
    assert culprit.split(".")[0] in (tmp_path / layer / "sub" / "mod.py").read_text().splitlines()[line - 1]


def test_downward_and_relative_imports_pass(tmp_path: Path) -> None:
    for name in LAYERS:
        (tmp_path / name).mkdir()
    (tmp_path / "kernelcast" / "cli.py").write_text("import flows.x\nfrom components import y\n")
    (tmp_path / "flows" / "f.py").write_text("from components.config import Settings\nfrom . import g\n")
    (tmp_path / "components" / "c.py").write_text("from .config import Settings\nimport pandas\n")
    assert upward_imports(tmp_path) == []
