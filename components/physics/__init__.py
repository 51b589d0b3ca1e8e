"""Speed-of-light physics of ops: the one registry of op families and the one definition of an op's work.

``registry`` lists every family (one module each: ``gemm``, ``attention``, ``moe``, ``allreduce``,
``elementwise``, ``softmax``, ``norm``, ``conv``) with its dimensions and their spellings, its FLOPs and
minimum bytes, and where it is answered; ``dtypes`` is the one dtype table (spellings, bytes per element, the
pipe per dtype); ``roofline`` turns an op's work into its speed-of-light time on a GPU spec.

Physics reads nothing of kernelcast (a GPU spec is duck-typed), so every floor above it -- the catalog's
dtype spellings, ingest computing a row's FLOPs, features, the op engine's tiers, deployments, programs,
serving's plausibility bounds -- imports the same formulas.
"""
