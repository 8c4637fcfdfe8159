"""Nothing lost: unique run and sweep directories, atomic writes that leave no temporary file.

In-process: the mechanisms themselves. The processes that rely on them (4 concurrent runs,
a disk that fills mid-run, a tracking store that disappears) are in tests/test_corpus_runs.py.
"""

from __future__ import annotations

import copy
import errno
import multiprocessing
import multiprocessing.synchronize
import pickle
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from harness.launch.output_dirs import register_resolver, unique_dir
from harness.reports import files


def _claim(base: str, start: multiprocessing.synchronize.Barrier, out: multiprocessing.Queue) -> None:
    start.wait()  # all four ask at once
    out.put(unique_dir(base))


def test_processes_asking_for_the_same_directory_each_get_their_own(tmp_path):
    base = str(tmp_path / "outputs" / "2026-01-01" / "12-00-00")
    context = multiprocessing.get_context("fork")
    start, out = context.Barrier(4), context.Queue()
    workers = [context.Process(target=_claim, args=(base, start, out)) for _ in range(4)]
    for worker in workers:
        worker.start()
    claimed = [out.get(timeout=30) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    assert len(set(claimed)) == 4, claimed
    assert sorted(Path(c).name for c in claimed) == [
        "12-00-00", "12-00-00_2", "12-00-00_3", "12-00-00_4"]
    assert all(Path(c).is_dir() for c in claimed)


def test_one_process_resolves_one_directory_however_often_it_asks(tmp_path):
    register_resolver()
    cfg = OmegaConf.create({"dir": f"${{unique_dir:{tmp_path}/multirun/a}}", "job": "${dir}/0"})
    first = cfg.dir
    assert cfg.dir == first and cfg.job == f"{first}/0"
    # A copy (Hydra's per-job config, or submitit's pickle) carries the cached value.
    assert copy.deepcopy(cfg).dir == first
    assert pickle.loads(pickle.dumps(cfg)).dir == first
    assert sorted(p.name for p in (tmp_path / "multirun").iterdir()) == ["a"]


def test_an_unwritable_parent_is_left_to_hydra_to_report(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert unique_dir(str(afile / "run")) == str(afile / "run")  # no exception here


def _fail_on_write(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("writer", ["text", "json", "csv", "bytes"])
def test_a_write_that_fails_leaves_neither_the_file_nor_a_temporary(tmp_path, monkeypatch, writer):
    class FullDisk:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        write = staticmethod(_fail_on_write)

    monkeypatch.setattr(files, "open", FullDisk, raising=False)
    target = tmp_path / "reports" / "speed.json"
    call = {"text": lambda: files.write_text(target, "x"),
            "json": lambda: files.write_json(target, {"a": 1}),
            "csv": lambda: files.write_csv(target, [{"a": 1}]),
            "bytes": lambda: files.write_bytes(target, b"x")}[writer]
    with pytest.raises(OSError, match="No space"):
        call()
    assert list((tmp_path / "reports").iterdir()) == []
