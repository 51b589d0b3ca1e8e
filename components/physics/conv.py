"""2-D convolution (NeuSight's and traced PyTorch conv2d rows): square images and filters, as cuDNN's
implicit GEMM -- rows B*Ho*Wo, columns Cout, depth Cin*k*k.

FLOPs: 2*B*Cout*Ho*Wo*Cin*k*k. Minimum bytes: the input tensor once (not its im2col expansion: each pixel
feeds k*k GEMM rows), the filters once, the output once.
"""

from __future__ import annotations

import numpy as np

from components.physics.base import Dims, OpFamily, Work, get
from components.physics.dtypes import element_bytes


def out_size(d: Dims) -> np.ndarray:
    """Output side: floor((in + 2*pad - k) / stride) + 1."""
    return np.floor((d["insize"] + 2.0 * get(d, "pad", 0.0) - d["ksize"]) / get(d, "stride", 1.0)) + 1.0


def work(dtype: str, d: Dims, op: str | None = None, kv_dtype: str | None = None) -> Work:
    e = element_bytes(dtype)
    e_out = np.maximum(e, 2.0)  # 8-bit convolutions write 16-bit results
    b, cin, cout, k = get(d, "B", 1.0), d["cin"], d["cout"], d["ksize"]
    ho = out_size(d)
    out = b * cout * ho * ho
    flops = 2.0 * out * cin * k * k
    nbytes = e * (b * cin * d["insize"] ** 2 + cout * cin * k * k) + e_out * out
    return Work(flops, nbytes, np.zeros_like(flops))


FAMILY = OpFamily(
    name="conv",
    required=("cin", "cout", "ksize", "insize"),
    optional=("B", "stride", "pad"),
    work=work,
    aliases=("conv2d",),
    dim_aliases={
        "B": ("b", "batch", "batch_size", "bs"),
        "cin": ("input_channel", "in_channels", "c_in", "c"),
        "cout": ("output_channel", "out_channels", "c_out"),
        "ksize": ("kernel_szie", "kernel_size", "r"),
        "insize": ("input_size", "image_size", "hw", "in_size"),
        "stride": ("stride",),
        "pad": ("padding",),
    },
)
