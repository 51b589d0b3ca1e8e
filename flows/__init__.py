"""Prefect flows: thin orchestration over ``components``; Ray does the work."""
