"""Whole programs: PyTorch modules traced into aten ops, CUDA/HIP sources analysed statically."""
