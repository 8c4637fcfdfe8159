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
