"""What a re-run of this job (a DDP rank, the job under nsys) needs to compose the same config."""

from __future__ import annotations


def same_config_arguments() -> list[str]:
    """`--config-dir` (`-cd`), `--config-name` and `hydra.searchpath` of the current Hydra job.

    Without them a re-run finds only harness's own conf/, and a user's `model=my_model`
    from `-cd my_conf` is an unknown option there.
    """
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    args = [f"--config-dir={source.path}" for source in hydra_cfg.runtime.config_sources
            if source.provider == "command-line"]
    if hydra_cfg.job.config_name not in (None, "config"):
        args.append(f"--config-name={hydra_cfg.job.config_name}")
    args += [o for o in hydra_cfg.overrides.hydra if o.startswith("hydra.searchpath")]
    return args
