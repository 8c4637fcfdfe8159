"""What reaches the terminal and what only the log keeps: library noise, a sweep's progress
lines, and the jobs' own output (harness.terminal, harness.sweep.progress)."""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path

import pytest
from conftest import run_harness, sweep_dir
from noisy_module import INFO_TEXT, WARNING_TEXT
from omegaconf import OmegaConf
from sweep_files import metrics, write_job

from harness import terminal
from harness.errors import ConfigError
from harness.measured import duration
from harness.sweep.callbacks import ProgressCallback
from harness.sweep.progress import Progress, SweepInProgress, current

NOISY = "model._target_=noisy_module.Noisy"
SMALL = ("data.train_batches=8", "data.val_batches=2", "data.predict_batches=6",
         "profiler.speed.warmup_steps=2")


@pytest.fixture
def logged(tmp_path, monkeypatch):
    """The root logger as in a job: the console handler, a log file and the sweep log, with
    Python warnings routed into logging (terminal.quiet_libraries). Yields the log file."""
    monkeypatch.delenv(terminal.VERBOSE_ENV, raising=False)
    monkeypatch.setenv("MLFLOW_CONFIGURE_LOGGING", "false")
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    log_file = tmp_path / "cli.log"
    file_handler = logging.FileHandler(log_file)
    file_handler.setFormatter(logging.Formatter(terminal.FILE_FORMAT))
    root.handlers = [terminal.ConsoleHandler(), file_handler, terminal.SweepLogHandler()]
    root.setLevel(logging.INFO)
    terminal.quiet_libraries()
    terminal.hidden_warnings(reset=True)
    yield log_file
    logging.captureWarnings(False)
    file_handler.close()
    root.handlers, root.level = saved, level
    terminal.follow(None)


def _noise() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("a library's hint", UserWarning, stacklevel=1)
    # (names of no real library: Lightning and MLflow may have handlers of their own here)
    logging.getLogger("a_library").info("Tip: try litlogger")
    logging.getLogger("a_library.db").info("Creating initial database tables...")
    logging.getLogger("hydra._internal.core_plugins.basic_launcher").info("Launching 2 jobs locally")
    logging.getLogger("harness.profilers.speed").info("speed: a note of harness's own")


def test_library_noise_stays_in_the_log_and_verbose_prints_it(logged, capsys, monkeypatch):
    # captureWarnings must be on while warnings.warn runs: catch_warnings restores showwarning
    logging.captureWarnings(True)
    _noise()
    out = capsys.readouterr()
    assert out.err.strip() == "harness: speed: a note of harness's own"
    assert out.out == ""
    text = logged.read_text()
    for needle in ("[py.warnings][WARNING]", "a library's hint", "Tip: try litlogger",
                   "Creating initial database tables", "Launching 2 jobs locally",
                   "a note of harness's own"):
        assert needle in text, needle
    assert "\n\n" not in text  # a warning's text ends in a newline: stripped, no blank line
    assert terminal.hidden_warnings() == 1

    monkeypatch.setenv(terminal.VERBOSE_ENV, "1")
    _noise()
    shown = capsys.readouterr()
    for needle in ("a library's hint", "Tip: try litlogger", "Creating initial database",
                   "Launching 2 jobs locally"):
        assert needle in shown.out + shown.err, needle


def test_a_running_sweep_job_prints_only_its_warnings_once_and_the_sweep_log_has_them(
        logged, tmp_path, capsys):
    sweep_log = tmp_path / "sweep.log"
    sweep = SweepInProgress(tmp_path, log_path=sweep_log)
    terminal.follow(sweep)
    logging.getLogger("harness.sweep.progress").info("job 1/2 batch_size=2: running")
    sweep.job_running = True
    for _ in range(2):  # two jobs say the same
        logging.getLogger("harness.profilers.speed").info("speed: thin")
        logging.getLogger("harness.profilers.speed").warning("speed: all steps were warm-up")
        terminal.show("a job's table")
        logging.getLogger("harness.cli.job").error("failed: told by the job's own line")
    sweep.job_running = False
    logging.getLogger("harness.sweep.progress").info("job 1/2 batch_size=2: ok")
    err = capsys.readouterr().err.splitlines()
    assert err == ["harness: job 1/2 batch_size=2: running",
                   "harness: warning: speed: all steps were warm-up",
                   "harness: job 1/2 batch_size=2: ok"]
    # sweep.log: exactly what the terminal showed; the job's log file: everything
    in_sweep_log = [line.split(" - ", 1)[1] for line in sweep_log.read_text().splitlines()]
    assert in_sweep_log == [line.removeprefix("harness: ").removeprefix("warning: ")
                            for line in err]
    job_log = logged.read_text()
    assert job_log.count("a job's table") == 2 and job_log.count("told by the job's own") == 2


def test_progress_counts_jobs_and_estimates_what_is_left(tmp_path, caplog):
    now = [100.0]
    progress = Progress(total=3, clock=lambda: now[0])
    ok = write_job(tmp_path / "0", ["batch_size=2"], values=metrics(20.0, 100.0))
    failed = write_job(tmp_path / "1", ["batch_size=4"], status="oom",
                       reason="out of memory: CUDA out of memory")
    with caplog.at_level(logging.INFO, logger="harness.sweep.progress"):
        progress.starting(1, "batch_size=2")
        now[0] += 10
        progress.finished(1, "batch_size=2", ok, 10.0)
        progress.starting(2, "batch_size=4")
        now[0] += 30
        progress.finished(2, "batch_size=4", failed, 30.0)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("INFO", "job 1/3 batch_size=2: running (elapsed 0.0 s)"),
        ("INFO", "job 1/3 batch_size=2: ok: train 20.0 ex/s (between steps 25%), inference 100.0"
                 " ex/s (between steps 10%) [10.0 s; elapsed 10.0 s, ETA ~20.0 s]"),
        ("INFO", "job 2/3 batch_size=4: running (elapsed 10.0 s, ETA ~20.0 s)"),
        ("ERROR", "job 2/3 batch_size=4: oom: out of memory: CUDA out of memory"
                  f" (see {failed}/) [30.0 s; elapsed 40.0 s, ETA ~20.0 s]"),  # mean 20 s, 1 left
    ]
    assert progress.summary() == "2 job(s) in 40.0 s (1 ok, 1 oom)"
    assert [duration(s) for s in (9.44, 65, 7384)] == ["9.4 s", "1m05s", "2h03m"]


def test_a_job_line_says_contended_or_noisy_after_the_figures_of_that_phase(tmp_path):
    from harness.sweep.progress import job_outcome

    job = write_job(tmp_path / "0", ["batch_size=2"], values=metrics(20.0, 100.0),
                    flags=["contended:train", "noisy:inference", "thin:train"])
    assert job_outcome(job) == ("ok", "ok: train 20.0 ex/s (between steps 25%) contended,"
                                      " inference 100.0 ex/s (between steps 10%) noisy")
    quiet = write_job(tmp_path / "1", ["batch_size=2"], values=metrics(20.0, 100.0))
    assert "contended" not in job_outcome(quiet)[1] and "noisy" not in job_outcome(quiet)[1]


def _job_config(sweep: Path, num: int, overrides: list[str], verbose: object = False):
    return OmegaConf.create({
        "verbose": verbose,
        "hydra": {"sweep": {"dir": str(sweep)}, "sweeper": {"params": None},
                  "overrides": {"task": overrides},
                  "job": {"num": num, "name": "cli"},
                  "runtime": {"output_dir": str(sweep / str(num))}},
    })


def test_the_callback_names_jobs_by_what_differs_and_keeps_their_output_off_the_terminal(
        logged, tmp_path, capsys):
    sweep = tmp_path / "multirun"
    callback = ProgressCallback()
    callback.on_multirun_start(_job_config(sweep, 0, ["data.dim=32", "batch_size=2,4",
                                                       "precision=fp32,bf16"]))
    current().announce_jobs(2)  # as the sweeper does, once it has the grid
    for num, (bs, precision) in enumerate((("2", "bf16"), ("4", "fp32"))):
        overrides = ["data.dim=32", f"batch_size={bs}", f"precision={precision}"]
        config = _job_config(sweep, num, overrides)
        callback.on_job_start(config)
        logging.getLogger("harness.output").info("the job's Speed table")
        write_job(sweep / str(num), overrides, values=metrics(10.0 * (num + 1), 50.0))
        callback.on_job_end(config, job_return=None)
    callback.on_multirun_end(_job_config(sweep, 0, []))
    err = capsys.readouterr().err
    assert "job 1/2 batch_size=2,bf16: running" in err
    assert "job 2/2 batch_size=4,fp32: ok: train 20.0 ex/s (between steps 25%)" in err
    assert re.search(r"sweep done: 2 job\(s\) in [\d.]+ s \(2 ok\)", err)
    assert "Speed table" not in err and "Speed table" in logged.read_text()
    sweep_log = (sweep / "sweep.log").read_text()
    assert "job 2/2 batch_size=4,fp32: ok" in sweep_log and "sweep done" in sweep_log
    assert "Speed table" not in sweep_log
    with pytest.raises(ConfigError, match="verbose"):
        callback.on_run_start(_job_config(sweep, 0, [], verbose="maybe"))


@pytest.mark.slow
def test_a_sweep_prints_one_line_per_job_and_its_logs_hold_the_rest(tmp_path):
    done = run_harness(tmp_path, "hydra.mode=MULTIRUN", *SMALL, NOISY, "batch_size=2,4",
                       "precision=fp32,bf16")
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout + done.stderr
    for number in range(1, 5):
        assert f"job {number}/4 " in done.stderr
    assert "job 4/4 batch_size=4,bf16: ok: train " in done.stderr
    assert "sweep done: 4 job(s)" in done.stderr
    for noise in (WARNING_TEXT, INFO_TEXT, "Launching 4 jobs", "#0 : ", "Speed (warm-up",
                  "result: "):
        assert noise not in printed, noise
    root = sweep_dir(tmp_path)
    for job in range(4):
        log = (root / str(job) / "cli.log").read_text()
        for needle in (WARNING_TEXT, INFO_TEXT, "Speed (warm-up", "result: "):
            assert needle in log, (job, needle)
    sweep_log = (root / "sweep.log").read_text()
    for line in done.stderr.splitlines():
        assert line.removeprefix("harness: ").removeprefix("warning: ") in sweep_log, line


@pytest.mark.slow
def test_a_single_run_is_short_and_its_log_holds_every_word_it_printed(tmp_path):
    done = run_harness(tmp_path, *SMALL, NOISY, "logger=mlflow")
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout + done.stderr
    for noise in (WARNING_TEXT, INFO_TEXT, "Creating initial MLflow", "GPU available"):
        assert noise not in printed, noise
    assert re.search(r"\d+ Python warning\(s\) \(from libraries\) are in .*cli.log only", printed)
    log = next(tmp_path.glob("outputs/*/*/cli.log")).read_text()
    for needle in (WARNING_TEXT, INFO_TEXT, "Creating initial MLflow", "GPU available"):
        assert needle in log, needle
    # Tables wrap at the terminal's width and at 120 columns in the log: compare words.
    words = set(re.findall(r"[\w./:%-]+", log))
    said = re.sub(r"^harness: (warning: )?", "", printed, flags=re.MULTILINE)
    missing = set(re.findall(r"[\w./:%-]+", said)) - words
    assert not missing, missing
    assert len(printed.splitlines()) < 25, printed

    verbose = run_harness(tmp_path, *SMALL, NOISY, "mode=train", "verbose=true")
    assert verbose.returncode == 0, verbose.stderr[-3000:]
    assert WARNING_TEXT in verbose.stdout and INFO_TEXT in verbose.stdout


def test_an_interruption_mid_sweep_reaches_the_terminal(logged, tmp_path, capsys):
    """A sweep job's lines are left to its log, but not the line saying it was interrupted:
    the interruption ends the whole sweep, and no job line will say it."""
    sweep = SweepInProgress(tmp_path, log_path=tmp_path / "sweep.log")
    terminal.follow(sweep)
    sweep.job_running = True
    logging.getLogger("harness.profilers.speed").info("speed: thin")
    logging.getLogger("harness.launch.job_scope").info("interrupted by SIGTERM (in %s)", "x/1")
    assert capsys.readouterr().err.splitlines() == ["harness: interrupted by SIGTERM (in x/1)"]


_NATIVE = '''
import os
import sys

from harness.workload.model import TransformerModule


class Native(TransformerModule):
    """Writes to the process's stderr past logging, as torch's C++ side does."""

    def on_train_start(self):
        os.write(2, b"USDT:2026-11-25 21:08:41 2422:2422 Handler.cpp:52] profiler_start\\n")
        os.write(2, b"[W1125 21:08:41.031428471 CPUAllocator.cpp:245] Memory block\\n")
        print("a library's own print to stderr", file=sys.stderr, flush=True)
'''


def test_what_libraries_write_to_stderr_themselves_goes_to_the_log(tmp_path):
    (tmp_path / "native_noise.py").write_text(_NATIVE)
    done = run_harness(tmp_path, *SMALL, "model._target_=native_noise.Native", "mode=train")
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout + done.stderr
    log = next(tmp_path.glob("outputs/*/*/cli.log")).read_text()
    for line in ("USDT:2026-11-25", "[W1125 21:08:41", "a library's own print to stderr"):
        assert line not in printed and line in log, line
    assert "harness: speed: " in done.stderr  # harness's own lines still reach the terminal
