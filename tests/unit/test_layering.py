"""Imports point down only: kernelcast/ (CLI) -> flows/ -> components/, and inside components/ each
package on its floor (``FLOORS``, bottom to top; the README's "Layout" draws them).

Walks every module's syntax tree -- imports inside functions and ``TYPE_CHECKING`` blocks count
too -- and fails naming ``file:line`` for each import that runs back up, and for each circle
between component packages (two packages of one floor may import each other's modules only one way).
"""

from __future__ import annotations

import ast
from collections import defaultdict
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
            if name == "components":  # ``from components import models`` names a package
                found.extend((node.lineno, f"components.{alias.name}") for alias in node.names)
            else:
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
    assert not problems, "imports running up the layers (components < flows < kernelcast):\n" + "\n".join(
        problems
    )


def test_every_layer_is_scanned() -> None:
    for layer in LAYERS:
        assert list((ROOT / layer).rglob("*.py")), f"no modules under {layer}/"


@pytest.mark.parametrize(
    ("layer", "source", "culprit"),
    [
        ("components", "from kernelcast.settings import Settings\n", "kernelcast.settings"),
        ("components", "def f():\n    import flows.runtime\n", "flows.runtime"),
        (
            "components",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kernelcast import cli\n",
            "kernelcast",
        ),
        (
            "flows",
            "def f():\n    from kernelcast.commands.validate import load_params\n",
            "kernelcast.commands.validate",
        ),
    ],
)
def test_an_upward_import_is_named_with_file_and_line(
    tmp_path: Path, layer: str, source: str, culprit: str
) -> None:
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
    (tmp_path / "flows" / "f.py").write_text(
        "from components.platform.config import Settings\nfrom . import g\n"
    )
    (tmp_path / "components" / "c.py").write_text("from .config import Settings\nimport pandas\n")
    assert upward_imports(tmp_path) == []


# --------------------------------------------------------------------------- floors inside components/

# Bottom to top. A package imports packages of its own floor or below, never above; packages that do
# not exist yet keep their declared place (opmodel: the op physics and tiers; deployments: LLM
# serving configurations), so a branch adding them lands on a floor, not in a gap.
FLOORS: tuple[frozenset[str], ...] = (
    frozenset({"common", "platform"}),  # settings, environment, atomic writes, sampling: no domain
    # the op-family registry and dtype table, and an op's roofline time on a (duck-typed) spec: below the
    # catalog, which reads its dtype spellings
    frozenset({"physics"}),
    frozenset({"devices"}),  # the GPU catalog
    frozenset({"profiling"}),  # measuring: cases, backends, the run folder's rows
    frozenset({"ingest"}),  # public datasets and profiled runs -> canonical tables (op work formulas)
    frozenset({"validation"}),  # expectations on the canonical tables and profiled rows
    frozenset({"features"}),  # analytical, device and static (SASS) features
    frozenset({"opmodel"}),  # op physics and tiers
    frozenset({"models"}),  # predictors: roofline, tabular, llm, the static CUDA estimate
    frozenset({"programs", "deployments"}),  # whole programs and deployments, answered op by op
    frozenset({"registry"}),  # MLflow: logging, the pyfunc contract, loading models:/ URIs, the gate
    frozenset({"evaluation"}),  # splits, metrics, the bench, the evaluate stage and gate report
    frozenset({"training"}),  # fitting families (Ray), the train stage, the LLM fine-tune and scenarios
    frozenset({"serving"}),  # questions, the API, the champion cache, active-learning case choice
    frozenset({"pipeline"}),  # the stage graph, lock and progress the pipeline runner reads
)


def floor_of(package: str) -> int | None:
    return next((i for i, floor in enumerate(FLOORS) if package in floor), None)


def component_package(module: str) -> str | None:
    """``components.models.tabular`` -> ``models``; ``components.common.atomic`` -> ``common``; else None."""
    parts = module.split(".")
    return parts[1] if parts[0] == "components" and len(parts) > 1 else None


Edges = dict[tuple[str, str], list[str]]


def package_edges(root: Path = ROOT) -> Edges:
    """``(importer, imported) -> ["file:line module", ...]`` between different component packages."""
    edges: Edges = defaultdict(list)
    for path in sorted((root / "components").rglob("*.py")):
        rel = path.relative_to(root)
        source = component_package(".".join(rel.with_suffix("").parts))
        if source is None or source == "__init__":
            continue
        for line, module in imported_modules(path, root):
            target = component_package(module)
            if target is not None and target != source:
                edges[(source, target)].append(f"{rel}:{line}: {module}")
    return dict(edges)


def floor_violations(edges: Edges) -> list[str]:
    """Each import of a package above the importer's floor, and each package on no floor."""
    problems = []
    for package in sorted({p for edge in edges for p in edge}):
        if floor_of(package) is None:
            problems.append(f"components/{package} is on no floor: add it to FLOORS in {Path(__file__).name}")
    for (source, target), where in sorted(edges.items()):
        low, high = floor_of(source), floor_of(target)
        if low is not None and high is not None and high > low:
            problems.extend(f"{w} ({source} on floor {low} imports {target} on floor {high})" for w in where)
    return problems


def circles(edges: Edges) -> list[list[str]]:
    """Strongly connected groups of two or more packages (Tarjan), each sorted; sorted by first name."""
    graph: dict[str, set[str]] = defaultdict(set)
    for source, target in edges:
        graph[source].add(target)
        graph.setdefault(target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def describe_circle(group: list[str], edges: Edges) -> str:
    inside = [
        f"  {s} -> {t}: {where[0]}" for (s, t), where in sorted(edges.items()) if s in group and t in group
    ]
    return f"circle between {', '.join(group)}:\n" + "\n".join(inside)


def test_component_packages_import_their_floor_or_below() -> None:
    problems = floor_violations(package_edges())
    assert not problems, "imports running up the floors of components/:\n" + "\n".join(problems)


def test_component_packages_form_no_circle() -> None:
    edges = package_edges()
    found = circles(edges)
    assert not found, "\n".join(describe_circle(group, edges) for group in found)


def test_every_floor_is_a_real_package_or_a_declared_newcomer() -> None:
    newcomers = {"opmodel", "deployments"}  # declared before their branches land
    for floor in FLOORS:
        for package in floor - newcomers:
            assert (ROOT / "components" / package).is_dir() or (
                ROOT / "components" / f"{package}.py"
            ).is_file(), package
    assert sum(len(floor) for floor in FLOORS) == len(set().union(*FLOORS))  # no package on two floors


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_planted_upward_import_fails_with_file_and_line(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "components/models/tabular.py": (
                "import os\n\ndef fit():\n    from components.training.llm import train\n"
            ),
            "components/training/llm.py": "from components.models.tabular import fit\n",
            "components/platform/config.py": "",
        },
    )
    edges = package_edges(root)
    low, high = floor_of("models"), floor_of("training")
    assert floor_violations(edges) == [
        f"components/models/tabular.py:4: components.training.llm "
        f"(models on floor {low} imports training on floor {high})"
    ]
    # The same import pointing down passes.
    (root / "components/models/tabular.py").write_text("from components.platform.config import Settings\n")
    assert floor_violations(package_edges(root)) == []


def test_a_planted_circle_fails_even_on_one_floor(tmp_path: Path) -> None:
    # programs and deployments share a floor: each may import the other, but not both ways.
    root = _tree(
        tmp_path,
        {
            "components/programs/ops.py": "from components.deployments.plan import Plan\n",
            "components/deployments/plan.py": "from ..programs import ops\n",
            "components/models/base.py": "",
        },
    )
    edges = package_edges(root)
    assert floor_violations(edges) == []
    assert circles(edges) == [["deployments", "programs"]]
    text = describe_circle(["deployments", "programs"], edges)
    assert "components/deployments/plan.py:1: components.programs" in text
    assert "components/programs/ops.py:1: components.deployments.plan" in text


def test_circles_are_found_in_a_synthetic_graph() -> None:
    edges: Edges = {
        ("features", "ingest"): ["a"],
        ("ingest", "profiling"): ["b"],
        ("profiling", "features"): ["c"],
        ("models", "features"): ["d"],
        ("serving", "registry"): ["e"],
        ("registry", "serving"): ["f"],
    }
    assert circles(edges) == [["features", "ingest", "profiling"], ["registry", "serving"]]
    assert circles({("models", "features"): ["d"], ("serving", "models"): ["e"]}) == []


def test_a_package_on_no_floor_fails(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"components/newthing/x.py": "from components.models import base\n"})
    assert floor_violations(package_edges(root)) == [
        "components/newthing is on no floor: add it to FLOORS in test_layering.py"
    ]
