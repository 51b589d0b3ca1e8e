"""OMP_WAIT_POLICY=PASSIVE (``runtime.OPENMP_ENV``) changes how OpenMP threads wait, not what they compute: a
two-thread LightGBM fit gives the same booster, byte for byte, under either policy (real LightGBM, each in a
fresh process, since the policy is read when the OpenMP runtime loads)."""

from __future__ import annotations

import os
import subprocess
import sys

FIT = """
import numpy as np, lightgbm as lgb
rng = np.random.default_rng(7)
x = rng.normal(size=(4000, 6))
y = x[:, 0] * 2 + np.sin(x[:, 1]) + rng.normal(scale=0.1, size=4000)
params = {"objective": "regression", "num_threads": 2, "num_leaves": 31, "verbose": -1, "seed": 3}
booster = lgb.train(params, lgb.Dataset(x, y), num_boost_round=40)
print(booster.model_to_string())
"""


def _run(code: str, variable: str, value: str | None, **extra: str) -> str:
    """stdout of ``code`` in a fresh process with ``variable`` set to ``value`` (unset: None)."""
    env = {k: v for k, v in os.environ.items() if k != variable} | extra
    if value:
        env[variable] = value
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _fit(policy: str | None) -> str:
    return _run(FIT, "OMP_WAIT_POLICY", policy)


def test_passive_waiting_fits_the_same_booster() -> None:
    from components.platform.runtime import OPENMP_ENV

    spinning, passive = _fit(None), _fit(OPENMP_ENV["OMP_WAIT_POLICY"])
    assert "Tree=39" in passive  # 40 trees were fitted
    assert passive == spinning


SVD = """
import numpy as np
from scipy.linalg import svd
rng = np.random.default_rng(11)
j = rng.normal(size=(3000, 28))  # the program model's least-squares Jacobian's size: OpenBLAS uses 2 threads
u, s, vt = svd(j, full_matrices=False)
print(np.concatenate([u.ravel(), s, vt.ravel(), (j.T @ j).ravel()]).tobytes().hex())
"""


def _blas(timeout: str | None) -> str:
    # two threads (whose waiting differs) whatever the test machine has
    return _run(SVD, "OPENBLAS_THREAD_TIMEOUT", timeout, OPENBLAS_NUM_THREADS="2")


def test_openblas_threads_that_sleep_at_once_compute_the_same_bits() -> None:
    from components.platform.runtime import OPENMP_ENV

    spinning, sleeping = _blas(None), _blas(OPENMP_ENV["OPENBLAS_THREAD_TIMEOUT"])
    assert len(sleeping) > 100_000  # the arrays were printed
    assert sleeping == spinning
