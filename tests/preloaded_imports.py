"""What the fork server of tests/forked_harness.py imports once, before any run is forked.

The modules a `harness` job loads, in the order its process meets them: harness's routing
of the libraries' output first (MLflow reads MLFLOW_CONFIGURE_LOGGING when it is imported),
then the heavy libraries. Importing them runs no torch op, so no thread pool exists yet
when a run is forked.
"""

from harness.terminal import quiet_libraries

quiet_libraries()

# ruff: noqa: E402, F401, I001 - imported for their side effect: loaded once, here
import torch
import lightning.pytorch
import hydra
import matplotlib.backends.backend_agg
import matplotlib.figure
import mlflow
import mlflow.store.tracking.sqlalchemy_store
import submitit

import harness.cli
import harness.run.build
import harness.run.measure
import harness.sweep.callbacks
import harness.tracking.parent_run
import hydra_plugins.harness_launcher.rounds_sweeper
import hydra_plugins.harness_launcher.submitit_launcher
