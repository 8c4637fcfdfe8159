"""Experiment tracking: runs and sweeps recorded in MLflow.

Nothing here imports MLflow at module level; it loads inside a job, so the
CLI starts fast.
"""
