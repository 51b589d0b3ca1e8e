"""The modern-op engine: physics of GEMM/attention/MoE/all-reduce and the measured, calibrated and
spec tiers."""
