"""LLM deployments: a model (HF config.json) and a serving workload composed into TTFT, TPOT and cost.

``config`` reads a model's shape and a deployment; ``compose`` answers it from per-op times; ``data``
reads the measured serving runs (PipeWeave, AIConfigurator silicon); ``bench`` scores the composition on them.
"""
