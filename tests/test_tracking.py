"""MLflow tracking: the real CLI logs into a real store, read back with MlflowClient."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
from conftest import FAST, Completed, run_harness
from step_beacon import rendezvous, run_env

# Small workload; logger=mlflow is named because conftest's FAST turns tracking off.
TRACKED = ("logger=mlflow", "profiler.speed.warmup_steps=2")


def _client(uri: str):
    return mlflow.MlflowClient(uri)


def _only_run(client, experiment: str = "harness"):
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, "experiment was not created"
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1, [r.info.run_name for r in runs]
    return runs[0]


def _artifacts(client, run_id: str, path: str | None = None) -> set[str]:
    found = set()
    for item in client.list_artifacts(run_id, path):
        found |= _artifacts(client, run_id, item.path) if item.is_dir else {item.path}
    return found


def _history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def _git_repo(path: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=path, check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q")
    (path / "README").write_text("x\n")
    git("add", "README")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    return git("rev-parse", "HEAD")


# harness.cli.main in a Python of its own, as the console script runs it, then what it imported.
PROBE = ("import sys\nfrom harness.cli import main\n"
         "sys.argv = ['harness'] + sys.argv[1:]\ncode = 0\n"
         "try:\n    main()\nexcept SystemExit as stop:\n    code = stop.code\n"
         "print('LOADED=' + ','.join(m for m in ('mlflow', 'pandas') if m in sys.modules))\n"
         "sys.exit(code)\n")


@pytest.mark.slow
def test_default_store_holds_params_tags_rates_metrics_and_artifacts(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    commit = _git_repo(tmp_path)
    # fp16 on a CPU runs as bf16: check_knobs=false keeps the run ok, to see both recorded.
    # A fresh process (not forked from one that imported the libraries): what it loads is seen.
    probe = subprocess.run([sys.executable, "-c", PROBE, *FAST, *TRACKED, "precision=fp16",
                            "check_knobs=false"], cwd=tmp_path, capture_output=True, text=True,
                           env={**run_env(), "SLURM_JOB_ID": "4242"}, timeout=600)
    done = Completed(probe.returncode, probe.stdout, probe.stderr, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "harness: warning" not in done.stderr
    # A default run (speed, diagnose, MLflow): MLflow in the tracker process, the reports'
    # CSVs through the csv module; the job's process loads neither (issue #22).
    assert "LOADED=\n" in done.stdout, done.stdout[-2000:]
    # MLflow 3's default store: mlflow.db in the working directory, artifacts in ./mlruns.
    assert (tmp_path / "mlflow.db").is_file()
    client = _client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = _only_run(client)
    run_id = run.info.run_id
    assert run.info.status == "FINISHED"
    assert Path(run.info.artifact_uri.removeprefix("file://")).is_relative_to(tmp_path / "mlruns")

    result = done.result()
    assert result["tracking"]["run_id"] == run_id and result["tracking"]["logged"] is True

    params = run.data.params
    assert params["batch_size"] == "4"
    assert params["precision"] == "fp16"
    assert params["knobs.lightning_precision"] == "16-mixed"
    assert params["precision_used"] == "bf16-mixed"  # CPU runs fp16 as bf16
    assert "what ran: precision=fp16 but Lightning ran bf16-mixed" in done.stderr
    assert params["observed.examples_per_batch.train"] == "4"
    assert params["observed.examples_source"] == "batches"
    assert params["compile"] == "False"
    assert params["model._target_"] == "harness.workload.model.TransformerModule"
    assert params["data.train_batches"] == "12"
    assert params["trainer.max_epochs"] == "1"

    tags = run.data.tags
    assert tags["git_commit"] == commit
    assert tags["slurm_job_id"] == "4242"
    assert tags["host"] == socket.gethostname()
    assert tags["device_name"] == result["device"]["device_name"]
    assert tags["torch_version"] == result["versions"]["torch"]
    assert tags["lightning_version"] == result["versions"]["lightning"]

    # Per-step rates: every training step, the same numbers as reports/speed_steps.csv.
    steps = list(csv.DictReader((done.run_dir() / "reports" / "speed_steps.csv").open()))
    on_disk = [float(r["training_rate"]) for r in steps if r["phase"] == "train"]
    logged = _history(client, run_id, "training_rate")
    assert [s for s, _ in logged] == list(range(1, 13))
    assert [v for _, v in logged] == pytest.approx(on_disk, rel=1e-6)
    examples = _history(client, run_id, "training_examples_rate")  # batch_size=4 per step
    assert examples == [(step, pytest.approx(4 * value)) for step, value in logged]
    assert len(_history(client, run_id, "validation_rate")) == 4
    assert _history(client, run_id, "train_loss")  # the module's own self.log, same run

    metrics = run.data.metrics
    for key in ("train_examples_per_second", "train_seconds_per_iteration",
                "inference_examples_per_second", "peak_rss_bytes"):
        assert metrics[key] == pytest.approx(result["metrics"][key], rel=1e-9)

    artifacts = _artifacts(client, run_id)
    assert {"result.json", "reports/speed.json", "reports/speed.csv",
            "reports/speed_steps.csv", "tables/speed.json", "config/config.yaml"} <= artifacts
    tables = json.loads(tags["mlflow.loggedArtifacts"])
    assert {"path": "tables/speed.json", "type": "table"} in tables
    table = json.loads(Path(client.download_artifacts(
        run_id, "tables/speed.json", str(tmp_path))).read_text())
    phase = table["columns"].index("phase")
    assert {row[phase] for row in table["data"]} == {"train", "validation", "inference"}
    logged_result = json.loads(Path(client.download_artifacts(
        run_id, "result.json", str(tmp_path))).read_text())
    assert logged_result["tracking"]["run_id"] == run_id


@pytest.mark.slow
def test_unreachable_server_still_completes_with_one_warning_and_upload_works(tmp_path):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    done = run_harness(tmp_path, *TRACKED, "mode=train", f"logger.tracking_uri={uri}")
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    warnings = [line for line in done.stderr.splitlines() if "warning" in line.lower()
                and "mlflow" in line.lower()]
    assert len(warnings) == 1, warnings
    assert uri in warnings[0] and "not logged: the whole run" in warnings[0]
    result = done.result()
    assert result["status"] == "ok"
    assert (done.run_dir() / "reports" / "speed.json").is_file()
    assert result["tracking"]["logged"] is False
    assert "harness-mlflow-upload" in result["tracking"]["upload_command"]
    print(f"run with an unreachable server: {elapsed:.1f} s")

    # The command the warning names logs the run directory afterwards.
    command = shlex.split(warnings[0].split("Upload them later with: ")[1])
    store = f"sqlite:///{tmp_path / 'later.db'}"
    uploaded = subprocess.run(
        [str(Path(sys.executable).parent / command[0]), *command[1:-1], store],
        capture_output=True, text=True, timeout=300,
    )
    assert uploaded.returncode == 0, uploaded.stderr[-2000:]
    client = _client(store)
    run = _only_run(client)
    assert run.info.status == "FINISHED"
    assert run.data.params["batch_size"] == "4"
    rates = _history(client, run.info.run_id, "training_rate")
    assert len(rates) == 12
    # examples/s beside it/s, as the live run logs it: batch_size 4 examples per step
    assert _history(client, run.info.run_id, "training_examples_rate") == [
        (step, pytest.approx(4 * value)) for step, value in rates]
    assert "reports/speed.json" in _artifacts(client, run.info.run_id)


@pytest.mark.slow
def test_locked_sqlite_store_still_completes_with_one_warning(tmp_path):
    store = tmp_path / "mlflow.db"
    _client(f"sqlite:///{store}").search_experiments()  # the store exists
    holder = sqlite3.connect(store, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process holds the database for the whole run
    try:
        done = run_harness(tmp_path, *TRACKED, "mode=train", "data.train_batches=4")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert done.returncode == 0, done.stderr[-3000:]
    warnings = [line for line in done.stderr.splitlines() if "harness: warning" in line]
    assert len(warnings) == 1, warnings
    assert "database is locked" in warnings[0] and "harness-mlflow-upload" in warnings[0]
    assert done.result()["status"] == "ok"
    assert (done.run_dir() / "reports" / "speed.json").is_file()
    assert _client(f"sqlite:///{store}").search_experiments(filter_string="name = 'harness'") == []


@pytest.mark.slow
def test_logger_none_tracks_nothing_and_bad_setting_names_its_key(tmp_path):
    done = run_harness(tmp_path, "logger=none", "mode=train", "data.train_batches=4")
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()
    assert "tracking" not in done.result()

    (tmp_path / "bad").mkdir()
    bad = run_harness(tmp_path / "bad", "logger=mlflow", "logger.flush_every_s=-1")
    assert bad.returncode == 2
    assert "logger.flush_every_s=-1 is not valid" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` on 127.0.0.1 (slow to start: once per module)."""
    root = tmp_path_factory.mktemp("server")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = (root / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{root / 'server.db'}",
         "--artifacts-destination", str(root / "artifacts"), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        # no job runner beside the server (a process of its own, for MLflow's GenAI jobs)
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    uri = f"http://127.0.0.1:{port}"
    import requests

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{uri}/health", timeout=2).status_code == 200:
                break
        except requests.RequestException:
            pass
        if server.poll() is not None:
            break
        time.sleep(0.5)
    else:
        server.poll()
    try:
        if server.returncode is not None:
            pytest.fail(f"mlflow server exited: {(root / 'server.log').read_text()[-2000:]}")
        yield uri, root
    finally:
        # The server runs uvicorn as a child: stop the session it leads.
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()


@pytest.mark.slow
def test_run_logged_over_http_to_a_real_server_with_its_repeats_in_one_run(tmp_path, mlflow_server):
    uri, root = mlflow_server
    done = run_harness(tmp_path, *TRACKED, "mode=train", "repeat=2", f"logger.tracking_uri={uri}",
                       "logger.experiment_name=over-http")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "harness: warning" not in done.stderr
    assert not (tmp_path / "mlflow.db").exists()
    client = _client(uri)
    run = _only_run(client, "over-http")  # the job's one run, shared by its repeats
    assert run.info.status == "FINISHED"
    assert run.info.run_id == done.result()["tracking"]["run_id"]
    assert run.data.params["batch_size"] == "4" and run.data.params["repeat"] == "2"
    # each repeat's 12 training steps, at the same 12 global steps
    steps = [step for step, _ in _history(client, run.info.run_id, "training_rate")]
    assert steps == sorted(list(range(1, 13)) * 2)
    assert run.data.metrics["train_examples_per_second"] == pytest.approx(
        done.result()["metrics"]["train_examples_per_second"])
    assert {"result.json", "reports/speed.json", "tables/speed.json"} <= _artifacts(
        client, run.info.run_id)
    # The server stored the artifacts in its own artifact root, not in the client's cwd.
    assert list((root / "artifacts").rglob("speed.json"))
    assert not (tmp_path / "mlruns").exists()


@pytest.mark.slow
def test_parallel_jobs_into_one_sqlite_store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    met = tmp_path / "met"
    done = run_harness(
        tmp_path, "hydra.mode=MULTIRUN", "hydra/launcher=submitit_local", "seed=0,1",
        *TRACKED, "mode=train", "data.train_batches=6", "data.val_batches=2",
        "logger.flush_every_s=0",  # a store write per step: the jobs contend for the store
        *rendezvous(met, 2),  # neither job trains before both are running
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "harness: warning" not in done.stderr
    assert len(done.run_dirs()) == 2
    # The jobs really ran at the same time: two processes met before training.
    assert len(list(met.iterdir())) == 2
    client = _client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("harness")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 2, [r.info.run_name for r in runs]
    parent = parents[0]
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert sorted(c.data.params["seed"] for c in children) == ["0", "1"]
    # Children are named by what the sweep varies, so the UI tells them apart.
    assert sorted(c.info.run_name for c in children) == ["seed=0", "seed=1"]
    assert all(c.info.status == "FINISHED" for c in children)
    for child in children:
        assert len(_history(client, child.info.run_id, "training_rate")) == 6
    # Each job's result.json names its own run.
    assert {json.loads((d / "result.json").read_text())["tracking"]["run_id"]
            for d in done.run_dirs()} == {c.info.run_id for c in children}
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["jobs"] == "2" and parent.data.tags["jobs_ok"] == "2"
    assert "multirun.yaml" in _artifacts(client, parent.info.run_id)
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_record_run_caps_traces_logs_system_series_and_sweep_files(tmp_path):
    """In-process, on a hand-made run directory: what the size cap and the sweep step do."""
    from harness.result.store import load_result
    from harness.tracking.store_ops import StoreOps

    run_dir = tmp_path / "sweep" / "0"
    reports = run_dir / "reports"
    reports.mkdir(parents=True)
    (reports / "speed.json").write_text('{"report": "speed"}')
    (reports / "speed.csv").write_text("phase,seconds_per_iteration\ntrain,0.5\n")
    (reports / "summary.txt").write_text("net: 1 M params\n")
    (reports / "memory_snapshot.pickle").write_bytes(b"\0" * (2 * 1024 * 1024))
    (reports / "train_trace.json").write_bytes(b" " * (2 * 1024 * 1024))
    (reports / "small_trace.json").write_text("{}")
    (reports / "system.csv").write_text("t_s,timestamp_s,segment,process_cpu_pct\n"
                                        "0.5,1700000000.5,1,10\n1.0,1700000001,1,20\n1.5,1700000001.5,1,30\n")
    result = {"status": "ok", "metrics": {"train_examples_per_second": 8.5, "x": None},
              "duration_s": 3.0, "host": "h", "versions": {"torch": "t"}}
    (run_dir / "result.json").write_text(json.dumps(result))
    result = load_result(run_dir)

    uri = f"sqlite:///{tmp_path / 'store.db'}"
    client = _client(uri)
    exp_id = client.create_experiment("unit", artifact_location=str(tmp_path / "artifacts"))
    run_id = client.create_run(exp_id).info.run_id
    store = StoreOps(uri, client=client)
    skipped = store.record_run(run_id, run_dir, {"batch_size": 8, "model": {"dim": 32}}, result,
                               trace_cap_mb=1)

    assert skipped == ["reports/train_trace.json (2.0 MiB)"]
    artifacts = _artifacts(client, run_id)
    assert "reports/train_trace.json" not in artifacts
    assert {"reports/small_trace.json", "reports/memory_snapshot.pickle",
            "reports/summary.txt", "tables/speed.json", "result.json"} <= artifacts
    run = client.get_run(run_id)
    assert run.data.params == {"batch_size": "8", "model.dim": "32"}
    assert run.data.metrics == {"train_examples_per_second": 8.5, "duration_s": 3.0,
                                "system/process_cpu_pct": 30.0}  # a series shows its last value
    assert "train_trace.json" in run.data.tags["artifacts_left_on_disk"]
    assert _history(client, run_id, "system/process_cpu_pct") == [(0, 10.0), (1, 20.0), (2, 30.0)]
    stamps = sorted(m.timestamp for m in client.get_metric_history(run_id, "system/process_cpu_pct"))
    assert stamps == [1700000000500, 1700000001000, 1700000001500]  # each sample's own time

    sweep = run_dir.parent
    (sweep / "comparison.md").write_text("| batch_size | examples/s |\n")
    (sweep / "comparison.csv").write_text("batch_size,examples_per_second\n8,8.5\n")
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    (sweep / "1").mkdir()
    (sweep / "1" / "result.json").write_text('{"status": "oom"}')
    parent_id = client.create_run(exp_id).info.run_id
    store.log_sweep(parent_id, sweep)
    parent = client.get_run(parent_id)
    assert {"comparison.md", "comparison.csv", "multirun.yaml", "tables/comparison.json"} <= (
        _artifacts(client, parent_id))
    assert parent.data.tags["jobs"] == "2"
    assert (parent.data.tags["jobs_ok"], parent.data.tags["jobs_oom"]) == ("1", "1")
    assert parent.info.status == "FINISHED"


def test_store_access_and_sweep_helpers(tmp_path):
    from omegaconf import OmegaConf

    from harness.config.arguments import check_node
    from harness.config.sweep_keys import swept_values
    from harness.errors import ConfigError
    from harness.tracking import store_access

    assert list(swept_values(["batch_size=4,16", "mode=train", "seed=range(3)",
                              "hydra/launcher=submitit_local"])) == ["batch_size", "seed"]

    from harness.tracking.mlflow_logger import HarnessMLFlowLogger

    def check_logger(**values: object) -> None:  # the job's check of the logger's arguments
        check_node("logger", HarnessMLFlowLogger, OmegaConf.create(values))

    check_logger(http_max_retries="2", flush_every_s="0")  # ${oc.env:...} gives strings
    with pytest.raises(ConfigError, match=r"logger.flush_every_s='soon' is not valid"):
        check_logger(flush_every_s="soon")
    for endless in ("nan", "inf"):
        with pytest.raises(ConfigError, match="logger.flush_every_s"):
            check_logger(flush_every_s=endless)
    with pytest.raises(ConfigError, match=r"^logger.http_timeout_s='0' .*Fix: logger.http_timeout_s=10$"):
        check_logger(http_timeout_s="0")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(store_access.Unreachable) as nothing_listens:
        store_access.probe(f"http://127.0.0.1:{port}", timeout_s=2)
    assert re.search(r"cannot reach http://127\.0\.0\.1:\d+: ConnectionError", str(nothing_listens.value))
    with socket.socket() as silent:  # a server that accepts the connection and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(store_access.Unreachable) as silent_server:
            store_access.probe(uri, timeout_s=0.5)
        assert str(silent_server.value) == f"cannot reach {uri}: ReadTimeout"
    assert store_access.probe("sqlite:///x.db", timeout_s=2) is None
    assert store_access.absolute_uri("sqlite:///x.db") == f"sqlite:///{Path.cwd() / 'x.db'}"


def test_a_sweeps_parent_run_carries_its_keys_best_and_baseline_and_table(tmp_path):
    """In-process: the parent-run callback on a real store, around hand-made jobs."""
    from omegaconf import OmegaConf
    from sweep_files import metrics, write_job

    from harness.sweep.report_cli import report_sweep
    from harness.tracking.parent_run import ParentRunCallback
    from harness.tracking.tracker import LOGGER_TARGET

    sweep, uri = tmp_path / "multirun" / "2026-11-22" / "10-00-00", f"sqlite:///{tmp_path / 's.db'}"
    config = OmegaConf.create({
        "logger": {"_target_": LOGGER_TARGET, "tracking_uri": uri, "experiment_name": "sweeps",
                   "artifact_location": str(tmp_path / "artifacts"), "http_timeout_s": 10,
                   "http_max_retries": 0, "probe_timeout_s": 1},
        "hydra": {"sweep": {"dir": str(sweep)}, "sweeper": {"params": None},
                  "overrides": {"task": ["data.dim=32", "batch_size=2,4", "precision=fp32,bf16",
                                         "repeat=2"]}},
    })
    callback = ParentRunCallback()
    callback.on_multirun_start(config)
    # bf16 twice as fast in training, beyond noise; the same in inference
    n = 0
    for bs in (2, 4):
        for precision, speed in (("fp32", 1.0), ("bf16", 2.0)):
            for round_ in (0, 1):
                values = metrics(10 * bs * speed * (1 + 0.01 * round_), 50 * bs * (1 + 0.01 * round_),
                                 batch_size=bs)
                write_job(sweep / str(n), ["data.dim=32", f"batch_size={bs}",
                                           f"precision={precision}", "repeat=1",
                                           f"+sweep_round={round_}"], values=values)
                n += 1
    report_sweep(sweep)
    callback.on_multirun_end(config)

    client = _client(uri)
    (parent,) = client.search_runs([client.get_experiment_by_name("sweeps").experiment_id])
    assert parent.info.run_name == "bs x precision (sweep)"
    assert parent.data.params == {"batch_size": "2,4", "precision": "fp32,bf16",
                                  "data.dim": "32", "repeat": "2"}
    figures = parent.data.metrics
    # the table's one figure per point, the judge's: the median of its two rounds' examples/s
    assert figures["best_train_examples_per_second"] == pytest.approx((80 + 80.8) / 2)
    assert figures["baseline_train_examples_per_second"] == pytest.approx((40 + 40.4) / 2)
    # and the judge's speed-up over the baseline through the rounds' pairs, with its interval
    assert figures["best_train_speedup"] == pytest.approx(2.0)
    assert 1 < figures["best_train_speedup_min"] < 2.0 < figures["best_train_speedup_max"]
    tags = parent.data.tags
    assert tags["best_train"] == "batch_size=4, precision=bf16"
    assert tags["best_train_speedup_verdict"] == "real"
    # inference: a tie; the parent run names the fastest point, unproven, as the table does
    # (issue 29: every sweep names its fastest point, with its figures marked where unproven)
    assert tags["best_inference"].startswith("batch_size=4, precision=")
    assert "(unproven: within the noise of 1 other)" in tags["best_inference"]
    assert figures["best_inference_examples_per_second"] == pytest.approx(200, rel=0.02)
    assert tags["baseline"] == "precision=fp32"
    assert tags["mlflow.note.content"].startswith("# Sweep comparison: 10-00-00")
    assert "| 4 |" in tags["mlflow.note.content"]
    assert "tables/comparison.json" in _artifacts(client, parent.info.run_id)
    assert parent.info.status == "FINISHED"


def test_child_runs_are_named_by_what_differs_first():
    from harness.config.sweep_keys import job_label, run_name, sweep_run_name

    swept = ["batch_size", "precision", "compile"]
    job = ["data.dim=32", "batch_size=16", "precision=bf16", "compile=true", "repeat=1",
           "+sweep_round=1"]
    # MLflow's runs table shows ~14 characters of a child's name: short keys, no fixed ones
    assert run_name(job, swept) == "bs=16 bf16 compile=true r1"
    assert run_name(["seed=3"], ["seed"]) == "seed=3"
    assert run_name(["data.seq_len=64"], ["data.seq_len"]) == "seq_len=64"
    assert run_name(["mode=train", "batch_size=8"], []) == "mode=train,batch_size=8"
    assert sweep_run_name(swept) == "bs x precision x compile (sweep)"
    assert sweep_run_name(swept, "physicsnemo") == "physicsnemo (sweep)"
    # the progress lines have room for the keys
    assert job_label(job, swept) == "batch_size=16,bf16,compile=true (round 1)"


def test_links_open_the_training_view_of_the_run():
    from harness.tracking.run_logging import ui_link, where_to_look

    assert ui_link("http://h:5000/", "3", "abc") == (
        "http://h:5000/#/experiments/3/runs/abc?workflowType=machine_learning")
    assert where_to_look("http://h:5000", "3", None, what="sweep") == (
        "mlflow: sweep http://h:5000/#/experiments/3/runs?workflowType=machine_learning")
    local = where_to_look("sqlite:///mlflow.db", "1", "abc")
    assert local.endswith(" ui` in " + str(Path.cwd()) + ", then http://127.0.0.1:5000/"
                          "#/experiments/1/runs/abc?workflowType=machine_learning")
