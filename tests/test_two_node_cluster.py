"""The two-node local SLURM cluster (scripts/local_slurm/start.sh --nodes 2): two network
namespaces joined by a bridge, each node's link shaped by a TBF qdisc.

Its check of the link (scripts/local_slurm/allreduce_check.py, with HARNESS_FULL=1): one rank
on each node, each placed by Lightning's SLURMEnvironment with num_nodes=2, and a gloo allreduce
whose bus bandwidth is the shaped rate's, within 30 % (an unshaped veth gives GB/s, a broken
shaping far less). stop.sh is held to leaving nothing behind. Then the scaling study across the two nodes
(issue 35): a sweep over trainer.num_nodes=1,2 through hydra/launcher=slurm whose 2-node point
has its ranks on both nodes and reads the link's rate off its own gradients' allreduce; and a
rank lost mid-run there (SIGKILLed, or hung) fails its point naming the rank and its node, and
srun leaves no task of it behind.

The session-scoped fixture `two_node_cluster` lives here, as the one-node cluster's lives in
test_slurm.py. A test in another file takes it with `from test_two_node_cluster import
two_node_cluster` and the mark `pytest.mark.xdist_group("slurm2node")` (the cluster is
machine-wide: one pytest-xdist worker runs every test that uses it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import job_results, run_harness, sweep_dir
from step_beacon import run_env

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm2node")]

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts" / "local_slurm"
STATE_DIR = Path(os.environ.get("HARNESS_SLURM2_STATE_DIR", "/tmp/harness-slurm-2node"))
LINK_RATE = "100mbit"  # 12.5 MB/s: an 8 MiB allreduce takes 0.7 s, so the check takes a few s
LINK_BYTES_PER_S = 100e6 / 8
BRIDGE, NODES = "hxslurm0", ("harness-n1", "harness-n2")  # two_node_net.sh's names
TOOLS = ("ip", "tc", "nsenter", "unshare")
SYSTEM_PATH = f"{os.environ.get('PATH', '')}{os.pathsep}/usr/sbin{os.pathsep}/sbin"


@dataclass(frozen=True)
class TwoNodeCluster:
    """A running two-node cluster: `env` is what talks to it (SLURM_CONF, the sacct shim on
    PATH, tests/ importable); `nodes` are SLURM's node names, which are also the hostnames."""

    env: dict[str, str]
    state_dir: Path
    nodes: tuple[str, ...]
    link_rate: str


def needs_root() -> None:
    """Skip, in one line, where the two-node cluster cannot start."""
    if os.geteuid() != 0:
        pytest.skip("the two-node local SLURM cluster needs root (network namespaces, slurmd)")
    missing = [t for t in TOOLS if shutil.which(t, path=SYSTEM_PATH) is None]
    if shutil.which("sbatch") is None and shutil.which("apt-get") is None:
        missing.append("SLURM (and apt-get to install it)")
    if missing:
        pytest.skip(f"the two-node local SLURM cluster needs {', '.join(missing)}")


def script(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPTS / name), *args], capture_output=True, text=True,
                          timeout=900, env=env)


def leftovers() -> list[str]:
    """What of the two-node cluster still exists on this machine."""
    def out(*command: str) -> str:
        return subprocess.run(command, capture_output=True, text=True, env={"PATH": SYSTEM_PATH}).stdout

    found = [f"netns {n}" for n in NODES if n in out("ip", "netns", "list").split()]
    links = out("ip", "-o", "link", "show")
    found += [f"link {name}" for name in (BRIDGE, "hxslurm-n1", "hxslurm-n2") if f" {name}:" in links]
    found += [f"/etc/hosts: {line}" for line in Path("/etc/hosts").read_text().splitlines()
              if any(n in line.split() for n in NODES)]
    for pid_file in [*STATE_DIR.glob("slurmd*.pid"), STATE_DIR / "slurmctld.pid",
                     STATE_DIR / "munge" / "munged.pid"]:
        pid = pid_file.read_text().strip() if pid_file.exists() else ""
        stat = Path(f"/proc/{pid}/stat")
        if pid.isdigit() and stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] not in "ZX":
            found.append(f"process {pid} of {pid_file.name}")
    return found


@pytest.fixture(scope="session")
def two_node_cluster() -> Any:
    """The two-node cluster at LINK_RATE, started once per session; stopped at its end (also
    after a failure) if this session started it, and then nothing of it may be left."""
    needs_root()
    machine = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # as test_slurm.py
    start = script("start.sh", "--nodes", "2", "--link-rate", LINK_RATE, str(STATE_DIR), env=machine)
    if start.returncode != 0:
        script("stop.sh", "--nodes", "2", str(STATE_DIR))  # what it made before it failed
        pytest.fail(f"scripts/local_slurm/start.sh --nodes 2 failed:\n{start.stderr[-3000:]}")
    env = {**run_env(), "SLURM_CONF": str(STATE_DIR / "slurm.conf"),
           "PATH": f"{STATE_DIR / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    yield TwoNodeCluster(env, STATE_DIR, NODES, LINK_RATE)
    if "cluster up" in start.stderr:  # stop only a cluster this session started
        stop = script("stop.sh", "--nodes", "2", str(STATE_DIR))
        assert stop.returncode == 0, stop.stderr
        assert leftovers() == [], f"stop.sh --nodes 2 left: {leftovers()}"


@pytest.fixture(scope="module")
def link_check(two_node_cluster: TwoNodeCluster) -> dict[str, Any]:
    if os.environ.get("HARNESS_FULL") != "1":
        pytest.skip("the link check's own report: HARNESS_FULL=1 runs it (in CI the scaling sweep below"
                    " shows ranks on both nodes, SLURMEnvironment and the shaped link's busbw)")
    done = subprocess.run([sys.executable, str(SCRIPTS / "allreduce_check.py"), "--json", "--mib=8",
                           "--iters=4", "--warmup=1", f"--link-rate={two_node_cluster.link_rate}"],
                          capture_output=True, text=True, timeout=300, env=two_node_cluster.env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_ranks_run_on_two_nodes_with_their_own_names_and_addresses(link_check, two_node_cluster):
    ranks = link_check["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert [r["hostname"] for r in ranks] == list(two_node_cluster.nodes)
    assert [r["slurm_nodename"] for r in ranks] == list(two_node_cluster.nodes)
    assert len({r["address"] for r in ranks}) == 2
    assert not any(r["address"].startswith("127.") for r in ranks)  # gloo would advertise it


def test_lightning_slurm_environment_sees_two_nodes(link_check, two_node_cluster):
    # allreduce_check.py also had SLURMEnvironment.validate_settings accept num_nodes=2
    for rank, fact in enumerate(link_check["ranks"]):
        light = fact["lightning"]
        assert light["detected"] and light["num_nodes"] == 2
        assert (light["world_size"], light["global_rank"], light["node_rank"]) == (2, rank, rank)
        assert light["main_address"] == two_node_cluster.nodes[0]


def test_allreduce_bus_bandwidth_is_the_shaped_link_rate(link_check):
    result = link_check["allreduce"]
    assert result["correct"] and result["ranks"] == 2 and result["bytes"] == 8 * 2**20
    assert 0.7 * LINK_BYTES_PER_S <= result["busbw_Bps"] <= 1.3 * LINK_BYTES_PER_S, (
        f"busbw {result['busbw_Bps'] / 1e6:.2f} MB/s on a {LINK_RATE} link ({LINK_BYTES_PER_S / 1e6} MB/s)")


@pytest.mark.parametrize(("args", "says"), [
    (("--nodes", "2", "--link-rate", "fast"), "--link-rate fast: give a number and kbit, mbit or gbit"),
    (("--link-rate", "100mbit"), "--link-rate needs --nodes 2"),
    (("--nodes", "3"), "--nodes 3: 1 (localhost) or 2"),
])
def test_start_refuses_bad_options_in_one_line(args, says):
    done = script("start.sh", *args)  # checked before root is needed, before anything is made
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and lines[0].startswith(f"start.sh: ERROR: {says}")


@pytest.mark.parametrize(("made_for", "nodes"), [("1", "2"), ("2", "1")])
def test_a_state_dir_serves_one_kind_of_cluster(tmp_path, made_for, nodes):
    needs_root()
    # a one-node dir has only its slurm.conf (made before the mode file existed); a two-node one says 2
    (tmp_path / "slurm.conf").write_text("# made by start.sh\n")
    if made_for == "2":
        (tmp_path / "nodes").write_text("2\n")
    done = script("start.sh", "--nodes", nodes, str(tmp_path))
    assert done.returncode == 1
    says = f"{tmp_path} holds a {made_for}-node cluster; give --nodes {nodes} another STATE_DIR"
    assert says in done.stderr
    assert (tmp_path / "slurm.conf").read_text() == "# made by start.sh\n"  # refused before writing
    bridge = subprocess.run(["ip", "-o", "link", "show", BRIDGE], capture_output=True, text=True,
                            env={"PATH": SYSTEM_PATH}).stdout
    assert str(tmp_path) not in bridge  # nor did it take the two-node network


# tests/scaling_workload.py, one rank a node: 0.1 s of forward a step; the allreduce's cost is
# the link's. Its gradients: 10 x width + 1 floats, 8 MiB: 0.67 s a step at 100mbit.
WIDTH = 209715
STUDY = ("-m", "sweep=scaling", "hydra/launcher=slurm", "trainer.devices=1",
         "model._target_=scaling_workload.PlantedScaling", "data._target_=scaling_workload.PlantedBatches",
         "+trainer.use_distributed_sampler=false", "trainer.accelerator=cpu", "logger=none",
         "profiler.speed.warmup_steps=2", "trainer.enable_progress_bar=false", "repeat=1",
         "mode=train", "+data.batches=8", "hydra.launcher.cpus_per_task=1")


def test_a_scaling_sweep_over_nodes_reads_the_link_rate_from_its_own_allreduce(two_node_cluster, tmp_path):
    done = run_harness(tmp_path, *STUDY, "trainer.num_nodes=1,2", f"+model.width={WIDTH}",
                       "+model.comm_s=0", fast=False, env=two_node_cluster.env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    root = sweep_dir(tmp_path)
    jobs = {r["distributed"]["num_nodes"] if r.get("distributed") else 1: r
            for r in job_results(root).values()}
    assert sorted(jobs) == [1, 2] and all(r["status"] == "ok" for r in jobs.values()), jobs
    two = jobs[2]
    assert two["distributed"]["cluster_environment"] == "SLURMEnvironment"
    assert [r["node"] for r in two["scaling"]["ranks"]] == list(two_node_cluster.nodes)
    comm = two["scaling"]["comm"]
    assert comm["bytes_per_step"] == (10 * WIDTH + 1) * 4
    # 2 ranks: busbw = algbw, what each node's link carried while the buckets were in flight
    assert 0.7 * LINK_BYTES_PER_S <= comm["busbw_bytes_per_s"] <= 1.3 * LINK_BYTES_PER_S, (
        f"busbw {comm['busbw_bytes_per_s'] / 1e6:.2f} MB/s on a {LINK_RATE} link")
    study = json.loads((root / "scaling.json").read_text())
    assert [p["world_size"] for p in study["points"]] == [1, 2]


@pytest.mark.skipif(os.environ.get("HARNESS_FULL") != "1",
                    reason="90 s of hung and killed ranks on two nodes: HARNESS_FULL=1 runs it"
                    " (tests/test_ddp_faults.py kills a rank on one node in CI)")
def test_a_rank_lost_on_the_other_node_fails_its_point_naming_it_and_leaves_no_task(
        two_node_cluster, tmp_path):
    """Rank 1 (on harness-n2) SIGKILLed at step 3, then in the next job stopped (SIGSTOP: a hung
    rank, which gloo only notices at the process group's timeout, here 15 s). Both points fail
    naming rank 1 and its node; srun ends the hung task SLURM_WAIT s after rank 0's (25 s here:
    more than rank 0's 10 s wait for the lost rank's word)."""
    name = f"harness-lost-{os.getpid()}"
    env = {**two_node_cluster.env, "SLURM_WAIT": "25"}
    done = run_harness(tmp_path, *STUDY, "trainer.num_nodes=2", "+model.kill_rank=1",
                       "+model.kill_at_step=3", "+model.kill_with=SIGKILL,SIGSTOP",
                       "trainer.strategy.timeout.seconds=15", f"hydra.launcher.name={name}",
                       fast=False, env=env, timeout=600)
    root = sweep_dir(tmp_path)
    jobs = {next(o for o in r["overrides"] if "kill_with" in o).split("=")[1]: r
            for r in job_results(root).values()}
    said = f"rank 1 (node {two_node_cluster.nodes[1]}) was lost mid-run without a word"
    for how in ("SIGKILL", "SIGSTOP"):  # rank 0, on the other node, knows no more
        assert jobs[how]["status"] == "failed" and jobs[how]["reason"].startswith(said), jobs[how]
    assert jobs["SIGKILL"]["duration_s"] < 60  # the peer's loss is seen at once; 10 s for its word
    assert "2 failed" in done.stderr, done.stderr[-3000:]
    deadline = time.monotonic() + 120  # the hung task: SLURM_WAIT after rank 0's end
    while _squeue(env, "-n", name, "-t", "PD,R,CG") and time.monotonic() < deadline:
        time.sleep(1)
    assert _squeue(env, "-n", name, "-t", "PD,R,CG") == []
    left = [p.info for p in psutil.process_iter(["pid", "cmdline"])
            if any(str(root) in part for part in p.info["cmdline"] or ())]
    assert left == [], f"processes of the sweep outlived it: {left}"


def _squeue(env: dict[str, str], *args: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", *args], env=env, capture_output=True, text=True, timeout=30)
    return out.stdout.split()
