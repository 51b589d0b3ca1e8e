"""Serving engines (vLLM, SGLang, TensorRT-LLM) as seams of the deployment simulator: ``registry``."""
