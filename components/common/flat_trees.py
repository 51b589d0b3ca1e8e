"""A LightGBM booster's trees as flat numpy arrays, walked without importing LightGBM.

Why: ``import lightgbm`` pulls in scikit-learn and scipy (about 0.7-1.4 s), more than a whole CLI
question; a question's few rows walk a flattened booster in milliseconds. ``FlatTrees`` is built once from
``Booster.dump_model()`` (where LightGBM is loaded anyway: at training or at a registry copy), saved as
``.npz`` beside the model's ``.txt``, and answers what ``Booster.predict`` answers, to float rounding (a
raw sum for regression; sigmoid/softmax for binary/multiclass); ``tests/unit/test_serving_native.py``
checks it against LightGBM on real rows. Bulk batches (more than ``BULK_ROWS`` rows) go to LightGBM's own
predictor when the ``.txt`` is beside the arrays: the level-by-level walk wins on a handful of rows only.
The tabular predictor's serving copy adds lleaves' compiled trees on top (``components.serving.native``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

NPZ_SUFFIX = ".npz"
# Above this many rows a batch goes to LightGBM's own (compiled) predictor when it is installed: the
# level-by-level numpy walk wins on a handful of rows (no import, no per-call setup), loses on bulk.
BULK_ROWS = 512
# Row x tree visits a process walks before bulk batches go to LightGBM even when it is not loaded yet:
# about what importing it costs (0.7-1 CPU-s with scikit-learn and scipy; the walk ~0.3 us per row-tree).
WALK_BUDGET = 2_000_000
_walked = 0  # row x tree visits walked so far in this process
_MISSING = {"None": 0, "Zero": 1, "NaN": 2}
_ZERO = 1e-35  # LightGBM's kZeroThreshold


class FlatTrees:
    """Every tree of one booster as flat node arrays; ``predict(x)`` like ``Booster.predict(x)``."""

    def __init__(self, arrays: dict[str, np.ndarray], objective: str, n_classes: int) -> None:
        self.feature = arrays["feature"].astype(np.int64)
        self.threshold = arrays["threshold"].astype(np.float64)
        self.left = arrays["left"].astype(np.int64)
        self.right = arrays["right"].astype(np.int64)
        self.default_left = arrays["default_left"].astype(bool)
        self.missing = arrays["missing"].astype(np.int8)
        self.categorical = arrays["categorical"].astype(bool)
        self.cat_mask = arrays["cat_mask"].astype(np.uint64)
        self.leaf_value = arrays["leaf_value"].astype(np.float64)
        self.roots = arrays["roots"].astype(np.int64)  # per tree: node index, or ~leaf for a one-leaf tree
        self.depth = int(arrays["depth"])
        self.objective, self.n_classes = objective, n_classes
        self.booster_file: Path | None = None  # the LightGBM text model these arrays came from
        self._booster: Any = None
        self.threads: int | None = None  # threads for bulk predictions (None: the library's default)

    @classmethod
    def from_dump(cls, dump: dict[str, Any]) -> FlatTrees:
        nodes: dict[str, list[Any]] = {
            k: []
            for k in (
                "feature",
                "threshold",
                "left",
                "right",
                "default_left",
                "missing",
                "categorical",
                "cat_mask",
            )
        }
        leaves: list[float] = []
        roots: list[int] = []
        depth = 0

        def visit(node: dict[str, Any], level: int) -> int:
            nonlocal depth
            depth = max(depth, level)
            if "leaf_value" in node and "split_feature" not in node:
                leaves.append(float(node["leaf_value"]))
                return ~(len(leaves) - 1)
            position = len(nodes["feature"])
            for key in nodes:
                nodes[key].append(0)
            nodes["feature"][position] = int(node["split_feature"])
            nodes["default_left"][position] = bool(node.get("default_left", False))
            nodes["missing"][position] = _MISSING.get(str(node.get("missing_type", "None")), 0)
            if node.get("decision_type") == "==":
                categories = [int(c) for c in str(node["threshold"]).split("||") if c != ""]
                if any(c < 0 or c >= 64 for c in categories):
                    raise ValueError(
                        "categorical split on a category >= 64: cannot flatten into a 64-bit mask"
                    )
                nodes["categorical"][position] = True
                nodes["cat_mask"][position] = int(sum(1 << c for c in set(categories)))
                nodes["threshold"][position] = 0.0
            else:
                nodes["threshold"][position] = float(node["threshold"])
            nodes["left"][position] = visit(node["left_child"], level + 1)
            nodes["right"][position] = visit(node["right_child"], level + 1)
            return position

        for tree in dump["tree_info"]:
            roots.append(visit(tree["tree_structure"], 0))
        objective = str(dump.get("objective", "regression")).split()[0]
        n_classes = int(dump.get("num_tree_per_iteration", 1))
        arrays = {
            "feature": np.asarray(nodes["feature"], dtype=np.int64),
            "threshold": np.asarray(nodes["threshold"], dtype=np.float64),
            "left": np.asarray(nodes["left"], dtype=np.int64),
            "right": np.asarray(nodes["right"], dtype=np.int64),
            "default_left": np.asarray(nodes["default_left"], dtype=bool),
            "missing": np.asarray(nodes["missing"], dtype=np.int8),
            "categorical": np.asarray(nodes["categorical"], dtype=bool),
            "cat_mask": np.asarray(nodes["cat_mask"], dtype=np.uint64),
            "leaf_value": np.asarray(leaves, dtype=np.float64),
            "roots": np.asarray(roots, dtype=np.int64),
            "depth": np.asarray(depth),
        }
        return cls(arrays, objective, n_classes)

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "feature": self.feature,
            "threshold": self.threshold,
            "left": self.left,
            "right": self.right,
            "default_left": self.default_left,
            "missing": self.missing,
            "categorical": self.categorical,
            "cat_mask": self.cat_mask,
            "leaf_value": self.leaf_value,
            "roots": self.roots,
            "depth": np.asarray(self.depth),
        }

    def save(self, path: Path) -> None:
        from components.common.atomic import atomic_write

        meta = np.asarray(json.dumps({"objective": self.objective, "n_classes": self.n_classes}))

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as handle:
                np.savez(handle, meta=meta, **self.arrays())

        atomic_write(Path(path), write)

    @classmethod
    def load(cls, path: Path) -> FlatTrees:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files if k != "meta"}
            meta = json.loads(str(data["meta"]))
        flat = cls(arrays, meta["objective"], int(meta["n_classes"]))
        source = Path(path).with_suffix(".txt")
        flat.booster_file = source if source.is_file() else None
        return flat

    def raw(self, x: np.ndarray, chunk: int = 4096) -> np.ndarray:
        """Sum of leaf values per row (per class for multiclass: shape n x classes)."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim == 1:
            x = x[None, :]
        n, n_trees = len(x), len(self.roots)
        out = np.zeros((n, self.n_classes))
        tree_class = np.arange(n_trees) % self.n_classes
        for start in range(0, n, chunk):
            block = x[start : start + chunk]
            rows = np.arange(len(block))[:, None]
            node = np.broadcast_to(self.roots, (len(block), n_trees)).copy()
            for _ in range(self.depth):
                inner = node >= 0
                if not inner.any():
                    break
                at = np.where(inner, node, 0)
                value = block[rows, self.feature[at]]
                missing = self.missing[at]
                nan = np.isnan(value)
                numeric = np.where(nan & (missing != 2), 0.0, value)
                is_default = ((missing == 1) & (np.abs(numeric) <= _ZERO)) | ((missing == 2) & nan)
                go_left = np.where(is_default, self.default_left[at], numeric <= self.threshold[at])
                categorical = self.categorical[at]
                if categorical.any():
                    # LightGBM casts to int (truncation: -0.5 is category 0); NaN and negatives go right.
                    codes = np.where(
                        nan | (value <= -1) | (value >= 64), -1, np.trunc(np.nan_to_num(value, nan=-1))
                    ).astype(np.int64)
                    bit = (self.cat_mask[at] >> np.clip(codes, 0, 63).astype(np.uint64)) & np.uint64(1)
                    go_left = np.where(categorical, (codes >= 0) & (bit == 1), go_left)
                step = np.where(go_left, self.left[at], self.right[at])
                node = np.where(inner, step, node)
            values = self.leaf_value[~node]
            for c in range(self.n_classes):
                out[start : start + len(block), c] = values[:, tree_class == c].sum(axis=1)
        return out

    def predict(self, x: np.ndarray) -> np.ndarray:
        """``Booster.predict(x)``: the numpy walk for a few rows (no import), LightGBM's predictor for bulk
        when its model text is beside the arrays -- once LightGBM is loaded anyway, or once this process's
        walks have cost about what loading it costs (a question's bulk lattice walks; an evaluation's
        thousands of batches do not)."""
        global _walked
        cold = "lightgbm" not in sys.modules and _walked < WALK_BUDGET
        if len(x) > BULK_ROWS and self.booster_file is not None and not cold:
            try:
                if self._booster is None:
                    import lightgbm as lgb

                    self._booster = lgb.Booster(model_file=str(self.booster_file))
                options = {"num_threads": self.threads} if self.threads else {}
                return np.asarray(
                    self._booster.predict(np.asarray(x, dtype=np.float64), **options), dtype=np.float64
                )
            except ImportError:
                self.booster_file = None
        _walked += len(x) * len(self.roots)
        return self._link(self.raw(x))

    def _link(self, raw: np.ndarray) -> np.ndarray:
        """Raw scores -> what ``Booster.predict`` returns for the objective."""
        if self.objective == "binary":
            return 1.0 / (1.0 + np.exp(-raw[:, 0]))
        if self.objective in ("multiclass", "softmax"):
            shifted = np.exp(raw - raw.max(axis=1, keepdims=True))
            return shifted / shifted.sum(axis=1, keepdims=True)
        return raw[:, 0]


def flatten_booster(model_file: Path) -> Path:
    """Write ``<model>.npz`` beside a LightGBM text model (once; LightGBM is imported here)."""
    target = Path(model_file).with_suffix(NPZ_SUFFIX)
    if not target.exists():
        import lightgbm as lgb

        FlatTrees.from_dump(lgb.Booster(model_file=str(model_file)).dump_model()).save(target)
    return target
