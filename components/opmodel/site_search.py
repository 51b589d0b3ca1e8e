"""The measured tier's search for sites near a question (``measured.SiteTable``): brute-force array work where
the search is small, scipy's ``cKDTree`` where it is large.

Why: a CLI question asks one site or a lattice's few hundred, against a table's hundreds to thousands of
sites: a distance matrix answers that in microseconds, while ``import scipy.spatial`` costs ~0.3 s of CPU, a
fifth of the question; a table saved with a ``cKDTree`` inside also makes unpickling it import scipy. The tree
is built only for a search with more than ``BRUTE_PAIRS`` (question, site) pairs (training and the gate's
batches), and is never pickled.

The answers do not depend on the path: the measured tier uses a search only to bound the sites it then
weighs by their exact distance (``measured._distance``), with ``SEARCH_SLACK`` octaves (1e-6, far above
either path's rounding) on each side of the gate, and it breaks ties among the k nearest by site order itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

BRUTE_PAIRS = 2_000_000  # (question, site) pairs a distance matrix takes (~48 MB of float64 in 3 dimensions)


class SiteIndex:
    """Points (a table's sites, one row each) and the three searches the measured tier asks of them."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = np.ascontiguousarray(data, dtype="float64")
        self._tree: Any = None

    @property
    def n(self) -> int:
        return len(self.data)

    def __getstate__(self) -> dict[str, Any]:
        return {"data": self.data}  # no tree: unpickling the table needs no scipy

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.data, self._tree = state["data"], None

    def tree(self) -> Any:
        if self._tree is None:
            from scipy.spatial import cKDTree

            self._tree = cKDTree(self.data)
        return self._tree

    def _small(self, points: np.ndarray) -> bool:
        return len(points) * self.n <= BRUTE_PAIRS

    def _squared(self, points: np.ndarray) -> np.ndarray:
        """(question, site) squared distances."""
        return ((points[:, None, :] - self.data[None, :, :]) ** 2).sum(axis=-1)

    def count_within(self, points: np.ndarray, radius: float) -> np.ndarray:
        """Per question point, the number of sites within ``radius``."""
        if not self._small(points):
            return self.tree().query_ball_point(points, radius, return_length=True)
        return (self._squared(points) <= radius * radius).sum(axis=1)

    def pairs_within(self, points: np.ndarray, radius: float) -> tuple[np.ndarray, np.ndarray]:
        """(question, site) index pairs within ``radius``, in any order."""
        if not self._small(points):
            from scipy.spatial import cKDTree

            pairs = cKDTree(points).sparse_distance_matrix(self.tree(), radius, output_type="ndarray")
            return pairs["i"].astype("int64"), pairs["j"].astype("int64")
        q, site = np.nonzero(self._squared(points) <= radius * radius)
        return q.astype("int64"), site.astype("int64")

    def nearest(self, points: np.ndarray, k: int, radius: float) -> np.ndarray:
        """Per question point, the ``k`` nearest sites within ``radius`` nearest first, ``n`` where fewer are
        (as ``cKDTree.query``)."""
        if not self._small(points):
            _, found = self.tree().query(points, k=k, distance_upper_bound=radius)
            return found.reshape(len(points), k)
        squared = self._squared(points)
        order = np.argsort(squared, axis=1, kind="stable")[:, :k]
        near = np.take_along_axis(squared, order, axis=1) <= radius * radius
        return np.where(near, order, self.n)
