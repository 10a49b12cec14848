"""Faults across hosts, on 3 namespaced hosts x 2 ranks (scripts/cluster.sh), 1 Gbit/s links.

A host's link taken down mid-job, a remote rank stopped (SIGSTOP: alive to the launcher, silent
to its peers) and a remote rank killed: every surviving rank reports the unreachable ranks and
their host within HORO_PEER_TIMEOUT_SECONDS (set short here), the launcher exits non-zero, and
no process of the job is left. Needs root and network namespaces: skips with the reason otherwise.
"""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher import REPO_ROOT, find_mpirun
from test_cluster import _cluster, cluster_up

JOB = REPO_ROOT / "tests" / "mpi" / "cluster_job.py"
NAME = "horof"
HOSTS = "h1:2,h2:2,h3:2"
RUNNING = re.compile(r"rank (\d+): running as pid (\d+) on (\S+)")


@pytest.fixture(scope="module")
def cluster():
    with cluster_up(NAME) as env:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        yield env


class Job:
    """A job on the cluster whose output is watched as it runs: when each rank is running,
    when the first line matching a pattern appears, when the launcher exits."""

    def __init__(self, cmd, env, log):
        self.log = log
        self.out = open(log, "wb")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.out, stderr=subprocess.STDOUT, start_new_session=True)

    def text(self):
        return self.log.read_bytes().decode("utf-8", "replace")

    def ranks_running(self, n, limit=120):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            found = {int(m.group(1)): (int(m.group(2)), m.group(3)) for m in RUNNING.finditer(self.text())}
            if len(found) == n:
                return found
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.kill()
        pytest.fail(f"the ranks did not all start:\n{self.text()[-3000:]}", pytrace=False)

    def wait(self, pattern, limit):
        """(seconds until `pattern` first appeared or None, seconds until the launcher exited or None)."""
        start = time.monotonic()
        seen = None
        while time.monotonic() - start < limit:
            if seen is None and re.search(pattern, self.text()):
                seen = time.monotonic() - start
            if self.proc.poll() is not None:
                if seen is None and re.search(pattern, self.text()):
                    seen = time.monotonic() - start
                return seen, time.monotonic() - start
            time.sleep(0.1)
        return seen, None

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.out.close()


def _launch(env, tmp_path, timeout_s, launcher):
    env = {**env, "HORO_PEER_TIMEOUT_SECONDS": str(timeout_s)}
    if launcher == "horo-run":
        cmd = [str(Path(sys.executable).parent / "horo-run"), "-np", "6", "-H", HOSTS]
    else:
        cmd = [find_mpirun(), "-np", "6", "--host", HOSTS, "-x", "HORO_TEST_TOPOLOGY", "-x", "PYTHONPATH",
               "-x", "HORO_PEER_TIMEOUT_SECONDS"]
    return Job([*cmd, sys.executable, str(JOB), "link_down"], env, tmp_path / "job.log")


def _left_over(pids, within=40):
    """The job's processes still running after `within` s (ranks cut off from their launcher end
    themselves: MPI_Abort two peer timeouts after their own error, peer_watch.cc)."""

    def alive():
        return [p for p in pids if Path(f"/proc/{p}").exists() and b"cluster_job" in Path(f"/proc/{p}/cmdline").read_bytes()]

    deadline = time.monotonic() + within
    while alive() and time.monotonic() < deadline:
        time.sleep(0.5)
    return alive()


def _survivors_named(text, lost, host):
    """The ranks whose error names exactly the `lost` ranks on `host`."""
    ranks = "rank " + lost[0] if len(lost) == 1 else "ranks " + ", ".join(lost)
    pattern = rf"no answer from {ranks} on host {host} within \S+ s \(HORO_PEER_TIMEOUT_SECONDS\) while rank (\d+)"
    return {int(r) for r in re.findall(pattern, text)}


@pytest.mark.timeout(150)
def test_link_down_every_survivor_names_the_lost_host_and_horo_run_fails(cluster, tmp_path):
    job = _launch(cluster, tmp_path, 6, "horo-run")
    try:
        ranks = job.ranks_running(6)
        _cluster("link", "h3", "down", "--name", NAME)
        error_s, exit_s = job.wait(r"no answer from ranks 4, 5 on host h3", 100)
    finally:
        job.kill()
        _cluster("link", "h3", "up", "--name", NAME, check=False)
    text = job.text()
    print(f"link down: first error after {error_s} s, horo-run exited after {exit_s} s")
    assert exit_s is not None, f"horo-run did not exit within 100 s of the link going down:\n{text[-4000:]}"
    assert job.proc.returncode != 0, text[-4000:]
    assert exit_s < 60, f"the job took {exit_s:.0f} s to end after the link went down"
    # ranks 0-3 (h1, h2) name the lost ranks and host; h3's own ranks cannot reach the launcher's output
    assert _survivors_named(text, ["4", "5"], "h3") == {0, 1, 2, 3}, text[-4000:]
    assert "horo-run: lost the connection to host h3" in text, text[-3000:]
    assert not _left_over([pid for pid, _ in ranks.values()])


@pytest.mark.timeout(150)
def test_stopped_remote_rank_every_survivor_names_it_and_mpirun_fails(cluster, tmp_path):
    job = _launch(cluster, tmp_path, 6, "mpirun")
    try:
        ranks = job.ranks_running(6)
        pid, host = ranks[5]
        assert host == "h3"
        os.kill(pid, signal.SIGSTOP)  # alive to its launcher daemon, silent to every peer
        error_s, exit_s = job.wait(r"no answer from rank 5 on host h3", 100)
    finally:
        job.kill()
    text = job.text()
    print(f"stopped rank: first error after {error_s} s, mpirun exited after {exit_s} s")
    assert exit_s is not None and job.proc.returncode != 0, text[-4000:]
    assert _survivors_named(text, ["5"], "h3") == {0, 1, 2, 3, 4}, text[-4000:]
    assert error_s < 20, f"first error {error_s:.0f} s after the rank stopped (timeout 6 s)"
    assert not _left_over([pid for pid, _ in ranks.values()])


@pytest.mark.timeout(120)
def test_killed_remote_rank_horo_run_names_rank_and_host(cluster, tmp_path):
    job = _launch(cluster, tmp_path, 10, "horo-run")
    try:
        ranks = job.ranks_running(6)
        pid, host = ranks[5]
        os.kill(pid, signal.SIGKILL)
        _, exit_s = job.wait(r"$^", 60)
    finally:
        job.kill()
    text = job.text()
    assert exit_s is not None and job.proc.returncode != 0, text[-4000:]
    # Whichever comes first: the launcher reports the signal, or a survivor's MPI the closed connection
    # (naming the peer's host, or, from Open MPI's ob1 layer, aborting without naming it).
    named = (f"horo-run: rank 5 was killed by signal 9 on host {host}",
             f"horo-run: a rank on host {host} disconnected")
    survivor = re.search(r"horo-run: rank (\d+) on host \S+ ended the job: its MPI lost the connection", text)
    assert any(n in text for n in named) or (survivor and survivor.group(1) != "5"), text[-3000:]
    assert not _left_over([pid for pid, _ in ranks.values()])
