"""`harness --help`: Hydra's own text, with the config groups listed from one walk of Hydra's
config repository instead of one deep copy of it per group (issue #22). Copies are counted,
not timed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent

# Runs `harness ARGS` in this interpreter and counts the copies Hydra makes of its config
# repository (CachingConfigRepository deep-copies every registered config). With HYDRA_OWN,
# harness's listing is not installed: Hydra lists the groups its own way, the planted truth.
PROBE = """
import sys
from hydra._internal import config_repository
copies = []
original = config_repository.CachingConfigRepository.__init__
def counted(self, delegate):
    copies.append(1)
    original(self, delegate)
config_repository.CachingConfigRepository.__init__ = counted
from harness import private_api
if sys.argv[1] == 'HYDRA_OWN':
    private_api.list_config_groups_once = lambda: None
from harness.cli import main
sys.argv = ['harness'] + sys.argv[2:]
try:
    main()
except SystemExit:
    pass
print('REPOSITORY_COPIES=%d' % len(copies))
"""


def _help(*args: str, hydra_own: bool = False) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, "HYDRA_OWN" if hydra_own else "-", *args],
                         cwd=TESTS_DIR, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    text, _, count = out.stdout.rpartition("REPOSITORY_COPIES=")
    return text, int(count)


def test_help_is_hydras_text_from_one_repository_copy():
    for args in (("-cd", str(TESTS_DIR / "user_conf"), "--help"), ("--hydra-help",)):
        ours, copies = _help(*args)
        hydras, hydra_copies = _help(*args, hydra_own=True)
        assert ours == hydras, args  # byte for byte
        # composing the config for $CONFIG (1) and the listing (1), not one per group
        assert copies <= 3 < hydra_copies, (args, copies, hydra_copies)
    listed = _help("-cd", str(TESTS_DIR / "user_conf"), "--help")[0]
    assert "model: tiny, transformer\n" in listed  # the user's -cd directory is listed
    assert "profiler: " in listed and "sweep: " in listed  # conf/ and the named sweeps


# `harness ARGS` for each line of stdin, in one interpreter, counting Hydra's compositions.
COMPOSE_PROBE = """
import shlex, sys
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from harness.cli import main
original = ConfigLoaderImpl.load_configuration
for line in sys.stdin:
    composed = []
    def counted(self, *args, **kwargs):
        composed.append(1)
        return original(self, *args, **kwargs)
    ConfigLoaderImpl.load_configuration = counted
    sys.argv = ['harness', *shlex.split(line)]
    try:
        main()
    except SystemExit:
        pass
    print('COMPOSED=%d' % len(composed))
"""


def test_a_run_composes_its_config_once_unless_its_command_can_set_the_run_mode(tmp_path):
    """Hydra composes once more only to read hydra.mode (Hydra.get_mode), which nothing of
    harness's sets (tests/test_config_compose.py). `batch_size=0` ends at the check after
    composing; in one interpreter, so Hydra's own get_mode is back after each command."""
    user_conf = f"-cd {TESTS_DIR / 'user_conf'}"
    commands = ["batch_size=0", "hydra.mode=RUN batch_size=0", f"{user_conf} batch_size=0",
                "-m batch_size=0,1", "hydra.mode=MULTIRUN batch_size=0,1", "batch_size=0"]
    out = subprocess.run([sys.executable, "-c", COMPOSE_PROBE], input="\n".join(commands) + "\n",
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    counts = [int(line.split("=")[1]) for line in out.stdout.splitlines() if line.startswith("COMPOSED=")]
    assert len(counts) == len(commands), out.stderr[-3000:]
    run, run_mode_set, user_config, sweep, sweep_mode_set, run_again = counts
    assert (run, run_mode_set, user_config, run_again) == (1, 2, 2, 1), counts
    assert sweep_mode_set == sweep + 1, counts
