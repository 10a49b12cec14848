"""Runs tests/jobs/killed_rank_job.py under mpirun or horo-run and reports how the job ended:
exit status, output, seconds from rank 1's death to the launcher's exit, processes of the
job still alive, and /dev/shm entries the job left behind. Used by tests/test_killed_rank.py
and scripts/killed_rank_exit_times.py."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from launcher import REPO_ROOT, horo_segments, mpi_env, mpirun_command, segments_left_behind

JOB = REPO_ROOT / "tests" / "jobs" / "killed_rank_job.py"
NP = 3


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def run_killed_rank_job(scenario, launcher="mpirun", transport=None, timeout=120):
    piddir = Path(tempfile.mkdtemp(prefix="horo-killed-"))
    job = [sys.executable, str(JOB), scenario, str(piddir)]
    if launcher == "mpirun":
        cmd = mpirun_command(NP, job)
    else:
        cmd = [sys.executable, "-m", "horo.run", "-np", str(NP)] + job
    env = mpi_env({"HORO_TRANSPORT": transport} if transport else None)
    shm_before = horo_segments()
    proc = subprocess.Popen(cmd, cwd=str(REPO_ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", start_new_session=True)
    try:
        if scenario == "idle":
            deadline = time.monotonic() + timeout
            while not all((piddir / f"ready{r}").exists() for r in range(NP)):
                if proc.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            victim = int((piddir / "rank1.pid").read_text())
            (piddir / "killed_at").write_text(repr(time.time()))
            os.kill(victim, signal.SIGKILL)
        output, _ = proc.communicate(timeout=timeout)
        ended_at = time.time()
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        ended_at, hung = time.time(), True
    except Exception:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    pids = [int(p.read_text()) for p in piddir.glob("rank*.pid")]
    time.sleep(0.5)  # the launcher's children get a moment to be reaped
    killed_at = float((piddir / "killed_at").read_text()) if (piddir / "killed_at").exists() else None
    shutil.rmtree(piddir, ignore_errors=True)
    orphans = [pid for pid in pids if _alive(pid)]
    for pid in orphans:
        os.kill(pid, signal.SIGKILL)
    left = segments_left_behind(shm_before)
    return {
        "rc": proc.returncode,
        "hung": hung,
        "output": output,
        "seconds": None if killed_at is None else ended_at - killed_at,
        "pids": pids,
        "orphans": orphans,
        "shm_left": left,
    }


def transport_known(value):
    """Whether the built core accepts HORO_TRANSPORT=value (the shm transport is issue #12's)."""
    out = subprocess.run([sys.executable, "-c", "import horo; print([t['env'] for t in horo.tunables()])"],
                         capture_output=True, text=True, env=mpi_env(), cwd=str(REPO_ROOT), timeout=120)
    return "HORO_TRANSPORT" in out.stdout
