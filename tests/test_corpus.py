"""The bad-input and fault corpus of issue 13, in-process: each case is a command line or a
fault, the exit status it must end with, the key or path its one line must name, and the fix
the line must give.

Nothing here starts a process: the config is composed with Hydra's compose API, the job's
own checks run on it (harness.run.job.check_config, the same call a run makes; nothing is
built), and the exception is turned into the status and line the CLI prints by
harness.cli_errors.describe. tests/test_corpus_runs.py holds the
cases where the process itself (exit status, stderr, files on disk) is the point.
"""

from __future__ import annotations

import errno
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import pytest
from omegaconf import OmegaConf, open_dict, read_write
from test_config_compose import composed

from harness.cli_errors import describe
from harness.config.composed import check_resolves
from harness.errors import HarnessError
from harness.run.job import check_config


@dataclass(frozen=True)
class Case:
    what: tuple[str, ...]  # the overrides of `harness <what>`
    code: int  # exit status
    names: str  # the key or path the line names ("" when the run goes ahead)
    fix: str = "Fix:"  # what the line must say about the fix

    def __str__(self) -> str:
        return " ".join(self.what) or "(defaults)"


CONFIG = [
    # knobs
    Case(("precision=fp8",), 2, "precision", "precision=bf16"),
    Case(("batch_size=0",), 2, "batch_size", "batch_size=32"),
    Case(("batch_size=-4",), 2, "batch_size", "expected a value >= 1. Fix: batch_size=32"),
    Case(("batch_size=2.5",), 2, "batch_size", "expected a valid integer. Fix: batch_size=32"),
    Case(("batch_size=true",), 2, "batch_size", "expected a valid integer"),  # a bool is no int
    Case(("compile=sometimes",), 2, "compile", "reduce-overhead"),
    Case(("mode=eval",), 2, "mode", "mode=both"),
    Case(("seed=-1",), 2, "seed", "seed=0"),
    Case(("seed=99999999999999999999",), 2, "seed", "seed=0"),
    Case(("repeat=0",), 2, "repeat", "repeat=3"),
    Case(("check_knobs=maybe",), 2, "check_knobs", "check_knobs=true"),
    Case(("compile_module=''",), 2, "compile_module", "compile_module=net"),
    # interpolations that do not resolve
    Case(("batch_size=${nope}",), 2, "batch_size", "a key that exists"),
    Case(("model.lr=${model.nope}",), 2, "model.lr", "a key that exists"),
    Case(("data.dim=${oc.env:HARNESS_NO_SUCH_VARIABLE}",), 2, "data.dim", "a key that exists"),
    # targets: importable, and Lightning's kinds, found on the class before anything is built
    Case(("model._target_=no_such_package.Model",), 2, "model._target_", "PYTHONPATH"),
    Case(("model._target_=torch.nn.Linear",), 2, "model._target_", "LightningModule"),
    Case(("data._target_=collections.OrderedDict",), 2, "data._target_", "LightningDataModule"),
    Case(("~model._target_",), 2, "model._target_", "model._target_=package.module.Class"),
    Case(("profiler.speed._target_=harness.nope.Preset",), 2, "profiler.speed._target_",
         "PYTHONPATH"),
    # arguments against the constructors' type hints (pydantic)
    Case(("model.lr=abc",), 2, "model.lr", "model.lr=0.001"),
    Case(("model.depth=two",), 2, "model.depth", "model.depth=2"),
    Case(("model.dropout=[0.1]",), 2, "model.dropout", "model.dropout=0"),  # a list is checked too
    Case(("data.dim=x",), 2, "data.dim", "data.dim=128"),
    Case(("data.train_batches=many",), 2, "data.train_batches", "data.train_batches="),
    Case(("trainer.max_epochs=abc",), 2, "trainer.max_epochs", "<int or None>"),
    Case(("trainer.limit_train_batches=lots",), 2, "trainer.limit_train_batches", "Fix:"),
    Case(("trainer.enable_progress_bar=sometimes",), 2, "trainer.enable_progress_bar", "Fix:"),
    Case(("profiler.speed.log_rates=maybe",), 2, "profiler.speed.log_rates",
         "profiler.speed.log_rates=true"),
    Case(("profiler.speed.min_measured_steps=ten",), 2, "profiler.speed.min_measured_steps",
         "=10"),
    Case(("logger.flush_every_s=abc",), 2, "logger.flush_every_s", "logger.flush_every_s=10"),
    Case(("+model.lrr=0.1",), 2, "model.lrr", "model.lr=0.1"),
    Case(("+trainer.max_epoch=3",), 2, "trainer.max_epoch", "trainer.max_epochs=3"),
    Case(("+data.nonsense=1",), 2, "data.nonsense", "remove data.nonsense"),
    # constraints in the constructors' hints, checked before anything is built
    Case(("profiler.speed.warmup_steps=-1",), 2, "profiler.speed.warmup_steps",
         "expected a value >= 0. Fix: profiler.speed.warmup_steps=5"),
    Case(("profiler=[speed,pyspy]", "profiler.pyspy.rate=0"), 2, "profiler.pyspy.rate",
         "Fix: profiler.pyspy.rate=100"),
    Case(("profiler=[speed,pyspy]", "profiler.pyspy.formats=[svg]"), 2, "profiler.pyspy.formats",
         "'raw'. Fix: profiler.pyspy.formats=[flamegraph,speedscope]"),
    Case(("profiler.speed.sync=cuda",), 2, "profiler.speed.sync", "Fix: profiler.speed.sync=events"),
    Case(("profiler.diagnose.when=never",), 2, "profiler.diagnose.when", "'end' or 'start'"),
    Case(("data.generate_on=gpu",), 2, "data.generate_on", "'device' or 'cpu'. Fix: data.generate_on=device"),
    Case(("data.train_batches=0",), 2, "data.train_batches", "Fix: data.train_batches=64"),
    Case(("model.num_heads=3",), 2, "model.dim", "a multiple of 3. Fix: model.dim=129"),
    Case(("model.dim=130",), 2, "model.dim", "a multiple of 4. Fix: model.dim=128"),
    Case(("logger=mlflow", "logger.http_timeout_s=0"), 2, "logger.http_timeout_s",
         "Fix: logger.http_timeout_s=10"),
    Case(("logger=mlflow", "logger.experiment_name=' '"), 2, "logger.experiment_name",
         "Fix: logger.experiment_name=harness"),
    # trainer keys harness sets itself
    Case(("+trainer.precision=16",), 2, "trainer.precision", "precision=bf16"),
    Case(("+trainer.logger=false",), 2, "trainer.logger", "logger=mlflow"),
    # strategies whose ranks run in processes multiprocessing starts: no figures (#23)
    Case(("trainer.strategy=ddp_spawn",), 2, "trainer.strategy", "trainer.strategy=ddp"),
    Case(("trainer.strategy=ddp_fork",), 2, "trainer.strategy", "trainer.strategy=ddp"),
    Case(("trainer.strategy=ddp_notebook",), 2, "trainer.strategy", "trainer.strategy=ddp"),
    Case(("trainer.strategy=DDP_Spawn_Find_Unused_Parameters_True",), 2, "trainer.strategy",
         "trainer.strategy=ddp"),
    Case(("+trainer.strategy._target_=lightning.pytorch.strategies.DDPStrategy",
          "+trainer.strategy.start_method=spawn"), 2, "trainer.strategy", "trainer.strategy=ddp"),
    Case(("trainer.strategy=ddp",), 0, ""),
    Case(("trainer.strategy=ddp_find_unused_parameters_true",), 0, ""),
    # a new top-level key that is a typo of an existing one (Hydra suggests `+key=`)
    Case(("+batchsize=8",), 2, "+batchsize", "batch_size=8"),
    Case(("+seeds=1",), 2, "+seeds", "seed=1"),
    Case(("+precison=bf16",), 2, "+precison", "precision=bf16"),
    # ... while legitimate additions still run
    Case(("model._target_=failing_module.FailAtBatchSize", "+model.fail_at=2"), 0, ""),
    Case(("+r=a",), 0, ""),  # read by interpolations (tests/test_slurm.py)
    Case(("+sweep_round=1",), 0, ""),  # set by the rounds sweeper
    Case(("++batchsize=8",), 0, ""),  # ++: added on purpose
    Case((), 0, ""),
    # Hydra's own errors: exit 2 too, one line with the fix
    Case(("model=resnet9000",), 2, "model/resnet9000", "Available options in 'model'"),
    Case(("profiler=memroy",), 2, "profiler/memroy", "profiler=memory"),
    Case(("profiler=[speed,nope]",), 2, "profiler/nope", "Available options"),
    # a typo inside a list keeps the list: the fix is the whole override, corrected
    Case(("profiler=[speed,summry]",), 2, "profiler/summry", "Fix: profiler=[speed,summary]"),
    Case(("profiler=[summry,speed,system]",), 2, "profiler/summry",
         "Fix: profiler=[summary,speed,system]"),
    Case(("trainer=fast",), 2, "trainer/fast", "trainer=default"),
    Case(("batchsize=8",), 2, "batchsize", "Did you mean batch_size"),
    Case(("model.lrr=0.1",), 2, "model.lrr", "Did you mean model.lr"),
    Case(("batch_size=1=2",), 2, "batch_size=1=2", "quote the value"),
    Case(("batch_size=[1,2",), 2, "batch_size", "quote the value"),
]


def verdict(case: Case, tmp_path: Path) -> tuple[int, str]:
    """(exit status, line) that `harness <case.what>` ends its checks with; (0, '') if none."""
    try:
        cfg = composed(*case.what, tmp_path=tmp_path)
        check_resolves(cfg)
        check_config(cfg, list(case.what))
    except Exception as err:  # what escapes reaches the CLI, which calls describe
        return describe(err)
    return 0, ""


@pytest.mark.parametrize("case", CONFIG, ids=str)
def test_config_case(case, tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["harness", *case.what])  # what the hints read
    code, line = verdict(case, tmp_path)
    assert code == case.code, line
    if case.code:
        assert "\n" not in line and "Traceback" not in line, line
        assert case.names in line, line
        assert case.fix in line, line


@pytest.mark.parametrize(("strategy", "refused"), [
    ("ddp_notebook", True), ("ddp_fork", True), ("ddp_spawn", True), ("ddp", False)])
def test_a_session_refuses_a_fit_in_processes_multiprocessing_starts(strategy, refused, tmp_path):
    """A notebook's `auto` with several devices is ddp_notebook: the fit runs in forked
    processes with copies of the session's callbacks. Where the fit starts (setup, before a
    step) the session refuses, in one line naming what to use; ddp is measured."""
    import lightning.pytorch as pl

    from harness import ProfileSession

    session = ProfileSession(["speed"], output_dir=tmp_path)
    trainer = pl.Trainer(strategy=strategy, devices=2, accelerator="cpu", logger=False,
                         enable_progress_bar=False, callbacks=session.callbacks)
    seen = session.callbacks[-1]
    if not refused:
        seen.setup(trainer, None, "fit")
        assert seen.trainer is trainer
        return
    with pytest.raises(HarnessError) as caught:
        seen.setup(trainer, None, "fit")
    code, line = describe(caught.value)
    assert code == 1 and "\n" not in line, line
    assert "multiprocessing" in line and "Fix: Trainer(strategy='ddp')" in line, line


class _Sloppy:
    """Hints as real code writes them."""

    def __init__(self, name: str, lr: float = None, size: int = 1, where: Path | None = None,  # type: ignore[assignment]
                 device: object = "cpu", **kwargs: object) -> None:
        pass


class _Strict(_Sloppy):
    def __init__(self, depth: int = 2, **kwargs: object) -> None:
        super().__init__(**kwargs)


@pytest.mark.parametrize(("values", "refused"), [
    ({"name": 2024}, None),  # YAML's number for a str
    ({"name": "a", "lr": None}, None),  # None where None is the default
    ({"name": "a", "lr": "1e-3", "size": "8"}, None),  # an environment variable's strings
    ({"name": "a", "where": "/tmp/x"}, None),  # a str for a Path
    ({"name": "a", "size": 2.5}, "model.size"),
    ({"name": "a", "depth": "deep"}, "model.depth"),  # the subclass's own argument
    ({"name": "a", "lr": "fast"}, "model.lr"),  # reached through **kwargs
    ({"name": "a", "anything": 1}, None),  # the base class takes **kwargs too
])
def test_the_argument_check_refuses_what_the_constructor_would(values, refused):
    from harness.config.arguments import check_node
    from harness.errors import ConfigError

    if refused is None:
        check_node("model", _Strict, OmegaConf.create(values))
        return
    with pytest.raises(ConfigError, match=rf"^{refused}="):
        check_node("model", _Strict, OmegaConf.create(values))


class _Swallowing:
    """Issue 29's GateModel: `**_` takes any key and does nothing with it."""

    def __init__(self, iters: int | None = None, **_: object) -> None:
        pass


class _Closed:
    def __init__(self, iters: int | None = None) -> None:
        pass


class _PassesOn(_Closed):
    def __init__(self, depth: int = 2, **kwargs: object) -> None:
        super().__init__(**kwargs)


def test_a_constructor_that_keeps_its_kwargs_takes_any_key_and_judges_it():
    from harness.config.arguments import check_node
    from harness.errors import ConfigError

    check_node("model", _Swallowing, OmegaConf.create({"tag": "a"}))  # was refused
    with pytest.raises(ConfigError, match=r"^model\.iters='x'"):  # its own arguments still checked
        check_node("model", _Swallowing, OmegaConf.create({"iters": "x"}))
    # **kwargs passed on to a base class that takes no other key: the key is still refused
    with pytest.raises(ConfigError, match=r"^model\.tag='a'.*\(depth, iters\)"):
        check_node("model", _PassesOn, OmegaConf.create({"tag": "a"}))


# -- a sweep's own settings, refused when it starts (Hydra only warns about a callback's error)

@pytest.mark.parametrize(("what", "names", "fix"), [
    (("hydra.callbacks.sweep_report.rows=seed", "batch_size=1,2"),
     "hydra.callbacks.sweep_report.rows", "rows=batch_size"),
    (("hydra.callbacks.sweep_report.baseline='precision=fp8'", "precision=fp32,bf16"),
     "hydra.callbacks.sweep_report.baseline", "precision=fp32"),
    (("+batchsize=1,2",), "+batchsize", "batch_size=1,2"),
])
def test_sweep_setting_case(what, names, fix, tmp_path, capsys):
    from harness.sweep.callbacks import CheckCallback

    cfg = composed(*(w for w in what if w.startswith("hydra.")), tmp_path=tmp_path)
    with read_write(cfg.hydra), open_dict(cfg):  # the overrides a multirun was started with
        cfg.hydra.overrides.task = [w for w in what if not w.startswith("hydra.")]
    with pytest.raises(SystemExit) as stopped:  # a SystemExit gets past Hydra's callback guard
        CheckCallback().on_multirun_start(cfg)
    assert stopped.value.code == 2
    line = capsys.readouterr().err.strip()
    assert line.count("\n") == 0 and line.startswith("harness: error:"), line
    assert names in line and fix in line, line


# -- output locations: the OSError Hydra or harness meets, as the CLI says it

def _real_oserror(kind: str, tmp_path: Path) -> BaseException:
    """A real error of each kind, raised by the OS (a read-only directory cannot be made
    read-only for root, so that one is built by hand with the errno the OS gives)."""
    try:
        if kind == "under a file":
            (tmp_path / "afile").write_text("x")
            (tmp_path / "afile" / "run").mkdir(parents=True)
        elif kind == "disk full":
            with open("/dev/full", "w") as full:  # every write: ENOSPC
                full.write("x")
        elif kind == "read-only log file":  # logging.config's wrapping of the handler's error
            try:
                raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "cli.log"))
            except PermissionError as err:
                raise ValueError("Unable to configure handler 'file'") from err
        else:
            raise PermissionError(errno.EACCES, "Permission denied", "outputs")
    except (OSError, ValueError) as err:
        return err
    raise AssertionError("no error")


@pytest.mark.parametrize(("kind", "code", "names", "fix"), [
    ("read-only cwd", 2, "outputs", "hydra.run.dir=DIR"),
    ("under a file", 2, "afile/run", "not a directory"),
    ("read-only log file", 2, "cli.log", "make it writable"),
    ("disk full", 1, "No space left on device", "free space"),  # a write names no file
])
def test_output_location_case(kind, code, names, fix, tmp_path):
    got, line = describe(_real_oserror(kind, tmp_path))
    assert got == code and names in line and fix in line and "\n" not in line, line


# -- harness-report

def _job(root: Path, name: str, batch_size: int, sweep: Path | None = None,
         flags: tuple[str, ...] = ()) -> Path:
    job = root / name
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(f"- batch_size={batch_size}\n")
    if sweep is not None:  # what Hydra records of the sweep that ran the job
        (job / ".hydra" / "hydra.yaml").write_text(
            f"hydra:\n  mode: MULTIRUN\n  runtime:\n    output_dir: {sweep / name}\n")
    metrics = {"train_examples_per_second": 100.0 * batch_size,
               "inference_examples_per_second": 300.0, "peak_rss_bytes": 2**29}
    (job / "result.json").write_text(json.dumps({
        "schema_version": 2, "status": "ok", "overrides": [f"batch_size={batch_size}"],
        "metrics": metrics, "flags": list(flags)}))
    return job


def _report(*argv: str) -> int:
    from harness.sweep.report_cli import main

    with pytest.raises(SystemExit) as ended:
        main(list(argv))
    return ended.value.code


def test_report_names_a_truncated_result_in_one_line(tmp_path, capsys):
    _job(tmp_path, "0", 1)
    broken = _job(tmp_path, "1", 2) / "result.json"
    broken.write_text(broken.read_text()[:40])
    assert _report(str(tmp_path), "--no-write") == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if str(broken) in line]
    assert len(lines) == 1 and "truncated" in lines[0], lines


def test_report_warns_when_a_directory_mixes_two_sweeps(tmp_path, capsys):
    day = tmp_path / "multirun" / "2026-01-01"
    for sweep in ("12-00-00", "12-00-00_2"):
        for job, size in (("0", 1), ("1", 2)):
            _job(day / sweep, job, size, sweep=day / sweep)
    assert _report(str(day), "--no-write") == 0
    err = capsys.readouterr().err
    assert "mixes the jobs of 2 sweeps" in err and "12-00-00_2" in err, err
    capsys.readouterr()
    assert _report(str(day / "12-00-00"), "--no-write") == 0  # one sweep: no warning
    assert "mixes" not in capsys.readouterr().err


def test_report_out_under_a_file_is_one_line_and_exit_2(tmp_path, capsys):
    _job(tmp_path / "a", "0", 1)
    _job(tmp_path / "b", "0", 1)
    (tmp_path / "afile").write_text("x")
    code = _report(str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "afile" / "d"))
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0, err
    assert "afile/d" in err and "--out DIR" in err, err


def test_report_shows_a_nonfinite_loss_beside_the_training_figures(tmp_path, capsys):
    _job(tmp_path, "0", 1)
    _job(tmp_path, "1", 2, flags=("nonfinite_loss",))
    assert _report(str(tmp_path), "--no-plot") == 0
    out = capsys.readouterr().out
    assert "NaN loss" in out and "nonfinite_loss" in out, out
    table = (tmp_path / "comparison.md").read_text()
    assert table.count("NaN loss") >= 1
    points = {p["batch_size"]: p for p in json.loads(
        (tmp_path / "comparison.json").read_text())["points"]}
    assert points["2"]["train_nonfinite_loss"] is True
    assert points["1"]["train_nonfinite_loss"] is False


# -- MLflow

def test_upload_of_a_truncated_result_names_it_and_exits_2(tmp_path, capsys):
    from harness.tracking.upload_cli import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text('{"schema_version": 2, "status": "ok", "metr')
    assert main([str(run), "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]) == 2
    err = capsys.readouterr().err
    assert f"{run}: result.json unreadable: truncated" in err and "not uploaded" in err, err
    assert not (tmp_path / "m.db").exists()  # refused before the store was touched


def test_upload_of_a_run_that_failed_before_its_first_step(tmp_path, caplog):
    """Empty report tables (written before any step) are no MLflow error: the run's files are
    logged and its MLflow run ends FAILED, not RUNNING."""
    from mlflow import MlflowClient

    from harness.tracking.upload_cli import main

    run = tmp_path / "run"
    (run / "reports").mkdir(parents=True)
    (run / "reports" / "speed_steps.csv").write_text("")
    (run / "reports" / "system.csv").write_text("")
    (run / "result.json").write_text(json.dumps({"schema_version": 2, "status": "failed",
                                                 "reason": "RuntimeError: at step 0"}))
    uri = f"sqlite:///{tmp_path}/m.db"
    with caplog.at_level(logging.WARNING):
        assert main([str(run), "--tracking-uri", uri]) == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    client = MlflowClient(uri)
    (found,) = client.search_runs([client.get_experiment_by_name("harness").experiment_id])
    assert found.info.status == "FAILED"
    artifacts = {a.path for a in client.list_artifacts(found.info.run_id)}
    assert {"result.json", "reports"} <= artifacts


@pytest.mark.parametrize(("message", "says"), [
    ("(raised as a result of Query-invoked autoflush)\n(sqlite3.OperationalError) attempt to"
     " write a readonly database\n[SQL: INSERT INTO runs ...]", "the store is read-only"),
    ("(sqlite3.OperationalError) database is locked\n[SQL: ...]", "database is locked"),
    ("API request to http://x failed with ConnectionError", "ConnectionError"),
])
def test_a_tracking_failure_is_said_in_one_line(message, says):
    from harness.tracking.store_access import short_reason

    line = short_reason(RuntimeError(message))
    assert says in line and "\n" not in line and "autoflush" not in line, line


def test_a_list_that_must_hold_one_value_refuses_an_empty_one():
    """config.checks.one_or_more: `at least one` holds for a list; a bare name is a list of one."""
    from harness.config.checks import check, one_or_more
    from harness.errors import ConfigError
    from harness.launch.nsys import NsysOptions

    with pytest.raises(ConfigError, match=r"^profiler.nsys.trace=\[\] .*at least 1 item"):
        NsysOptions.read({"trace": []})
    assert check("k", [], one_or_more(["cuda"], least=0), "[cuda]") == []
    assert check("k", "cuda", one_or_more(["cuda"]), "[cuda]") == "cuda"
    with pytest.raises(ConfigError, match=r"^k=\[\] .*at least 1 item.*Fix: k=\[cuda\]$"):
        check("k", [], one_or_more(["cuda"]), "[cuda]")
