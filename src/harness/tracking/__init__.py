"""Experiment tracking: runs and sweeps recorded in MLflow, imported only inside a job."""
