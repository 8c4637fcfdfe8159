"""The built wheel carries conf/ and sweeps/, and `harness` works from a fresh venv."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def test_wheel_runs_from_a_fresh_venv(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
        check=True, timeout=300,
    )
    wheel = next(dist.glob("lightning_harness-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "harness/conf/config.yaml" in names
    assert "harness/conf/profiler/speed.yaml" in names
    assert any(n.startswith("harness/sweeps/") for n in names)

    env_dir = tmp_path / "venv"
    venv.create(env_dir)  # without pip: this pip installs into it (--python), 4 s less
    pip = [sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install", "-q"]
    # Only what `--cfg job` needs: the full dependency set would pull a CUDA torch here.
    subprocess.run([*pip, "--no-deps", str(wheel)], check=True, timeout=300)
    subprocess.run([*pip, "hydra-core>=1.3,<1.4", "omegaconf>=2.3,<2.4"], check=True, timeout=300)
    work = tmp_path / "elsewhere"  # not the repository: the config must come from the wheel
    work.mkdir()
    harness = env_dir / "bin" / "harness"
    # Nothing but the wheel: a PYTHONPATH of the test run would put a source tree first.
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    job = subprocess.run([str(harness), "--cfg", "job", "batch_size=3"], cwd=work,
                         capture_output=True, text=True, timeout=120, env=clean)
    assert job.returncode == 0, job.stderr
    assert "batch_size: 3" in job.stdout
    assert "harness.workload.model.TransformerModule" in job.stdout
    info = subprocess.run([str(harness), "--info", "searchpath"], cwd=work,
                          capture_output=True, text=True, timeout=120, env=clean)
    assert info.returncode == 0, info.stderr
    assert str(env_dir) in info.stdout and "harness/conf" in info.stdout
