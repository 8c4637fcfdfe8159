"""What the fork server of tests/forked_harness.py imports once, before any run is forked.

The modules a `harness` job loads, in the order its process meets them: harness's routing
of the libraries' output first, then the heavy libraries. Importing them runs no torch op,
so no thread pool exists yet when a run is forked. Not MLflow nor pandas: a job's process
never imports them (MLflow lives in the tracker process, a subprocess of its own; issue #22),
and a forked run must not hold what the real command would not.
"""

import multiprocessing.process

from harness.terminal import quiet_libraries

# The class of the server's own process object (multiprocessing deletes its name): a forked
# run becomes the main process again with an instance of it (tests/forked_harness.py).
MAIN_PROCESS = type(multiprocessing.process.current_process())

quiet_libraries()

# ruff: noqa: E402, F401, I001 - imported for their side effect: loaded once, here
import torch
import lightning.pytorch
import hydra
import matplotlib.backends.backend_agg
import matplotlib.figure
import submitit

import harness.cli
import harness.cli_errors
import harness.profilers.diagnose.preset
import harness.profilers.speed
import harness.run.build
import harness.run.job
import harness.run.measure
import harness.sweep.callbacks
import harness.sweep.named
import harness.tracking.parent_run
import harness.workload.data
import harness.workload.model
import pydantic
import rich.table
import hydra_plugins.harness_launcher.rounds_sweeper
import hydra_plugins.harness_launcher.submitit_launcher
