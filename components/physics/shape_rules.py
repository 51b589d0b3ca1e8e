"""Rules on a shape's sizes every question form shares (no numpy: a bad shape is refused before loading it).

A size counts something (rows, channels, tokens, bytes) and is at least 1, except the dimensions below: a
convolution's zero padding (PyTorch's default) is 0.
"""

from __future__ import annotations

ZERO_ALLOWED: frozenset[tuple[str, str]] = frozenset({("conv", "pad")})  # (family, dimension) that may be 0
ZERO_DIMS: frozenset[str] = frozenset(dim for _, dim in ZERO_ALLOWED)  # what a shape's text may set to 0
