"""Framework-cost coefficients for production answers, fitted on every PipeWeave GPU.

Regenerate with ``python -m components.deployments.bench --fit-production`` (prints this file's values).
Bench folds never use these: each fold refits on its own train GPUs.
"""

from components.deployments.compose import FrameworkCost

PRODUCTION_FRAMEWORK = FrameworkCost(source="none (not fitted)")
