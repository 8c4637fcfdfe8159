"""ProfileSession: harness's presets in a Trainer the user builds, writing the reports/ and
result.json a `harness` job writes. In-process: real Trainers on tiny modules; the example
script and `import harness` run as the user runs them (subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lightning.pytorch as pl
import pytest
from conftest import TESTS_DIR
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from own_loaders import BatchCounter, TrainValOnly
from test_config_compose import composed

from harness import ProfileSession
from harness.errors import ConfigError, HarnessError
from harness.result.store import load_result
from harness.run.job import run_job
from harness.workload.data import SyntheticDataModule
from harness.workload.model import TransformerModule

EXAMPLE = TESTS_DIR.parent / "docs" / "examples" / "own_trainer.py"
QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
         "enable_model_summary": False, "accelerator": "cpu"}


def _trainer(session: ProfileSession, *own: pl.Callback, **options) -> pl.Trainer:
    return pl.Trainer(max_epochs=1, callbacks=[*own, *session.callbacks],
                      profiler=session.profiler, **QUIET, **options)


def test_a_users_trainer_gets_the_presets_and_writes_result_json(tmp_path):
    session = ProfileSession(["speed", "summary"], output_dir=tmp_path / "run",
                             overrides=["profiler.speed.warmup_steps=2"])
    trainer = _trainer(session, BatchCounter(str(tmp_path / "seen")))
    module = TrainValOnly(train_examples=24, val_examples=16, batch_size=4)
    trainer.fit(module)
    trainer.predict(module, dataloaders=module.val_dataloader(), return_predictions=False)
    returned = session.finish(trainer)

    result = load_result(tmp_path / "run")
    assert result == returned and result.status == "ok"
    assert (tmp_path / "seen").read_text() == "6"  # the user's own callback ran beside them
    assert result.model == "own_loaders.TrainValOnly" and result.data is None
    assert result.precision_used == "32-true" and result.device.accelerator == "cpu"
    assert result.versions["lightning"] == pl.__version__
    assert result.knobs == {"batch_size": 4, "precision": "32-true",
                            "lightning_precision": "32-true", "mode": "both"}
    assert result.overrides == ["profiler=[speed,summary]", "profiler.speed.warmup_steps=2"]
    # 6 training, 4 validation and 4 inference steps, 2 of warm-up each.
    assert result.metrics["train_measured_steps"] == 4
    assert result.metrics["inference_measured_steps"] == 2
    assert result.metrics["summary_total_params"] == 32 * 2 + 2
    assert result.reports == ["reports/speed.csv", "reports/speed.json",
                              "reports/speed_steps.csv", "reports/summary.json",
                              "reports/summary.txt"]
    assert session.finish(trainer) is returned  # once: a second call writes nothing new


def test_the_session_writes_what_the_command_writes(tmp_path):
    """The built-in workload through run_job and through a session: same report files, same
    result.json fields and figures' names."""
    overrides = ("profiler=[speed,memory,summary]", "logger=none", "mode=train",
                 "trainer.enable_progress_bar=false", "data.train_batches=8",
                 "data.val_batches=2", "data.seq_len=8", "data.dim=16", "batch_size=4",
                 "profiler.speed.warmup_steps=2")
    cfg = composed(*overrides, tmp_path=tmp_path / "job")
    job = run_job(cfg, tmp_path / "job", list(overrides))

    session = ProfileSession(["speed", "memory", "summary"], output_dir=tmp_path / "session",
                             overrides=["profiler.speed.warmup_steps=2"])
    data = SyntheticDataModule(batch_size=4, seq_len=8, dim=16, train_batches=8, val_batches=2)
    _trainer(session).fit(TransformerModule(dim=16), datamodule=data)
    mine = session.finish()  # the Trainer the callbacks ran in

    assert job.status == mine.status == "ok"
    assert mine.reports == job.reports
    assert set(mine.metrics) == set(job.metrics)
    assert set(mine.as_json()) == set(job.as_json())
    assert mine.model == "harness.workload.model.TransformerModule" == job.model


def test_a_with_block_finishes_and_records_the_scripts_error(tmp_path):
    with ProfileSession("speed", output_dir=tmp_path / "ok") as session:
        _trainer(session).fit(TrainValOnly())
    assert load_result(tmp_path / "ok").status == "ok"

    class Boom(TrainValOnly):
        def training_step(self, batch, batch_idx):
            if batch_idx == 3:
                raise ValueError("the loss went to NaN")
            return super().training_step(batch, batch_idx)

    with (pytest.raises(ValueError, match="the loss went to NaN"),
          ProfileSession("speed", output_dir=tmp_path / "boom") as session):
        _trainer(session).fit(Boom())
    result = load_result(tmp_path / "boom")
    assert result.status == "failed"
    assert result.reason == "ValueError: the loss went to NaN"
    assert "the loss went to NaN" in (tmp_path / "boom" / result.error_log).read_text()
    assert result.precision_used == "32-true"  # what ran is still recorded


def test_callbacks_or_profiler_left_out_of_the_trainer_are_said(tmp_path):
    session = ProfileSession("speed", output_dir=tmp_path / "a")
    trainer = pl.Trainer(max_steps=1, **QUIET)
    trainer.fit(TrainValOnly())
    with pytest.raises(HarnessError, match=r"the session's callbacks never ran in a Trainer"):
        session.finish(trainer)
    assert load_result(tmp_path / "a").status == "failed"

    session = ProfileSession(["memory"], output_dir=tmp_path / "b")
    trainer = pl.Trainer(max_steps=1, callbacks=session.callbacks, **QUIET)
    trainer.fit(TrainValOnly())
    with pytest.raises(HarnessError, match=r"another profiler than the session's \(MemoryPreset\)"):
        session.finish(trainer)


def test_presets_and_options_are_checked_like_the_commands(tmp_path):
    with pytest.raises(ConfigError, match=r"^presets='nsys' is not valid: .* re-runs the whole"):
        ProfileSession(["speed", "nsys"], output_dir=tmp_path)
    with pytest.raises(HarnessError, match=r"^Could not find 'profiler/sped'.* Fix: profiler=speed"):
        ProfileSession(["sped"], output_dir=tmp_path)


@pytest.mark.parametrize(("presets", "bad", "says"), [
    (["speed"], "profiler.speed.warmup_steps=-1", "expected a value >= 0."
     " Fix: profiler.speed.warmup_steps=5"),
    (["speed", "system"], "profiler.system.interval_s=0", "expected a value > 0."
     " Fix: profiler.system.interval_s=1"),
])
def test_a_bad_preset_argument_is_refused_before_the_session_builds(presets, bad, says, tmp_path,
                                                                     monkeypatch):
    """The job's one argument check, before any preset is built (their constructors trust it)."""
    from harness.run import build

    built = []
    monkeypatch.setattr(build, "build_presets", lambda cfg: built.append(cfg))
    with pytest.raises(ConfigError) as refused:
        ProfileSession(presets, output_dir=tmp_path, overrides=[bad])
    assert str(refused.value) == f"{bad} is not valid: {says}" and not built


def test_inside_a_hydra_app_the_apps_hydra_is_left_as_it_was(tmp_path):
    """A script that is itself a Hydra app (lightning-hydra-template's train.py)."""
    app_cfg = composed("logger=none", tmp_path=tmp_path / "app")
    with initialize_config_dir(str(TESTS_DIR / "user_conf"), version_base="1.3"):
        app_hydra = GlobalHydra.instance().hydra
        session = ProfileSession(["memory"], output_dir=tmp_path / "session",
                                 overrides=["profiler.memory.extra_plots=true"])
        assert GlobalHydra.instance().hydra is app_hydra
    assert HydraConfig.get().runtime.output_dir == app_cfg.hydra.runtime.output_dir
    # The preset's ${hydra:runtime.output_dir} was the session's directory.
    assert Path(session.profiler.trace_dir) == tmp_path / "session" / "reports" / "traces"


@pytest.mark.slow
def test_the_documented_example_script_runs(tmp_path):
    out = subprocess.run([sys.executable, str(EXAMPLE), "--output-dir", "runs/try1"],
                         capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "COLUMNS": "300"}, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    run = tmp_path / "runs" / "try1"
    result = json.loads((run / "result.json").read_text())
    assert result["status"] == "ok" and result["model"] == "__main__.Classifier"
    assert {"reports/memory.json", "reports/speed.json", "reports/summary.txt"} <= set(
        result["reports"])
    # 512 examples in batches of 16: 32 steps, 3 of warm-up.
    assert result["metrics"]["train_measured_steps"] == 29
    assert result["metrics"]["inference_measured_steps"] == 29
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("ok: ") and last.endswith(f"reports in {run}")
    assert "harness: warning" not in out.stderr and "Exception ignored" not in out.stderr
    assert f"result: {run / 'result.json'}" in out.stdout  # harness's own lines are shown


# A script as the docs' first draft had it: the fit runs, then the user's own call raises
# (Lightning's predict without a predict_dataloader) before `finish`; or `finish` is forgotten.
# Its first lines say what `import harness` loads (nothing heavy), and what the session does.
_SCRIPT = """
import sys
import harness

print("import harness loads", sorted(m for m in ("torch", "lightning", "hydra") if m in sys.modules))
ProfileSession = harness.ProfileSession
print("the session loads lightning:", "lightning" in sys.modules)

import lightning.pytorch as pl
from own_loaders import TrainValOnly

session = ProfileSession(["speed"], output_dir="run", overrides=["profiler.speed.warmup_steps=2"])
trainer = pl.Trainer(max_epochs=1, callbacks=session.callbacks, profiler=session.profiler,
                     logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, accelerator="cpu")
module = TrainValOnly(train_examples=24, val_examples=16, batch_size=4)
trainer.fit(module)
if sys.argv[1] == "raise":
    raise RuntimeError("predict_dataloader must be implemented")
"""


@pytest.mark.parametrize("ending", ["raise", "forget"])
def test_a_script_that_stops_before_finish_still_gets_result_json(tmp_path, ending):
    (tmp_path / "script.py").write_text(_SCRIPT)
    out = subprocess.run([sys.executable, "script.py", ending], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             [str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])})
    # `import harness` stays cheap; the session loads on use
    assert out.stdout.splitlines()[:2] == ["import harness loads []",
                                           "the session loads lightning: True"], out.stderr[-2000:]
    result = load_result(tmp_path / "run")
    assert result.metrics["train_measured_steps"] == 4  # what the fit measured is kept
    if ending == "raise":
        assert out.returncode == 1
        assert out.stderr.count("Traceback (most recent call last)") == 1  # Python's own
        assert result.status == "failed"
        assert result.reason == "RuntimeError: predict_dataloader must be implemented"
        assert "session.finish()" in out.stderr.strip().splitlines()[-1]
    else:
        assert out.returncode == 0, out.stderr[-3000:]
        assert result.status == "ok"
        assert "without session.finish()" in out.stderr
