"""What the pipeline runner (``flows/pipeline.py``, ``kernelcast pipeline``) needs beside the stages:
the DVC stage graph, stage inputs' fingerprints, the one-pipeline-at-a-time lock, progress and the
fleet of GPUs to retrain for. The top floor of ``components``: it reads the stages' outputs and
imports nothing above the base modules."""
