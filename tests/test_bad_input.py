"""Bad input: one clear line naming the key and the fix, a non-zero exit, no traceback."""

from __future__ import annotations

import os
import sys

import pytest


def _fails_clearly(done, *needles: str) -> None:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout
    for needle in needles:
        assert needle in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize(
    ("override", "needles"),
    [
        ("precision=fp8", ("precision='fp8'", "bf16-mixed", "Fix:")),
        ("batch_size=0", ("batch_size=0", "positive integer")),
        ("batch_size=-4", ("batch_size=-4", "positive integer")),
        ("compile=sometimes", ("compile='sometimes'", "reduce-overhead")),
        ("mode=eval", ("mode='eval'", "train, inference, both")),
        ("model._target_=no_such_package.Model", ("model._target_", "no_such_package", "Fix:")),
        ("data.generate_on=gpu", ("data.generate_on='gpu'", "device or cpu")),
        ("profiler.speed.warmup_steps=-1", ("profiler.speed.warmup_steps=-1",)),
    ],
)
def test_bad_values_name_the_key(harness, override, needles):
    done = harness(override)
    _fails_clearly(done, *needles)
    assert done.stderr.strip().count("\n") == 0 or "harness: error:" in done.stderr


def test_bad_value_still_leaves_a_failed_result(harness):
    done = harness("batch_size=0")
    _fails_clearly(done)
    result = done.result()
    assert result["status"] == "failed"
    assert "batch_size" in result["reason"]


def test_unknown_group_option_lists_the_choices(harness):
    done = harness("model=resnet9000")
    _fails_clearly(done, "model/resnet9000", "Available options in 'model'", "transformer")


def test_unknown_profiler_preset(harness):
    done = harness("profiler=[speed,nope]")
    _fails_clearly(done, "profiler/nope")


@pytest.mark.slow
def test_compile_without_cxx_compiler_fails_clearly(harness, tmp_path):
    empty = tmp_path / "empty-path"
    empty.mkdir()
    done = harness("compile=true", env={"PATH": str(empty), "CXX": "no-such-compiler"})
    _fails_clearly(done, "C++ compiler", "compile=false")


def test_help_and_cfg_do_not_import_torch(tmp_path):
    import subprocess

    probe = (
        "import sys\n"
        "from harness.cli import main\n"
        "sys.argv = ['harness'] + sys.argv[1:]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'lightning', 'mlflow') if m in sys.modules]\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    for flags in (["--help"], ["--cfg", "job"], ["--info"]):
        out = subprocess.run(
            [sys.executable, "-c", probe, *flags], cwd=tmp_path, capture_output=True, text=True,
            env={**os.environ}, timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert "HEAVY=\n" in out.stdout, (flags, out.stdout[-500:])


def test_missing_target_is_a_config_error(harness):
    done = harness("~model._target_")
    _fails_clearly(done, "model._target_", "Fix:")
    assert done.returncode == 2  # like every other bad config value


def test_out_of_memory_in_predict_step_is_recorded_as_oom(harness):
    done = harness("model._target_=failing_module.FailAtBatchSize", "+model.fail_at=4",
                   "+model.error=oom", "+model.fail_in=predict")
    assert done.returncode == 1
    result = done.result()
    assert result["status"] == "oom" and "batch size 4" in result["reason"]
    assert result["metrics"]["train_examples_per_second"] > 0  # training ran and was kept
