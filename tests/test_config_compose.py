"""Every option of every config group, composed with Hydra's compose API and built, in-process.

No training and no subprocess: a config that composes here composes for `harness`, and each
`_target_` is instantiated (presets, model, data, trainer) so a wrong argument name or value
fails in milliseconds. The CLI tests keep what needs a real process (exit codes, output).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from harness.config.arguments import check_arguments
from harness.config.knobs import check_trainer_keys, read_knobs
from harness.config.locations import conf_dir, sweeps_dir
from harness.config.sweep_keys import swept_values
from harness.config.targets import check_targets
from harness.errors import ConfigError

CONF = conf_dir()


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def composed(*overrides: str, tmp_path: Path | None = None) -> DictConfig:
    """The job config `harness <overrides>` would run, with ${hydra:...} resolvable."""
    from harness.sweep.named import register_sweeps

    register_sweeps()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(tmp_path or Path.cwd())
        cfg.hydra.job.num = 0
    HydraConfig.instance().set_config(cfg)
    return cfg


@pytest.mark.parametrize("preset", [p for p in options("profiler") if p != "none"])
def test_every_profiler_preset_composes_and_builds(preset, tmp_path):
    cfg = composed(f"profiler=[{preset}]", tmp_path=tmp_path)
    assert cfg.hydra.mode is None  # harness.cli reads it unset, uncomposed
    read_knobs(cfg)
    check_arguments(check_targets(cfg))  # every shipped argument fits its constructor's type hints
    nodes = cfg.profiler
    assert len(nodes) >= 1
    for name, node in nodes.items():
        built = instantiate(node)
        assert type(built).__name__.endswith("Preset"), (name, type(built))


def test_presets_follow_one_naming_scheme():
    """Class <Name>Preset in harness.profilers, report files named after the preset."""
    for preset in options("profiler"):
        node = OmegaConf.load(CONF / "profiler" / f"{preset}.yaml")
        target = node.get("_target_")
        if target is None:
            continue  # none, full: lists of other presets
        module, _, cls = target.rpartition(".")
        assert module.startswith("harness.profilers."), target
        assert cls.endswith("Preset") and cls.lower().startswith(preset.lower()[:4]), target


@pytest.mark.parametrize("group", ["model", "data", "trainer"])
def test_model_data_and_trainer_options_build(group, tmp_path):
    for option in options(group):
        cfg = composed(f"{group}={option}", "logger=none", tmp_path=tmp_path)
        check_arguments(check_targets(cfg))
        kwargs = {"logger": False, "enable_progress_bar": False} if group == "trainer" else {}
        assert instantiate(cfg[group], **kwargs) is not None


def test_knobs_are_checked_with_the_key_named(tmp_path):
    for override, key in (("batch_size=0", "batch_size"), ("precision=fp8", "precision"),
                          ("compile=sometimes", "compile"), ("mode=eval", "mode"),
                          ("repeat=0", "repeat"), ("seed=-1", "seed"),
                          ("seed=99999999999999999999", "seed")):
        with pytest.raises(ConfigError, match=rf"^{key}="):
            read_knobs(composed(override, tmp_path=tmp_path))
    knobs = read_knobs(composed("repeat=3", "precision=bf16", "compile=true", tmp_path=tmp_path))
    assert (knobs.repeat, knobs.lightning_precision, knobs.compile) == (3, "bf16-mixed", "default")


@pytest.mark.parametrize(("key", "instead"), [("precision", "precision=bf16"),
                                               ("logger", "logger=mlflow"),
                                               ("profiler", "profiler=[speed,simple]")])
def test_trainer_keys_harness_owns_are_refused(key, instead, tmp_path):
    cfg = composed(f"+trainer.{key}=x", tmp_path=tmp_path)
    with pytest.raises(ConfigError, match=rf"trainer\.{key}=.*{instead.split('=')[0]}"):
        check_trainer_keys(cfg)
    check_trainer_keys(composed(tmp_path=tmp_path))  # the shipped trainer config is fine


def test_every_named_sweep_composes_over_existing_keys(tmp_path):
    for path in sorted(sweeps_dir().glob("*.yaml")):
        cfg = composed(f"sweep={path.stem}", tmp_path=tmp_path)
        assert cfg.hydra.mode is None, f"{path.name} sets hydra.mode"  # see above
        swept = swept_values([], cfg.hydra.sweeper.params)
        assert swept, f"{path.name} sweeps nothing"
        for key in swept:
            assert OmegaConf.select(cfg, key.lstrip("+"), default="<absent>") != "<absent>" or (
                key.startswith("+")), f"{path.name} sweeps {key}, which the config lacks"


def test_launchers_compose(tmp_path):
    for launcher in options("hydra/launcher"):
        cfg = composed(f"hydra/launcher={launcher}", tmp_path=tmp_path)
        assert cfg.hydra.mode is None, launcher
        assert cfg.hydra.launcher._target_.startswith("hydra_plugins.harness_launcher.")


def test_sweep_end_settings_are_checked_against_the_sweep():
    from harness.sweep.table import check_settings

    swept = {"batch_size": ["1", "2"], "precision": ["fp32", "bf16"]}
    check_settings("batch_size", "precision=fp32", swept)
    check_settings(None, None, swept)
    with pytest.raises(ConfigError, match=r"sweep_report\.rows='seed'.*batch_size, precision"):
        check_settings("seed", None, swept)
    with pytest.raises(ConfigError, match=r"sweep_report\.baseline.*fp32, bf16"):
        check_settings(None, "precision=fp8", swept)
    with pytest.raises(ConfigError, match=r"sweep_report\.baseline.*column keys \(precision\)"):
        check_settings(None, "compile=true", swept)


def test_the_logger_flushes_where_the_speed_preset_times_no_step(tmp_path, monkeypatch):
    # The speed preset runs RunShared.between_steps just before it restarts its clock (after a
    # validation, at an epoch's end, after predict): the flush never lands in a timed step.
    from harness.run import build

    monkeypatch.chdir(tmp_path)
    cfg = composed("logger=mlflow", "profiler=[speed]", tmp_path=tmp_path)
    presets, logger = build.build_presets(cfg), build.build_logger(cfg)
    trainer = build.build_trainer(cfg, "32-true", presets, logger, [])
    assert presets.shared.between_steps == [logger.flush_if_due]
    assert trainer.loggers == [logger]


def test_the_one_check_of_settings_loads_pydantic_only_when_it_checks():
    """harness.config.checks and what it raises: autotune's pure core reads its settings
    with them (tests/test_autotune_search.py), and `harness --help` loads nothing heavy: at
    import, the standard library and annotated_types (pydantic's constraints, pure Python)."""
    import ast
    import sys

    for name in ("config/checks.py", "errors.py"):
        tree = ast.parse((Path(__file__).parent.parent / "src" / "harness" / name).read_text())
        lazy = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for n in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for module in ([node.module] if isinstance(node, ast.ImportFrom)
                               else [a.name for a in node.names]):
                    assert module in ("harness.errors", "annotated_types") or module.split(".")[0] in (
                        *sys.stdlib_module_names, "__future__") or (
                        module == "pydantic" and id(node) in lazy), (name, module)


@pytest.mark.parametrize(("task", "says"), [
    # issue 29: on a CPU these ran all four jobs, each then invalid (exit 1)
    (["batch_size=1,2,4,8", "precision=fp16"], "precision='fp16' is not valid"),
    (["batch_size=1,2", "precision=fp32,fp16"], "precision='fp16' is not valid"),
    (["batch_size=1,0"], "batch_size=0 is not valid"),
    (["model.depth=2,two"], "model.depth='two' is not valid"),
])
def test_a_sweeps_values_are_refused_before_any_job(task, says, tmp_path, monkeypatch, capsys):
    from harness.sweep.callbacks import CheckCallback

    monkeypatch.setattr("harness.config.knobs.cuda_here", lambda config: False)  # a CPU here
    fixed = [o for o in task if "," not in o]
    cfg = composed(*fixed, tmp_path=tmp_path)
    with read_write(cfg.hydra), open_dict(cfg):  # the overrides a multirun was started with
        cfg.hydra.overrides.task = task
        cfg.hydra.sweep.dir = str(tmp_path / "multirun")
    with initialize_config_dir(str(CONF), version_base="1.3"), pytest.raises(SystemExit) as stopped:
        CheckCallback().on_multirun_start(cfg)
    assert stopped.value.code == 2
    line = capsys.readouterr().err.strip()
    assert line.count("\n") == 0 and says in line and "Fix:" in line, line
    assert not (tmp_path / "multirun").exists()  # no job, no sweep directory


def test_a_sweeps_good_values_pass_and_autotune_checks_its_own(tmp_path, monkeypatch):
    from harness.sweep.callbacks import _check_values

    monkeypatch.setattr("harness.config.knobs.cuda_here", lambda config: False)
    cfg = composed("precision=fp16", tmp_path=tmp_path)
    with read_write(cfg.hydra), open_dict(cfg):
        cfg.hydra.overrides.task = ["batch_size=1,2", "precision=fp16"]
    with initialize_config_dir(str(CONF), version_base="1.3"), read_write(cfg.hydra), open_dict(cfg):
        with pytest.raises(ConfigError, match="precision"):
            _check_values(cfg)
        cfg.hydra.overrides.task = ["batch_size=1,2", "precision=fp32,bf16"]
        cfg.precision = "fp32"
        _check_values(cfg)
        # an autotune sweep's own checks run here too, before its directory and parent run:
        # a typed fp16 on a CPU is refused as a grid's is (its default space leaves it out)
        cfg.hydra.sweeper._target_ = "hydra_plugins.harness_launcher.autotune_sweeper.AutotuneSweeper"
        cfg.hydra.overrides.task = ["precision=fp16,fp32"]
        with pytest.raises(ConfigError, match="precision='fp16' is not valid"):
            _check_values(cfg)
