"""Bad input: one clear line naming the key and the fix, a non-zero exit, no traceback.

The bad values themselves (knobs, targets, constructor arguments, Hydra's own errors) are
cases of the corpus in tests/test_corpus.py, checked in-process; here what needs a process.
"""

from __future__ import annotations

import os
import sys

import pytest


def _fails_clearly(done, *needles: str) -> None:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout
    for needle in needles:
        assert needle in done.stderr, done.stderr[-2000:]


def test_bad_value_still_leaves_a_failed_result(harness):
    done = harness("batch_size=0")
    _fails_clearly(done)
    result = done.result()
    assert result["status"] == "failed"
    assert "batch_size" in result["reason"]


@pytest.mark.slow
def test_compile_without_cxx_compiler_fails_clearly(harness, tmp_path):
    empty = tmp_path / "empty-path"
    empty.mkdir()
    done = harness("compile=true", env={"PATH": str(empty), "CXX": "no-such-compiler"})
    _fails_clearly(done, "C++ compiler", "compile=false")


@pytest.mark.parametrize(("preset", "bad", "fix"), [
    ("speed", "profiler.speed.warmup_steps=-1", "Fix: profiler.speed.warmup_steps=5"),
    ("pyspy", "profiler.pyspy.rate=0", "Fix: profiler.pyspy.rate=100"),
])
def test_a_bad_preset_argument_is_refused_before_the_job_runs(harness, preset, bad, fix):
    """The constructors trust their arguments: the one check of the job refuses the value
    from the preset's hint, in one line, exit 2; the job measures nothing."""
    done = harness(f"profiler=[{preset}]", bad)
    _fails_clearly(done, f"{bad} is not valid: expected a value >= ", fix)
    assert done.returncode == 2
    assert [line for line in done.stderr.splitlines() if bad.split("=")[0] in line] == [
        f"harness: error: {bad} is not valid: expected a value >= {1 if 'rate' in bad else 0}."
        f" {fix}"], done.stderr[-2000:]
    result = done.result()
    assert result["status"] == "failed" and bad.split("=")[0] in result["reason"]
    # no figures, and the job never started measuring (run.isolation.start_clean records this)
    assert not result.get("metrics") and not result.get("reports") and "isolation" not in result
    assert not any((done.run_dir() / "reports").glob("*"))  # no preset was built


def test_help_and_cfg_do_not_import_torch(tmp_path):
    import subprocess

    probe = (
        "import sys\n"
        "from harness.cli import main\n"
        "sys.argv = ['harness'] + sys.argv[1:]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'lightning', 'mlflow', 'pydantic') if m in sys.modules]\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    for flags in (["--help"], ["--cfg", "job"], ["--info"]):
        out = subprocess.run(
            [sys.executable, "-c", probe, *flags], cwd=tmp_path, capture_output=True, text=True,
            env={**os.environ}, timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert "HEAVY=\n" in out.stdout, (flags, out.stdout[-500:])


def test_out_of_memory_in_predict_step_is_recorded_as_oom(harness):
    done = harness("model._target_=failing_module.FailAtBatchSize", "+model.fail_at=4",
                   "+model.error=oom", "+model.fail_in=predict")
    assert done.returncode == 1
    result = done.result()
    assert result["status"] == "oom" and "batch size 4" in result["reason"]
    assert result["metrics"]["train_examples_per_second"] > 0  # training ran and was kept


def test_a_typo_in_a_key_of_the_users_model_is_matched_against_the_users_model(harness, tmp_path):
    """With -cd, the hint comes from the config the command line composes (the user's model,
    chosen by model=mine), not from the built-in transformer's keys (model.num_heads)."""
    conf = tmp_path / "my_conf" / "model"
    conf.mkdir(parents=True)
    (conf / "mine.yaml").write_text("_target_: user_workload.TinyClassifier\nfeatures: 16\n"
                                    "num_labels: 3\n")
    for how in (["-cd", str(conf.parent)], [f"--config-dir={conf.parent}"]):
        done = harness(*how, "model=mine", "model.num_label=5", fast=False)
        _fails_clearly(done, "model.num_label is not a key of the config",
                       "Did you mean model.num_labels? Fix: model.num_labels=...")
        assert done.returncode == 2 and "num_heads" not in done.stderr


def test_a_config_dir_that_does_not_exist_says_what_it_must_be(harness):
    done = harness("-cd", "my_conf", "model=tiny", fast=False)
    assert done.returncode == 2
    _fails_clearly(done, "my_conf does not exist. Fix: pass the folder that holds")


def test_an_accelerator_this_machine_lacks_is_refused_with_a_fix(harness):
    import torch

    if torch.cuda.is_available() or torch.backends.mps.is_available():
        pytest.skip("this machine has a GPU: the CPU-only case cannot be planted")
    done = harness("trainer.accelerator=gpu")
    assert done.returncode == 2
    _fails_clearly(done, "trainer.accelerator='gpu' is not valid",
                   "Fix: trainer.accelerator=auto (or cpu)")


def test_a_class_missing_from_a_module_that_imports_names_the_module_and_its_classes(
        harness, tmp_path):
    """`mypkg.workload.Net` where mypkg/workload.py imports but defines no Net: the error says
    the module has no 'Net' and lists what it defines, not "'mypkg.workload' is not a package";
    a near miss gets the class it meant."""
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "workload.py").write_text("class TinyClassifier:\n    pass\n\n\n"
                                         "class TinyData:\n    pass\n")
    done = harness("model._target_=mypkg.workload.Net", fast=False)
    _fails_clearly(done, "mypkg.workload (", "has no 'Net'",
                   "Fix: point model._target_ at a class mypkg.workload defines"
                   " (TinyClassifier, TinyData)")
    assert done.returncode == 2 and "is not a package" not in done.stderr
    near = harness("model._target_=mypkg.workload.TinyClasifier", fast=False)
    _fails_clearly(near, "Fix: model._target_=mypkg.workload.TinyClassifier")
