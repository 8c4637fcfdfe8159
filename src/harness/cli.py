"""The `harness` command: a Hydra app whose only job is to hand the config to a run.

Nothing heavy is imported here: torch, Lightning and MLflow load inside the
job, so `harness --help` and `harness --cfg job` answer at once.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from harness.config.locations import conf_dir
from harness.errors import ConfigError, HarnessError


def _say(message: str) -> None:
    print(f"harness: error: {message}", file=sys.stderr)


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
def _app(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from harness.run.job import run_job

    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        run_job(cfg)
    except HarnessError as err:
        _say(str(err))
        if not multirun:
            sys.exit(2 if isinstance(err, ConfigError) else 1)
    except Exception as err:
        from harness.run.result import classify_failure

        status, reason = classify_failure(err)
        output_dir = HydraConfig.get().runtime.output_dir
        _say(f"{status}: {reason} (traceback in {output_dir}/error.log)")
        if not multirun:
            sys.exit(1)
    # In a sweep a failed job is recorded in its result.json and the sweep goes on.


def main() -> None:
    """Entry point of the `harness` console script."""
    from harness.sweep.named import register_sweeps

    register_sweeps()  # `sweep=NAME` options, from sweeps/*.yaml
    _app()
    from harness.sweep.hydra_callback import outcome

    if outcome.exit_code:  # set at the end of a multirun: every job failed
        _say(outcome.message or "the sweep failed")
        sys.exit(outcome.exit_code)


if __name__ == "__main__":
    main()
