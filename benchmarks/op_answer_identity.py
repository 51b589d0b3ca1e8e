"""Answers of two trees to the same op questions, field by field (docs/answers.md, "Which tier answers an op
question").

    PYTHONPATH=. python benchmarks/op_answer_identity.py sample DIR     # DIR/questions.csv, DIR/truth.csv
    PYTHONPATH=$TREE python -m kernelcast.cli predict --batch DIR/questions.csv --json > DIR/LABEL.json
    python benchmarks/op_answer_identity.py compare DIR BEFORE.json AFTER.json

``sample``: up to 40 measured rows per (family, source) of the state's canonical tables
(``$KERNELCAST_HOME/data/canonical``) of the families the learned tier answered before the one op path:
elementwise, softmax, layer/RMS norm, conv, and GEMM/linear/bmm in fp32/fp64. ``compare``: how many answers
are identical in every answer field (``ANSWER_KEYS``) but ``tier``, the tier changes, and the MAPE of each
side per family.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

FAMILIES = ("elementwise", "softmax", "layernorm", "rmsnorm", "conv", "gemm", "linear", "bmm")
PER_GROUP = 40
OP_NAMES = {"matmul": "gemm", "layer_norm": "layernorm"}
CONV_DIMS = {
    "Input_Channel": "cin",
    "Output_Channel": "cout",
    "Kernel_Size": "ksize",
    "Input_Size": "insize",
    "Stride": "stride",
    "Padding": "pad",
    "Batch_Size": "B",
}


def sample(folder: Path) -> None:
    from components.platform.config import get_settings
    from components.serving.query import FAMILY_OF_OP

    canonical = get_settings().data_dir / "canonical"
    kernels = pd.read_parquet(canonical / "kernels.parquet")
    kernels = kernels[kernels["family"].isin(FAMILIES)]
    gemm_like = kernels["family"].isin(("gemm", "linear", "bmm"))
    kernels = kernels[~gemm_like | kernels["dtype"].isin(("fp32", "fp64"))]
    op = kernels["op"].map(lambda o: OP_NAMES.get(o, o)).where(kernels["family"] != "conv", "conv2d")
    kernels = kernels.assign(question_op=op)[op.isin(list(FAMILY_OF_OP))]
    measured = pd.read_parquet(
        canonical / "measurements.parquet", columns=["kernel_id", "device_id", "duration_us"]
    )
    keys = ["kernel_id", "device_id", "family", "source", "question_op", "shape_json", "dtype"]
    rows = measured.merge(kernels[keys[:1] + keys[2:]], on="kernel_id")
    rows = rows.groupby(keys, observed=True, as_index=False)["duration_us"].median()
    picked = pd.concat(
        g.sample(min(len(g), PER_GROUP), random_state=0)
        for _, g in rows.groupby(["family", "source"], observed=True)
    )

    def shape(text: str) -> str:
        return ",".join(f"{CONV_DIMS.get(k, k)}={int(v)}" for k, v in json.loads(text).items())

    out = pd.DataFrame(
        {
            "op": picked["question_op"],
            "shape": picked["shape_json"].map(shape),
            "dtype": picked["dtype"],
            "device": picked["device_id"],
            "measured_us": picked["duration_us"],
            "family": picked["family"],
            "source": picked["source"],
        }
    )
    folder.mkdir(parents=True, exist_ok=True)
    out[["op", "shape", "dtype", "device"]].to_csv(folder / "questions.csv", index=False)
    out.to_csv(folder / "truth.csv", index=False)
    print(out.groupby(["family", "source"]).size().to_string())


def compare(folder: Path, before: Path, after: Path) -> None:
    from components.serving.answer_fields import ANSWER_KEYS

    fields = [k for k in ANSWER_KEYS if k != "tier"]
    truth = pd.read_csv(folder / "truth.csv")
    old = json.loads(before.read_text())["predictions"]
    new = json.loads(after.read_text())["predictions"]
    if not len(old) == len(new) == len(truth):
        raise SystemExit(f"answer counts differ: {len(old)}, {len(new)}, {len(truth)} questions")
    frame = truth.assign(
        before=[a["duration_us"] for a in old],
        after=[a["duration_us"] for a in new],
        tier_before=[a["tier"] for a in old],
        tier_after=[a["tier"] for a in new],
        same=[all(a.get(k) == b.get(k) for k in fields) for a, b in zip(old, new, strict=True)],
    )
    print(f"identical in every field but tier: {int(frame['same'].sum())} of {len(frame)}")
    print(frame.groupby(["tier_before", "tier_after"]).size().to_string())
    changed = frame[~frame["same"]]
    if len(changed):
        print(changed.groupby(["tier_after", "device", "family"]).size().to_string())
    for side in ("before", "after"):
        frame[f"ape_{side}"] = 100 * np.abs(frame[side] - frame["measured_us"]) / frame["measured_us"]
    print(frame.groupby("family")[["ape_before", "ape_after"]].mean().round(2).to_string())


if __name__ == "__main__":
    if sys.argv[1:2] == ["sample"] and len(sys.argv) == 3:
        sample(Path(sys.argv[2]))
    elif sys.argv[1:2] == ["compare"] and len(sys.argv) == 5:
        compare(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
    else:
        raise SystemExit(__doc__)
