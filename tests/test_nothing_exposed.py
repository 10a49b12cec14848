"""Nothing exposed (issue #14, item 6): while a 2-rank job runs collectives, no socket listens
in the rank processes (on the default shared-memory path and on HORO_TRANSPORT=mpi); the
shared-memory segments the ranks map are mode 0600 and already unlinked from /dev/shm; and
horo-run hands user arguments to the program as an argv list, never through a shell.

Open MPI's own runtime (prterun/prted/PMIx) listens, in processes of its own: the check is
on the ranks' pids only. Open MPI's TCP BTL, though, opens a listener inside each rank
process (0.0.0.0, seen here with `ss -ltnp`): it is MPI's, not horo's, and one host does not
need it, so these jobs run with OMPI_MCA_btl=^tcp,ofi (excluded by name, valid on Open MPI 4 and 5; no ofi: as horo-run on one host).
"""
import glob
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from launcher import REPO_ROOT, mpi_env, mpirun_command

# Keeps running collectives (rank 0 decides when to stop, so every rank stops at the same
# iteration) until the driver has looked at it.
JOB = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    import horo

    piddir = sys.argv[1]
    horo.init()
    horo.allreduce(np.ones(1 << 16, np.float32), name="warm")
    with open(os.path.join(piddir, f"rank{horo.rank()}.pid"), "w") as f:
        f.write(str(os.getpid()))
    i = 0
    while True:
        stop = np.array([os.path.exists(os.path.join(piddir, "stop"))], np.int32)
        if horo.broadcast(stop, 0, name=f"stop.{i}")[0]:
            break
        out = horo.allreduce(np.full(1 << 14, horo.rank(), np.float32), op=horo.Sum, name=f"busy.{i}")
        assert out[0] == sum(range(horo.size()))
        i += 1
        time.sleep(0.02)
    """
)


def _listening_inodes():
    """socket inode -> description, for every listening TCP socket, bound UDP socket and
    listening unix socket of this network namespace."""
    out = {}
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        try:
            lines = open(f"/proc/net/{proto}").read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            f = line.split()
            state, inode = f[3], f[9]
            # TCP 0A = LISTEN; a UDP socket in state 07 (unconnected) with a local port receives from anyone
            if (proto.startswith("tcp") and state == "0A") or (proto.startswith("udp") and state == "07"):
                out[inode] = f"{proto} {f[1]}"
    for line in open("/proc/net/unix").read().splitlines()[1:]:
        f = line.split()
        flags, inode = int(f[3], 16), f[6]
        if flags & 0x10000:  # __SO_ACCEPTCON: a listening unix socket
            out[inode] = "unix " + (f[7] if len(f) > 7 else "(unnamed)")
    return out


def _socket_inodes(pid):
    inodes = set()
    for fd in glob.glob(f"/proc/{pid}/fd/*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _mapped_segments(pid):
    """(path, mode) of the horo shared-memory segments `pid` has mapped."""
    out = {}
    for line in open(f"/proc/{pid}/maps"):
        f = line.split()
        if len(f) >= 6 and "/horo-" in f[5]:
            out[" ".join(f[5:])] = stat.S_IMODE(os.stat(f"/proc/{pid}/map_files/{f[0]}").st_mode)
    return out


def _run_job_and_inspect(tmp_path, env):
    piddir = tmp_path / "pids"
    piddir.mkdir()
    cmd = mpirun_command(2, [sys.executable, "-c", JOB, str(piddir)])
    proc = subprocess.Popen(cmd, cwd=str(REPO_ROOT), env=mpi_env(dict(env, OMPI_MCA_btl="^tcp,ofi")),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while len(list(piddir.glob("rank*.pid"))) < 2:
            assert proc.poll() is None, f"the job ended early:\n{proc.stdout.read()[-4000:]}"
            assert time.monotonic() < deadline, "the ranks did not start within 90 s"
            time.sleep(0.1)
        time.sleep(0.5)  # both ranks are in the collective loop now
        pids = [int(p.read_text()) for p in sorted(piddir.glob("rank*.pid"))]
        listening = _listening_inodes()
        sockets = {pid: sorted(listening[i] for i in _socket_inodes(pid) if i in listening) for pid in pids}
        segments = {pid: _mapped_segments(pid) for pid in pids}
        linked = {pid: glob.glob(f"/dev/shm/horo-{pid}-*") for pid in pids}
        (piddir / "stop").write_text("")
        output, _ = proc.communicate(timeout=60)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == 0, f"the job failed:\n{output[-4000:]}"
    return sockets, segments, linked


@pytest.mark.timeout(180)
@pytest.mark.parametrize("transport", ["default", "mpi"])
def test_no_socket_listens_in_the_rank_processes(tmp_path, transport):
    env = {} if transport == "default" else {"HORO_TRANSPORT": "mpi"}
    sockets, segments, linked = _run_job_and_inspect(tmp_path, env)
    assert all(not s for s in sockets.values()), f"listening sockets in rank processes: {sockets}"
    # segments: whatever a rank maps is private to the user and already gone from /dev/shm
    for pid, mapped in segments.items():
        for path, mode in mapped.items():
            assert path.endswith("(deleted)"), f"rank pid {pid}: {path} is still linked in /dev/shm"
            assert mode == 0o600, f"rank pid {pid}: {path} has mode {oct(mode)}"
    assert all(not paths for paths in linked.values()), f"segments left linked in /dev/shm: {linked}"
    if transport == "default":  # one host: the shared-memory transport serves the job
        assert all(segments.values()), f"no horo segment mapped on the default path: {segments}"


SHOW_ARGV = "import json, sys; print('ARGV=' + json.dumps(sys.argv[1:]), flush=True)"


@pytest.mark.timeout(120)
def test_horo_run_passes_arguments_as_an_argv_list(tmp_path):
    marker_a, marker_b, marker_c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    args = [f"x; touch {marker_a}", f"$(touch {marker_b})", f"`touch {marker_c}`", "two words", "*", "'q'", ""]
    env = mpi_env({"OMPI_MCA_btl": "^tcp,ofi"})
    proc = subprocess.run([sys.executable, "-m", "horo.run", "-np", "2", sys.executable, "-c", SHOW_ARGV, *args],
                          cwd=str(REPO_ROOT), env=env, capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = [json.loads(line[5:]) for line in proc.stdout.splitlines() if line.startswith("ARGV=")]
    assert seen == [args, args], f"the program got {seen}, not {args}"
    assert not any(m.exists() for m in (marker_a, marker_b, marker_c)), "a shell ran an argument"
