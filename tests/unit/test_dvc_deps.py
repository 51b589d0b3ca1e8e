"""dvc.yaml lists every module a stage's command runs, so a change to any of them reruns the stage.

A stage's code is the transitive closure of the imports (module level and inside functions, not
``if TYPE_CHECKING:``) of the ``kernelcast/commands`` module its ``cmd`` runs, plus the CLI entry
point (``kernelcast/cli.py`` imports every command module, but runs only the one it dispatches to);
every such file must lie under one of the stage's ``deps``. Adapters and predictor classes
imported by name at run time live in packages the stages list as whole folders.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from components.platform.config import PROJECT_ROOT

PACKAGES = ("components", "flows", "kernelcast")
ENTRY = ("kernelcast/__init__.py", "kernelcast/cli.py", "kernelcast/commands/__init__.py")


def _module_file(name: str) -> Path | None:
    base = PROJECT_ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    return skipped


def imported_modules(path: Path) -> set[str]:
    """Project modules ``path`` imports anywhere (package parents included)."""
    tree = ast.parse(path.read_text())
    skipped = _type_checking_nodes(tree)
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # submodules
    return {
        parent
        for name in names
        if name.split(".")[0] in PACKAGES
        for parent in _with_parents(name)
        if _module_file(parent) is not None
    }


def code_closure(start: list[Path]) -> set[Path]:
    seen: set[Path] = set()
    todo = list(start)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        todo.extend(f for f in (_module_file(m) for m in imported_modules(path)) if f is not None)
    return seen


def stage_commands() -> dict[str, dict]:
    return yaml.safe_load((PROJECT_ROOT / "dvc.yaml").read_text())["stages"]


def command_module(cmd: str) -> Path:
    match = re.match(r"\s*kernelcast\s+([a-z-]+)", cmd)
    assert match, f"stage command does not run kernelcast: {cmd!r}"
    return PROJECT_ROOT / "kernelcast" / "commands" / f"{match.group(1).replace('-', '_')}.py"


@pytest.mark.parametrize("stage", sorted(stage_commands()))
def test_stage_deps_cover_every_module_its_command_runs(stage: str) -> None:
    spec = stage_commands()[stage]
    module = command_module(spec["cmd"])
    assert module.is_file(), f"{stage}: {module} not found"
    deps = [PROJECT_ROOT / d for d in spec.get("deps", []) if not str(d).startswith("${")]
    missing_deps = [
        str(d.relative_to(PROJECT_ROOT))
        for d in deps
        if not d.exists() and "/.kernelcast/" not in f"/{d.relative_to(PROJECT_ROOT)}"
    ]
    assert not missing_deps, f"{stage}: deps that do not exist: {missing_deps}"
    closure = code_closure([module]) | {
        PROJECT_ROOT / e for e in ENTRY
    }  # the entry point itself, not its closure
    uncovered = sorted(
        str(f.relative_to(PROJECT_ROOT)) for f in closure if not any(f == d or d in f.parents for d in deps)
    )
    assert not uncovered, f"dvc.yaml stage {stage!r} runs code it does not list as deps: {uncovered}"


def test_closure_follows_imports_inside_functions() -> None:
    """The walk itself: the train command imports its stage function inside the command body."""
    closure = code_closure([PROJECT_ROOT / "kernelcast" / "commands" / "train.py"])
    assert PROJECT_ROOT / "components" / "training" / "stage.py" in closure
    assert PROJECT_ROOT / "components" / "registry" / "runs.py" in closure
    assert PROJECT_ROOT / "kernelcast" / "commands" / "bench.py" not in closure
