"""harness: config-first profiling and benchmarking for PyTorch Lightning training.

Importing this package stays cheap: torch, Lightning and MLflow are imported
only by the modules that run a job, so `harness --help` answers at once.
"""

__version__ = "0.1.0"
