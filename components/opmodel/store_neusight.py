"""NeuSight's measured FP32 ``linear`` rows (PyTorch 2.1, torch.cuda.Event) as a measured-store source.

Only NeuSight's *training* side is read (``components.ingest.neusight.training_rows``: the per-GPU
``train/collect/linear`` files of P4, P100, T4, V100 and A100-PCIE-40GB); the published ``test/`` files (the
``neusight`` gate split's test side: H100, L4, A100 80GB) never enter the store. A ``linear`` of input
(B, M, K) and weight (N, K) is one GEMM of B*M rows (the weight read once, ``components.physics.gemm``), so it
is stored as a GEMM row M = B*M, N, K, dtype ``fp32`` (PyTorch >= 1.12 runs FP32 matmuls without TF32 unless
asked). The repeats of one shape on one GPU fold into their median (``store.build_store``).

The rows are kept apart in the store (``store.MEASURED_ONLY_DIR``): only the measured tier answers from them
(exact hits and interpolation between a GPU's own kernels). The spec model, the transfer fit and the op
engine's gate splits read ``<family>.parquet`` only, so they are trained and scored as before. NeuSight's
``bmm`` rows (B > 1) are not read: the measured tier has no layout for batched products.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

SOURCE = "neusight"
KINDS: tuple[str, ...] = ("linear",)


def neusight_frames(root: Path, catalog: object) -> tuple[dict[str, pd.DataFrame], dict[str, int]]:
    """``{"gemm": rows}`` (device_id, dtype, M, N, K, latency_us, kernel_source: one row per measurement,
    before folding) of NeuSight's training-side ``linear`` files under ``root`` (its repository root), and
    ``{device or file: rows}`` rejected by the parser (counted in the store manifest, never dropped
    silently)."""
    from components.ingest.neusight import training_rows

    rows, rejects = training_rows(Path(root), catalog, KINDS)
    counts: dict[str, int] = {}
    for record in rejects:
        name = str(record["upstream_file"])
        counts[name] = counts.get(name, 0) + 1
    if rows.empty:
        return {}, counts
    m = rows["shape:B"].to_numpy(dtype="int64") * rows["shape:M"].to_numpy(dtype="int64")
    gemm = pd.DataFrame(
        {
            "device_id": rows["device_id"].astype(str).to_numpy(),
            "dtype": "fp32",
            "M": m,
            "N": rows["shape:N"].to_numpy(dtype="int64"),
            "K": rows["shape:K"].to_numpy(dtype="int64"),
            "latency_us": rows["duration_us"].to_numpy(dtype="float64"),
            "kernel_source": SOURCE,
        }
    )
    return {"gemm": gemm}, counts
