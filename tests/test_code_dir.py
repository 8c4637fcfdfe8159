"""Issue 28: `code_dir=A,B` puts each tree first on its job's import path, each job in a fresh
process, so one sweep measures two versions of a user's code side by side."""

from __future__ import annotations

import json
import subprocess

from conftest import run_harness

MODULE = '''
import os
from pathlib import Path

from harness.workload.model import TransformerModule


class Model(TransformerModule):
    TREE = {tree!r}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        with open(Path(os.environ["CODE_DIR_MARKS"]), "a") as marks:
            marks.write(f"{{self.TREE}} {{os.getpid()}}\\n")
'''


def _tree(path, name: str, git: bool = False):
    path.mkdir()
    (path / "user_model.py").write_text(MODULE.format(tree=name))
    if git:
        for command in (["init", "-q"], ["add", "."],
                        ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", name]):
            subprocess.run(["git", "-C", str(path), *command], check=True)
    return path


def test_each_job_imports_its_own_tree_in_a_fresh_process(tmp_path):
    base, change = _tree(tmp_path / "base", "base", git=True), _tree(tmp_path / "change", "change")
    marks = tmp_path / "marks.txt"
    done = run_harness(tmp_path, "hydra.mode=MULTIRUN", f"code_dir={base},{change}",
                       "model._target_=user_model.Model", "mode=train",
                       "profiler=[speed]", "hydra.sweep.dir=sweep",
                       env={"CODE_DIR_MARKS": str(marks)})
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert "each job runs in a fresh Python process" in said
    assert "a fresh process took" in said
    results = {p.parent.name: json.loads(p.read_text())
               for p in (tmp_path / "sweep").glob("*/result.json")}
    assert len(results) == 2 and {r["status"] for r in results.values()} == {"ok"}
    trees = {r["code_dir"] for r in results.values()}
    assert trees == {str(base.resolve()), str(change.resolve())}
    for result in results.values():
        assert result["fresh_process_s"] > 0
        if result["code_dir"] == str(base.resolve()):
            assert len(result["code_commit"]) == 40  # a git tree: its commit, clean
        else:
            assert result.get("code_commit") is None  # not a git tree
    # every job imported its own tree's module, each in a process of its own
    lines = [line.split() for line in marks.read_text().splitlines()]
    assert sorted(tree for tree, _ in lines) == ["base", "change"]
    assert len({pid for _, pid in lines}) == 2
    comparison = json.loads((tmp_path / "sweep" / "comparison.json").read_text())
    assert comparison["variant_keys"] == ["code_dir"]


def test_a_code_dir_that_is_not_a_directory_is_refused_before_any_job(tmp_path):
    done = run_harness(tmp_path, "hydra.mode=MULTIRUN", f"code_dir={tmp_path / 'nope'},.",
                       "hydra.sweep.dir=sweep")
    assert done.returncode == 2
    assert "code_dir" in done.stderr and "Fix:" in done.stderr
    assert not list((tmp_path / "sweep").glob("*/result.json"))
