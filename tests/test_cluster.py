"""Multi-host on one machine: 3 namespaced hosts x 2 ranks (scripts/cluster.sh), 1 Gbit/s links.

Every collective over several dtypes against NumPy, hierarchical and flat, bit-identical
on every rank, on process sets spanning hosts too; the user's own MPI (mpi4py) after horo;
launched by `horo-run -H`, `horo-run --hostfile` and plain `mpirun --host`; the torch and Keras
examples train across the hosts; a remote rank killed mid-job ends the job with a non-zero
exit; cluster up/down idempotent. Needs root and network namespaces: skips with the reason otherwise.
"""
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher import REPO_ROOT, find_mpirun, mpi_env

CLUSTER = REPO_ROOT / "scripts" / "cluster.sh"
JOB = REPO_ROOT / "tests" / "mpi" / "cluster_job.py"
NAME = "horot"  # its own cluster name: a developer's `horoc` cluster is left alone


def _cluster(*args, check=True):
    return subprocess.run(["bash", str(CLUSTER), *args], capture_output=True, text=True, timeout=120, check=check)


def _why_no_cluster():
    if os.geteuid() != 0:
        return "needs root (network namespaces, veths, tc)"
    for tool in ("unshare", "nsenter", "ip", "tc"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode:
            return f"needs '{tool}'"
    probe = subprocess.run(["unshare", "--net", "--uts", "--mount", "true"], capture_output=True, text=True)
    if probe.returncode:
        return f"cannot create namespaces here: {probe.stderr.strip()}"
    return None


@contextlib.contextmanager
def cluster_up(name):
    """3 hosts with 1 Gbit/s links, named `name` (skips the test where none can be made): yields
    the environment that runs mpirun across them, and takes them down afterwards."""
    why = _why_no_cluster()
    if why:
        pytest.skip(f"namespaced cluster unavailable: {why}")
    up = _cluster("up", "3", "--rate", "1gbit", "--name", name)
    env = mpi_env({"HORO_TEST_TOPOLOGY": "2x3"})
    for line in up.stdout.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    # the test launcher's single-host settings do not apply across hosts
    for key in ("OMPI_MCA_rmaps_base_oversubscribe", "PRTE_MCA_rmaps_default_mapping_policy"):
        env.pop(key, None)
    try:
        yield env
    finally:
        _cluster("down", "--name", name, check=False)


@pytest.fixture(scope="module")
def cluster():
    with cluster_up(NAME) as env:
        yield env


def _run(cmd, env, timeout):
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, errors="replace")
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"")[-4000:]
        pytest.fail(f"{' '.join(cmd)} HUNG past {timeout}s:\n{out}", pytrace=False)
    return proc, time.monotonic() - start


def _mpirun_job(env, mode, extra_env=(), launcher="mpirun", timeout=240, hostfile=None):
    exports = []
    for key, value in extra_env:
        env = {**env, key: value}
        exports += ["-x", key]
    if launcher == "horo-run":
        hosts = ["--hostfile", str(hostfile)] if hostfile else ["-H", "h1:2,h2:2,h3:2"]
        cmd = [str(Path(sys.executable).parent / "horo-run"), "-np", "6", *hosts]
    else:
        cmd = [find_mpirun(), "-np", "6", "--host", "h1:2,h2:2,h3:2", "-x", "HORO_TEST_TOPOLOGY",
               "-x", "PYTHONPATH", *exports]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return _run([*cmd, sys.executable, str(JOB), mode], env, timeout)


@pytest.mark.timeout(300)
def test_collectives_hierarchical_across_hosts_with_horo_run(cluster, tmp_path):
    timeline = tmp_path / "timeline.json"
    proc, _ = _mpirun_job(cluster, "collectives", [("HORO_HIERARCHICAL_ALLREDUCE", "1"),
                                                    ("HORO_TIMELINE", str(timeline))], launcher="horo-run")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count(": ok") == 6
    assert {f"on h{i}: ok" in proc.stdout for i in (1, 2, 3)} == {True}
    # the timeline names the topology and the two-level path
    events = json.loads(timeline.read_text())
    labels = [e["args"]["labels"] for e in events if e.get("name") == "process_labels"]
    assert labels and labels[0].startswith("6 ranks = 3 host(s) x 2 local ranks"), labels
    assert "hierarchical" in labels[0]
    names = {e["name"] for e in events}
    assert {"HIERARCHICAL_ALLREDUCE", "HIERARCHICAL_ALLGATHERV"} <= names, names


@pytest.mark.timeout(300)
def test_hostfile_across_hosts_with_horo_run(cluster, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("h1 slots=2\nh2 slots=2\nh3 slots=2\n")  # Horovod's syntax
    proc, _ = _mpirun_job(cluster, "collectives", launcher="horo-run", hostfile=hostfile)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert {f"on h{i}: ok" in proc.stdout for i in (1, 2, 3)} == {True}, proc.stdout[-3000:]


@pytest.mark.timeout(400)
def test_torch_and_keras_examples_train_across_hosts(cluster, tmp_path):
    env = {**cluster, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), cluster.get("PYTHONPATH")]))}
    run = [str(Path(sys.executable).parent / "horo-run"), "-np", "6", "-H", "h1:2,h2:2,h3:2", sys.executable]
    torch_job, _ = _run([*run, str(REPO_ROOT / "examples" / "pytorch_digits.py"), "--epochs", "3",
                         "--checkpoint", str(tmp_path / "digits.pt")], env, 180)
    assert torch_job.returncode == 0, torch_job.stdout[-3000:] + torch_job.stderr[-3000:]
    assert "on 6 rank(s)" in torch_job.stdout and "epoch  3/3" in torch_job.stdout, torch_job.stdout[-3000:]
    keras_job, _ = _run([*run, str(REPO_ROOT / "examples" / "keras_digits.py"), "--epochs", "3",
                         "--save", str(tmp_path / "digits.keras")], env, 180)
    assert keras_job.returncode == 0, keras_job.stdout[-3000:] + keras_job.stderr[-3000:]
    # every rank evaluates the same averaged weights
    assert "ranks: 6" in keras_job.stdout and "same on every rank: True" in keras_job.stdout, keras_job.stdout[-3000:]


@pytest.mark.timeout(300)
def test_collectives_flat_across_hosts_with_mpirun(cluster):
    proc, _ = _mpirun_job(cluster, "collectives", [("HORO_HIERARCHICAL_ALLREDUCE", "0"),
                                                    ("HORO_HIERARCHICAL_ALLGATHER", "0")])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count(": ok") == 6


@pytest.mark.timeout(300)
def test_check_build_shows_each_ranks_host_local_and_cross_rank(cluster):
    env = {**cluster, "PYTHONPATH": str(REPO_ROOT)}
    cmd = [str(Path(sys.executable).parent / "horo-run"), "-np", "6", "-H", "h1:2,h2:2,h3:2", "--check-build"]
    proc, _ = _run(cmd, env, 240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Topology (6 ranks on 3 host(s), transport hierarchical" in proc.stdout, proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [(r[1], r[2], r[3]) for r in rows] == [(f"h{1 + k // 2}", f"{k % 2}/2", f"{k // 2}/3") for k in range(6)]


@pytest.mark.timeout(300)
def test_killed_remote_rank_ends_the_job_with_an_error(cluster):
    proc, took = _mpirun_job(cluster, "killed", timeout=180)
    assert proc.returncode != 0
    assert took < 120, f"the job took {took:.0f}s to end after a remote rank died"
    assert "exited" in proc.stdout + proc.stderr or "non-zero" in proc.stdout + proc.stderr


@pytest.mark.timeout(180)
def test_cluster_up_down_is_idempotent_and_leaves_nothing():
    why = _why_no_cluster()
    if why:
        pytest.skip(f"namespaced cluster unavailable: {why}")
    name = "horou"
    try:
        for _ in range(2):
            _cluster("up", "2", "--name", name)
        status = _cluster("status", "--name", name).stdout
        assert "h1 pid" in status and "h2 pid" in status, status
        host = _cluster("exec", "h2", "hostname", "--name", name).stdout.strip()
        assert host == "h2"
    finally:
        _cluster("down", "--name", name)
        _cluster("down", "--name", name)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f"{name}br" not in links and f"{name}v" not in links, links
    holders = subprocess.run(["pgrep", "-f", f"horo-cluster-holder {name}"], capture_output=True, text=True)
    assert holders.stdout.strip() == "", holders.stdout
    assert not Path(f"/run/horo-cluster/{name}").exists()
