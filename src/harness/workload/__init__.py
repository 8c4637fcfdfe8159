"""The built-in workload: a small transformer on synthetic data, CPU-friendly."""
