"""The suite's forked `harness` runs (tests/forked_harness.py) stand for the console script:
they start with the heavy libraries already loaded, and otherwise exit, print and read their
environment and working directory as the real command does."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import forked_harness
import pytest
from conftest import harness_env, run_harness


def _write_loaded(path: str) -> None:
    """Runs in a process forked from the server: what it holds before any run imports."""
    Path(path).write_text(json.dumps({m: m in sys.modules for m in (
        "torch", "lightning.pytorch", "hydra", "harness.cli", "mlflow", "pandas")}))


PROCESS_PROBE = """
import json, multiprocessing, os, sys
from lightning.pytorch import Callback

class Probe(Callback):
    def on_train_start(self, trainer, pl_module):
        with open(os.path.join(os.environ["PROBE_OUT"], "process.json"), "w") as out:
            json.dump({"start_method": multiprocessing.get_start_method(),
                       "name": multiprocessing.current_process().name,
                       "parent": multiprocessing.parent_process() is None}, out)
"""


def test_a_forked_run_starts_with_torch_loaded_and_without_mlflow(tmp_path):
    # Had the server failed to import its preload (silently, as multiprocessing does), every
    # run would pay the imports again; MLflow and pandas are never in a job's process (#22).
    out = tmp_path / "loaded.json"
    forked_harness._start_server()
    child = forked_harness._context.Process(target=_write_loaded, args=(str(out),))
    child.start()
    child.join(120)
    assert child.exitcode == 0
    assert json.loads(out.read_text()) == {"torch": True, "lightning.pytorch": True,
                                           "hydra": True, "harness.cli": True,
                                           "mlflow": False, "pandas": False}


def test_a_forked_run_exits_and_prints_as_the_console_script(tmp_path):
    """A bad override: the same exit status and the same one line on stderr either way."""
    for name in ("forked", "fresh"):
        (tmp_path / name).mkdir()
    forked = run_harness(tmp_path / "forked", "+bacth_size=4")
    fresh = run_harness(tmp_path / "fresh", "+bacth_size=4", fresh=True)
    assert forked.returncode == fresh.returncode != 0
    assert forked.stderr == fresh.stderr and forked.stdout == fresh.stdout


PROBE = """
import json, os, sys
from lightning.pytorch import Callback

class Probe(Callback):
    def on_train_start(self, trainer, pl_module):
        with open(os.path.join(os.environ["PROBE_OUT"], "seen.json"), "w") as out:
            json.dump({"cwd": os.getcwd(), "var": os.environ.get("HARNESS_TEST_PROBE"),
                       "argv0": sys.argv[0]}, out)
"""


def test_a_forked_run_has_its_own_environment_import_path_and_working_directory(tmp_path):
    # The callback's module is importable only through the PYTHONPATH this run is given.
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "forked_probe.py").write_text(PROBE)
    cwd = tmp_path / "work"
    cwd.mkdir()
    pythonpath = harness_env()["PYTHONPATH"]
    done = run_harness(cwd, "mode=train", "profiler=[speed]",
                       "+trainer.callbacks=[{_target_: forked_probe.Probe}]",
                       env={"HARNESS_TEST_PROBE": "seen", "PROBE_OUT": str(tmp_path),
                            "PYTHONPATH": f"{extra}:{pythonpath}"})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads((tmp_path / "seen.json").read_text())
    # Hydra moves a job into its output directory only when hydra.job.chdir is set
    assert Path(seen["cwd"]) == cwd and seen["var"] == "seen"
    assert Path(seen["argv0"]).name == "harness"
    assert done.run_dir().is_relative_to(cwd)


def test_a_forked_run_starts_its_own_processes_as_the_console_script_would(tmp_path):
    """A run is the main process and its workers fork from it (Linux's default), as in the
    real command: not through the suite's fork server, whose preload a worker would pay."""
    (tmp_path / "forked_process_probe.py").write_text(PROCESS_PROBE)
    seen = {}
    for name in ("forked", "fresh"):
        cwd = tmp_path / name
        cwd.mkdir()
        done = run_harness(cwd, "mode=train", "profiler=[speed]",
                           "+trainer.callbacks=[{_target_: forked_process_probe.Probe}]",
                           env={"PROBE_OUT": str(cwd),
                                "PYTHONPATH": f"{tmp_path}:{harness_env()['PYTHONPATH']}"},
                           fresh=name == "fresh")
        assert done.returncode == 0, done.stderr[-3000:]
        seen[name] = json.loads((cwd / "process.json").read_text())
    assert seen["forked"] == seen["fresh"] == {"start_method": "fork", "name": "MainProcess",
                                               "parent": True}


def test_what_a_process_reads_at_its_start_sends_the_run_to_the_real_command(tmp_path):
    """glibc reads MALLOC_* and the OpenMP runtime OMP_* when the process starts: in a forked
    run they would keep the server's values, so such an environment runs the real command."""
    assert forked_harness.read_at_start(harness_env()) == []
    env = harness_env({"MALLOC_MMAP_THRESHOLD_": "131072"})
    assert forked_harness.read_at_start(env) == ["MALLOC_MMAP_THRESHOLD_"]
    without = {k: v for k, v in harness_env().items() if k != "OMP_NUM_THREADS"}
    assert forked_harness.read_at_start(without) == ["OMP_NUM_THREADS"]
    with pytest.raises(ValueError, match="MALLOC_MMAP_THRESHOLD_ would keep the fork server's"):
        forked_harness.start([sys.executable], tmp_path, env)
