"""MLflow Model Registry: logging, registration, threshold checks, champion/challenger aliases."""
