"""Suites as data: ``components/profiling/suites/<name>.yaml`` -> a list of cases to measure.

A suite file has a ``kind`` and the data for that kind:
- ``ops``: ``grids`` of PyTorch op cases (family, op, dtypes, shape grid: a list of shapes, or a
  ``product`` of per-dimension values). The op families and shape grids of our datasets.
- ``source``: CUDA C++ kernels (inline ``source`` or a ``file``), each with ``launch`` configs
  (grid/block/defines) and the buffers it takes; compiled with NVRTC and launched with cuda-python.
- ``triton``: Triton kernels by name (``components/profiling/kernels_triton.py``) with their sizes.
- ``kernelbench``: KernelBench programs (class Model / get_inputs / get_init_inputs) by level and
  file glob, read from the datasets folder in place.
- ``active``: a candidate grid (as ``ops``) plus a ``budget``; the cases actually measured are the
  ``budget`` candidates whose predicted interval on the GPU being profiled is widest
  (``components/serving/active.py``).
Every case has a stable ``case_id``: the same case in two runs or on two GPUs has the same id.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.profiling.suites import DTYPES, SUPPORTED_DTYPES, OpCase

SUITES_DIR: Path = Path(__file__).resolve().parent / "suites"
KINDS: tuple[str, ...] = ("ops", "source", "triton", "kernelbench", "active")


class SuiteError(ValueError):
    """A suite name or file that cannot be used; the message names the file and entry."""


@dataclass(frozen=True)
class Case:
    """One thing to measure. ``kind``: op | source | triton | program; ``spec`` is its data."""

    kind: str
    case_id: str
    spec: dict[str, Any] = field(hash=False, compare=False)

    def op_case(self) -> OpCase:
        if self.kind != "op":
            raise SuiteError(f"case {self.case_id}: not an op case")
        s = self.spec
        return OpCase(s["family"], s["op"], s["dtype"], tuple((k, int(v)) for k, v in s["shape"].items()))

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "case_id": self.case_id, **self.spec}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Case:
        spec = {k: v for k, v in data.items() if k not in ("kind", "case_id")}
        return cls(data["kind"], data["case_id"], spec)


def op_case(family: str, op: str, dtype: str, shape: dict[str, int]) -> Case:
    base = OpCase(family, op, dtype, tuple((k, int(v)) for k, v in shape.items()))
    return Case("op", base.case_id, {"family": family, "op": op, "dtype": dtype, "shape": dict(base.shape)})


def suite_names() -> list[str]:
    return sorted(p.stem for p in SUITES_DIR.glob("*.yaml"))


# Earlier names still accepted (deployments, scripts): the first runs' "default" suite is now "ops".
ALIASES: dict[str, str] = {"default": "ops", "tiny": "smoke"}


def suite_path(name: str) -> Path:
    name = ALIASES.get(name, name)
    path = Path(name) if name.endswith((".yaml", ".yml")) else SUITES_DIR / f"{name}.yaml"
    if not path.is_file():
        raise SuiteError(
            f"--suite {name!r}: no such suite; choose one of {', '.join(suite_names())} "
            "or give a suite YAML file"
        )
    return path


def read_suite(name: str) -> dict[str, Any]:
    import yaml

    path = suite_path(name)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SuiteError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict) or data.get("kind") not in KINDS:
        raise SuiteError(f"{path}: needs 'kind:' one of {', '.join(KINDS)}")
    data["_path"] = str(path)
    return data


def _shapes(grid: dict[str, Any], where: str) -> list[dict[str, int]]:
    if "shapes" in grid:
        shapes = grid["shapes"]
        if not isinstance(shapes, list) or not all(isinstance(s, dict) for s in shapes):
            raise SuiteError(f"{where}: 'shapes' must be a list of mappings")
        return [{k: int(v) for k, v in s.items()} for s in shapes]
    if "product" in grid:
        dims = grid["product"]
        if not isinstance(dims, dict) or not all(isinstance(v, list) and v for v in dims.values()):
            raise SuiteError(f"{where}: 'product' must map each dimension to a non-empty list")
        names = list(dims)
        return [
            dict(zip(names, (int(x) for x in combo), strict=False))
            for combo in itertools.product(*dims.values())
        ]
    raise SuiteError(f"{where}: give 'shapes' or 'product'")


def op_cases(data: dict[str, Any]) -> list[Case]:
    """The op cases of an ``ops`` (or ``active`` candidate) suite, in file order, without repeats."""
    where = data.get("_path", "suite")
    cases: dict[str, Case] = {}
    for index, grid in enumerate(data.get("grids") or []):
        label = f"{where}: grids[{index}]"
        try:
            family, ops = grid["family"], grid.get("ops") or [grid["op"]]
            dtypes = grid.get("dtypes") or list(DTYPES)
        except (KeyError, TypeError):
            raise SuiteError(f"{label}: needs 'family' and 'op' (or 'ops')") from None
        bad = [d for d in dtypes if d not in SUPPORTED_DTYPES]
        if bad:
            raise SuiteError(f"{label}: dtype {bad[0]!r} not one of {', '.join(SUPPORTED_DTYPES)}")
        for dtype, op, shape in itertools.product(dtypes, ops, _shapes(grid, label)):
            case = op_case(family, op, dtype, shape)
            cases.setdefault(case.case_id, case)
    if not cases:
        raise SuiteError(f"{where}: no cases")
    return list(cases.values())


def source_cases(data: dict[str, Any]) -> list[Case]:
    where = data.get("_path", "suite")
    base = Path(where).parent
    cases = []
    for index, kernel in enumerate(data.get("kernels") or []):
        label = f"{where}: kernels[{index}]"
        if "name" not in kernel or not ("source" in kernel or "file" in kernel):
            raise SuiteError(f"{label}: needs 'name' and 'source' (or 'file')")
        source = kernel.get("source") or (base / kernel["file"]).read_text()
        for launch in kernel.get("launches") or []:
            if "grid" not in launch or "block" not in launch:
                raise SuiteError(f"{label}: each launch needs 'grid' and 'block'")
            key = json.dumps(launch, sort_keys=True, separators=(",", ":"))
            spec = {
                "name": kernel["name"],
                "entry": kernel.get("entry", kernel["name"]),
                "source": source,
                "language": "cuda",
                "dtype": kernel.get("dtype", "fp32"),
                "launch": launch,
                "flops": kernel.get("flops"),
                "bytes": kernel.get("bytes"),
            }
            cases.append(Case("source", f"source.{kernel['name']}.{_short_hash(key)}", spec))
    if not cases:
        raise SuiteError(f"{where}: no kernels with launches")
    return cases


def triton_cases(data: dict[str, Any]) -> list[Case]:
    from components.profiling.kernels_triton import TRITON_KERNELS

    where = data.get("_path", "suite")
    cases = []
    for index, entry in enumerate(data.get("kernels") or []):
        name = entry.get("name") if isinstance(entry, dict) else None
        if name not in TRITON_KERNELS:
            raise SuiteError(
                f"{where}: kernels[{index}]: name must be one of {', '.join(sorted(TRITON_KERNELS))}"
            )
        for dtype, size in itertools.product(entry.get("dtypes") or ["fp16"], entry.get("sizes") or []):
            size = {k: int(v) for k, v in size.items()}
            dims = "-".join(f"{k}{v}" for k, v in size.items())
            cases.append(
                Case(
                    "triton",
                    f"triton.{name}.{dtype}.{dims}",
                    {"name": name, "dtype": dtype, "shape": size, "language": "triton"},
                )
            )
    if not cases:
        raise SuiteError(f"{where}: no Triton kernels with sizes")
    return cases


def kernelbench_cases(data: dict[str, Any], datasets_dir: Path) -> list[Case]:
    where = data.get("_path", "suite")
    root = datasets_dir / data.get("root", "kernelbench/KernelBench")
    if not root.is_dir():
        raise SuiteError(f"{where}: KernelBench folder not found: {root}")
    cases = []
    for level in data.get("levels") or []:
        folder = root / str(level["level"])
        files = sorted(
            p
            for p in folder.glob("*.py")
            if any(fnmatch.fnmatch(p.name, pattern) for pattern in level.get("include", ["*.py"]))
        )
        for path in files[: level.get("limit") or None]:
            cases.append(
                Case(
                    "program",
                    f"program.{level['level']}.{path.stem}",
                    {
                        "path": str(path.relative_to(datasets_dir)),
                        "level": str(level["level"]),
                        "dtype": data.get("dtype", "fp32"),
                        "language": "pytorch",
                    },
                )
            )
    if not cases:
        raise SuiteError(f"{where}: no KernelBench programs matched")
    return cases


def _short_hash(text: str) -> str:
    import hashlib

    return hashlib.sha1(text.encode()).hexdigest()[:10]


def load_cases(name: str, *, datasets_dir: Path | None = None, select: Any = None) -> list[Case]:
    """The cases of suite ``name``. ``select`` (``active`` suites only): a callable
    ``(candidates, budget) -> chosen`` -- the active-learning choice for the GPU being profiled."""
    data = read_suite(name)
    kind = data["kind"]
    if kind == "ops":
        return op_cases(data)
    if kind == "source":
        return source_cases(data)
    if kind == "triton":
        return triton_cases(data)
    if kind == "kernelbench":
        from components.platform.config import get_settings

        return kernelbench_cases(data, datasets_dir or get_settings().datasets_dir)
    candidates = op_cases(data)
    budget = int(data.get("budget", 32))
    if select is None:
        raise SuiteError(
            f"--suite {name}: an active-learning suite needs a model to choose its cases "
            "(give --model; the cases are those with the widest predicted interval on this GPU)"
        )
    return list(select(candidates, budget))


def chunked(cases: list[Case], chunk_size: int) -> list[list[Case]]:
    if chunk_size < 1:
        raise ValueError(f"--chunk-size {chunk_size}: must be at least 1")
    return [cases[i : i + chunk_size] for i in range(0, len(cases), chunk_size)]
