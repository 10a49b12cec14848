"""horo-run, the launcher: the command it builds for each MPI, and real launches.

Command lines are checked against fake launchers (a shell script answering
`--version` the way Open MPI's mpirun or MPICH's Hydra mpiexec does), so both
dialects are tested without MPICH installed; the real launches use the mpirun
horo-run finds itself (next to this Python, then PATH).
"""
import importlib.util
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from launcher import REPO_ROOT

OPENMPI_VERSION = "mpirun (Open MPI) 5.0.3\n\nReport bugs to https://www.open-mpi.org/community/help/\n"
HYDRA_VERSION = "HYDRA build details:\n    Version:                                 4.1.2\n"

BASE_ENV = {"PATH": "/venv/bin:/usr/bin", "HOME": "/root"}


def _fake_launcher(directory, name, version_text):
    path = directory / name
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{version_text}EOF\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def openmpi(tmp_path):
    return _fake_launcher(tmp_path, "mpirun", OPENMPI_VERSION)


@pytest.fixture
def hydra(tmp_path):
    return _fake_launcher(tmp_path, "mpiexec", HYDRA_VERSION)


def build(mpirun, *argv, env=BASE_ENV, as_root=False, local_slots=4):
    """The argv horo-run would run, for this machine's stand-ins (env, root, cores)."""
    from horo.run import command, launcher

    args = launcher.make_parser({}).parse_args(["--mpirun", mpirun, *argv])
    spec = launcher.spec_from_args(args, env=env, as_root=as_root, local_slots=local_slots)
    return command.build_command(spec)


def horo_run(*argv, env=None, timeout=90, **kwargs):
    """`python -m horo.run ...` in a fresh process; returns the CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", "horo.run", *argv],
        check=False,
        cwd=str(REPO_ROOT),
        env=job_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


def job_env(extra=None):
    """This environment, minus any outer MPI job's and horo's settings; idle ranks
    yield the CPU (two ranks may share one core here). Root and oversubscription
    are left for horo-run to handle."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OMPI_", "PRTE_", "PMIX_", "PMI_", "HORO_", "HOROVOD_"))
    }
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["OMPI_MCA_mpi_yield_when_idle"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


# --- Open MPI's command line ---------------------------------------------------


@pytest.mark.timeout(30)
def test_openmpi_command_forwards_environment_and_sets_tunables(openmpi):
    env = dict(
        BASE_ENV,
        PYTHONPATH="/src",
        LD_LIBRARY_PATH="/opt/lib",
        HORO_CYCLE_TIME="9",  # the flag below wins over it
        HORO_RING_MIN_BYTES="1024",
        HOROVOD_FUSION_THRESHOLD="0",
        OMPI_MCA_btl="self,tcp",  # mpirun reads it itself: not forwarded
        UNRELATED="x",
    )
    cmd = build(
        openmpi, "-np", "2",
        "--fusion-threshold-mb", "32", "--cycle-time-ms", "2.5", "--cache-capacity", "0",
        "--timeline-filename", "/tmp/tl.json", "--stall-check-time", "30",
        "--stall-shutdown-time", "120", "--log-level", "DEBUG", "--allreduce-algo", "ring",
        "python", "train.py", "--lr", "0.1",
        env=env,
    )
    assert cmd == [
        openmpi, "-np", "2", "--bind-to", "none", "--map-by", "slot",
        "-x", "PATH", "-x", "PYTHONPATH", "-x", "LD_LIBRARY_PATH",
        "-x", "HOROVOD_FUSION_THRESHOLD", "-x", "HORO_RING_MIN_BYTES",  # sorted by name
        "-x", "HORO_FUSION_THRESHOLD=33554432", "-x", "HORO_CYCLE_TIME=2.5",
        "-x", "HORO_CACHE_CAPACITY=0", "-x", "HORO_TIMELINE=/tmp/tl.json",
        "-x", "HORO_STALL_CHECK_TIME_SECONDS=30", "-x", "HORO_STALL_SHUTDOWN_TIME_SECONDS=120",
        "-x", "HORO_LOG_LEVEL=debug", "-x", "HORO_ALLREDUCE_ALGO=ring",
        "python", "train.py", "--lr", "0.1",
    ]  # fmt: skip


@pytest.mark.timeout(30)
def test_openmpi_allows_root_only_when_root(openmpi):
    assert "--allow-run-as-root" in build(openmpi, "-np", "1", "python", "t.py", as_root=True)
    assert "--allow-run-as-root" not in build(openmpi, "-np", "1", "python", "t.py", as_root=False)


@pytest.mark.timeout(30)
def test_oversubscribe_only_when_ranks_exceed_local_cores_or_asked(openmpi):
    assert "--oversubscribe" not in build(openmpi, "-np", "4", "python", "t.py", local_slots=4)
    assert "--oversubscribe" in build(openmpi, "-np", "5", "python", "t.py", local_slots=4)
    assert "--oversubscribe" in build(openmpi, "-np", "1", "--oversubscribe", "python", "t.py", local_slots=4)


@pytest.mark.timeout(30)
def test_openmpi_host_list_slots_are_summed(openmpi):
    cmd = build(openmpi, "-np", "4", "-H", "node1:2,node2:2", "python", "t.py", local_slots=1)
    assert cmd[:5] == [openmpi, "-np", "4", "-H", "node1:2,node2:2"]
    assert "--oversubscribe" not in cmd
    assert "--oversubscribe" in build(openmpi, "-np", "5", "-H", "node1:2,node2:2", "python", "t.py")
    # a host without a count is one slot; -np defaults to all slots
    cmd = build(openmpi, "-H", "node1,node2:3", "python", "t.py")
    assert cmd[:5] == [openmpi, "-np", "4", "-H", "node1:1,node2:3"]
    assert "--oversubscribe" not in cmd


@pytest.mark.timeout(30)
def test_openmpi_hostfile_is_passed_and_its_slots_summed(openmpi, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# cluster\nnode1 slots=2\n\nnode2 slots=3  # the big one\nnode3\n")
    cmd = build(openmpi, "-np", "6", "--hostfile", str(hostfile), "python", "t.py", local_slots=64)
    assert cmd[:5] == [openmpi, "-np", "6", "--hostfile", str(hostfile)]
    assert "--oversubscribe" not in cmd
    assert "--oversubscribe" in build(openmpi, "-np", "7", "--hostfile", str(hostfile), "python", "t.py")


@pytest.mark.timeout(30)
def test_openmpi_gets_a_host_list_for_a_hydra_style_hostfile(openmpi, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1:2\nnode2:2\n")
    cmd = build(openmpi, "-np", "4", "--hostfile", str(hostfile), "python", "t.py")
    assert cmd[:5] == [openmpi, "-np", "4", "-H", "node1:2,node2:2"]


# --- MPICH / Hydra's command line ----------------------------------------------


@pytest.mark.timeout(30)
def test_hydra_command_uses_genv_and_envlist(hydra):
    env = dict(BASE_ENV, PYTHONPATH="/src", HOROVOD_LOG_LEVEL="info", OMPI_MCA_btl="tcp")
    cmd = build(hydra, "-np", "3", "--cycle-time-ms", "5", "--allreduce-algo", "mpi",
                "python", "train.py", env=env, as_root=True, local_slots=1)
    assert cmd == [
        hydra, "-np", "3",
        "-genv", "HORO_CYCLE_TIME", "5", "-genv", "HORO_ALLREDUCE_ALGO", "mpi",
        "-envlist", "PATH,PYTHONPATH,HOROVOD_LOG_LEVEL",
        "python", "train.py",
    ]  # fmt: skip


@pytest.mark.timeout(30)
def test_hydra_hosts_and_hostfiles(hydra, tmp_path):
    cmd = build(hydra, "-np", "8", "-H", "node1:2,node2:2", "python", "t.py")
    assert cmd[:5] == [hydra, "-np", "8", "-hosts", "node1:2,node2:2"]
    assert "--oversubscribe" not in cmd  # Hydra wraps around the slots by itself
    hydra_file = tmp_path / "hydra_hosts"
    hydra_file.write_text("node1:2\nnode2:2\n")
    assert build(hydra, "-np", "4", "--hostfile", str(hydra_file), "python", "t.py")[3:5] == ["-f", str(hydra_file)]
    openmpi_file = tmp_path / "openmpi_hosts"
    openmpi_file.write_text("node1 slots=2\nnode2 slots=4\n")
    cmd = build(hydra, "-np", "6", "--hostfile", str(openmpi_file), "python", "t.py")
    assert cmd[3:5] == ["-hosts", "node1:2,node2:4"]


@pytest.mark.timeout(30)
def test_mpi_flavor_option_overrides_detection(openmpi):
    cmd = build(openmpi, "--mpi-flavor", "mpich", "-np", "2", "python", "t.py")
    assert "-envlist" in cmd and "--bind-to" not in cmd


# --- the command-line tool itself ----------------------------------------------


@pytest.mark.timeout(60)
def test_dry_run_prints_the_shell_quoted_command_and_exits_0(hydra):
    proc = horo_run("--mpirun", hydra, "--dry-run", "-np", "2", "python", "-c", "print('a b')")
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert shlex.split(line)[:3] == [hydra, "-np", "2"]
    assert shlex.split(line)[-3:] == ["python", "-c", "print('a b')"]


@pytest.mark.timeout(60)
def test_dry_run_as_root_allows_root_on_open_mpi(openmpi):
    if os.geteuid() != 0:
        pytest.skip("checks the root flag")
    proc = horo_run("--mpirun", openmpi, "--dry-run", "-np", "1", "python", "t.py")
    assert proc.returncode == 0, proc.stderr
    assert "--allow-run-as-root" in shlex.split(proc.stdout)


@pytest.mark.timeout(60)
def test_usage_errors_exit_2_and_say_why(openmpi, tmp_path):
    bad = horo_run("--mpirun", openmpi, "--dry-run", "-np", "2", "-H", "node1:two", "python", "t.py")
    assert bad.returncode == 2 and "node1:two" in bad.stderr and "'two'" in bad.stderr
    missing = horo_run("--mpirun", openmpi, "--dry-run", "--hostfile", str(tmp_path / "nope"), "python", "t.py")
    assert missing.returncode == 2 and "nope" in missing.stderr
    no_program = horo_run("--mpirun", openmpi, "--dry-run", "-np", "2")
    assert no_program.returncode == 2 and "no program" in no_program.stderr
    algo = horo_run("--mpirun", openmpi, "--dry-run", "-np", "2", "--allreduce-algo", "tree", "python", "t.py")
    assert algo.returncode == 2 and "tree" in algo.stderr


@pytest.mark.timeout(30)
def test_every_tunable_flag_sets_a_variable_the_core_reads():
    import horo
    from horo.run.tunable_flags import TUNABLE_FLAGS

    core_vars = {row["env"] for row in horo.tunables()}
    unknown = {f.env for f in TUNABLE_FLAGS} - core_vars
    assert not unknown, f"flags set variables the core does not read: {unknown}"


@pytest.mark.timeout(60)
def test_help_lists_tunables_with_the_core_defaults():
    proc = horo_run("--help")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "--fusion-threshold-mb" in text and "HORO_FUSION_THRESHOLD" in text and "64 MiB" in text
    assert "--allreduce-algo {ring,mpi,auto}" in text


# Stands in for a machine where horo is installed but its core is not built:
# the package is entered without running horo/__init__ and the core fails to load.
WITHOUT_CORE = textwrap.dedent(
    """
    import sys, types
    pkg = types.ModuleType("horo")
    pkg.__path__ = [{horo_dir!r}]
    sys.modules["horo"] = pkg
    sys.modules["horo._core"] = None
    from horo.run.launcher import main
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.timeout(60)
def test_help_dry_run_and_check_build_work_without_the_core(openmpi):
    script = WITHOUT_CORE.format(horo_dir=str(REPO_ROOT / "horo"))

    def run(*argv):
        return subprocess.run([sys.executable, "-c", script, *argv], check=False, capture_output=True, text=True,
                              timeout=60, env=job_env())

    help_ = run("--help")
    assert help_.returncode == 0 and "--cycle-time-ms" in help_.stdout, help_.stderr
    dry = run("--mpirun", openmpi, "--dry-run", "-np", "2", "--cache-capacity", "8", "python", "t.py")
    assert dry.returncode == 0, dry.stderr
    assert "HORO_CACHE_CAPACITY=8" in shlex.split(dry.stdout)
    check = run("--mpirun", openmpi, "--check-build")
    assert check.returncode == 0, check.stderr
    assert "does not load" in check.stdout
    assert "[ ] MPI" in check.stdout and "[ ] allreduce" in check.stdout


# --- failure reports -------------------------------------------------------------


@pytest.mark.timeout(30)
def test_failure_parser_reads_open_mpi_4_and_5_reports():
    from horo.run.job import parse_failure

    ompi5 = "prterun detected that one or more processes exited with non-zero status...\n\n" \
            "   Process name: [prterun-vm-2897@1,1]\n   Exit code:    3\n"
    ompi4 = "   Process name: [[35121,1],2]\n   Exit code:    7\n"
    signalled = "prterun noticed that process rank 1 with PID 16385 on node vm exited on\nsignal 9 (Killed).\n"
    hydra = "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   PID 1 RUNNING AT n1\n=   EXIT CODE: 3\n"
    assert (parse_failure(ompi5).rank, parse_failure(ompi5).exit_code) == (1, 3)
    assert (parse_failure(ompi4).rank, parse_failure(ompi4).exit_code) == (2, 7)
    assert (parse_failure(signalled).rank, parse_failure(signalled).signal) == (1, 9)
    assert parse_failure(hydra) is None  # Hydra does not say which rank
    assert parse_failure(signalled).summary() == "horo-run: rank 1 was killed by signal 9 on host vm"
    lost = "PRTE has lost communication with a remote daemon.\n\n  HNP daemon   : [prterun-vm-737@0,0] on node vm\n" \
           "  Remote daemon: [prterun-vm-737@0,3] on node h3\n"
    assert parse_failure(lost).lost_host and parse_failure(lost).host == "h3"
    assert "lost the connection to host h3" in parse_failure(lost).summary()
    peer = ("An MPI communication peer process has unexpectedly disconnected.  This\n"
            "usually indicates a failure in the peer process\n\n  Local host: h1\n  Local PID:  30549\n"
            "  Peer host:  h3\n")
    assert parse_failure(peer).lost_peer and parse_failure(peer).host == "h3"
    assert "a rank on host h3 disconnected" in parse_failure(peer).summary()
    assert parse_failure("  Peer host:  h3\n") is None  # only inside that report
    closed = ("[h2:00000] *** An error occurred in Socket closed\n[h2:00000] *** on a NULL communicator\n"
              "prterun has exited due to process rank 3 with PID 0 on node h2 calling\n\"abort\". This may have\n")
    assert (parse_failure(closed).rank, parse_failure(closed).host) == (3, "h2")
    assert "rank 3 on host h2 ended the job: its MPI lost the connection to a peer" in parse_failure(closed).summary()
    assert parse_failure(closed.split("\n", 1)[1]) is None  # an abort alone is not a lost peer
    # The survivor's abort may close its own connections first: its peers then report it gone.
    cascade = closed.replace("prterun has exited", peer.replace("h3", "h2") + "prterun has exited")
    assert (parse_failure(cascade).rank, parse_failure(cascade).host) == (3, "h2")
    assert parse_failure(cascade).aborted_on_lost_peer
    assert parse_failure(closed.split("prterun")[0] + peer).host == "h3"  # no abort report: the peer


@pytest.mark.timeout(30)
def test_launcher_keepalive_follows_the_peer_timeout_unless_set():
    from horo.run.lost_host import keepalive_env

    env = keepalive_env({}, {"HORO_PEER_TIMEOUT_SECONDS": "10"})
    assert env["PRTE_MCA_oob_tcp_keepalive_time"] == "10" and env["PRTE_MCA_oob_tcp_keepalive_intvl"] == "5"
    assert keepalive_env({"HORO_PEER_TIMEOUT_SECONDS": "0"}, {}) == {}
    mine = keepalive_env({"PRTE_MCA_oob_tcp_keepalive_time": "7"}, {})
    assert "PRTE_MCA_oob_tcp_keepalive_time" not in mine and mine["PRTE_MCA_oob_tcp_keepalive_intvl"] == "30"


def test_a_job_on_this_host_alone_leaves_out_open_mpis_ofi_transport(openmpi, tmp_path):
    from horo.run import command, fabric, launcher

    def added(*argv, env=BASE_ENV):
        args = launcher.make_parser({}).parse_args(["--mpirun", openmpi, *argv, "python", "train.py"])
        return fabric.launch_env(launcher.spec_from_args(args, env=env, as_root=False, local_slots=4))

    assert added("-np", "2") == {"OMPI_MCA_btl": "^ofi"}
    assert added("-np", "4", "-H", f"localhost:2,{socket.gethostname()}:2") == {"OMPI_MCA_btl": "^ofi"}
    assert added("-np", "4", "-H", "localhost:2,node7:2") == {}  # a fabric may join the hosts
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node7 slots=2\nnode8 slots=2\n")
    assert added("--hostfile", str(hostfile)) == {}
    assert added("-np", "2", env=dict(BASE_ENV, OMPI_MCA_btl="self,vader")) == {}  # the user's choice stays


# --- real launches ---------------------------------------------------------------

ALLREDUCE_JOB = textwrap.dedent(
    """
    import numpy as np, horo
    horo.init()
    out = horo.allreduce(np.arange(8, dtype=np.float64) * (horo.rank() + 1), name="x", op=horo.Sum)
    expected = np.arange(8, dtype=np.float64) * sum(r + 1 for r in range(horo.size()))
    assert np.array_equal(out, expected), (out, expected)
    print(f"rank {horo.rank()} of {horo.size()} ok", flush=True)
    """
)


@pytest.mark.timeout(120)
def test_two_rank_job_runs_an_allreduce():
    proc = horo_run("-np", "2", "--cycle-time-ms", "1", "python", "-c", ALLREDUCE_JOB)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rank 0 of 2 ok" in proc.stdout and "rank 1 of 2 ok" in proc.stdout
    # a job on one host: no libfabric probe in MPI_Init (horo/run/fabric.py); and an mpirun session
    # directory a SIGKILLed launch left behind is removed first (horo/run/session_dirs.py)
    tmpdir = tempfile.mkdtemp(prefix="hs")  # short: PMIx puts socket paths under it
    try:
        dead = subprocess.Popen(["true"])
        dead.wait()
        for pid in (dead.pid, os.getpid()):
            os.mkdir(f"{tmpdir}/ompi.{pid}")
            open(f"{tmpdir}/ompi.{pid}/pmix.{socket.gethostname()}.tool.{pid}", "w").close()
        proc = horo_run("-np", "2", "python", "-c", "import os; print('btl', os.environ.get('OMPI_MCA_btl'))",
                        env={"TMPDIR": tmpdir})
        assert proc.stdout.count("btl ^ofi") == 2, proc.stdout + proc.stderr
        assert not os.path.exists(f"{tmpdir}/ompi.{dead.pid}"), "a dead mpirun's session directory stayed"
        assert os.path.exists(f"{tmpdir}/ompi.{os.getpid()}"), "a live process's session directory was removed"
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


FAILING_JOB = textwrap.dedent(
    """
    import sys, time, horo
    horo.init()
    if horo.rank() == 1:
        sys.exit(3)
    time.sleep(2)
    """
)


@pytest.mark.timeout(120)
def test_a_failing_rank_fails_the_run_with_its_exit_code():
    proc = horo_run("-np", "2", "python", "-c", FAILING_JOB)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    if "Exit code:" in proc.stderr:  # Open MPI's report, which its launcher sometimes leaves out
        assert "horo-run: rank 1 exited with code 3" in proc.stderr
    else:
        assert "horo-run: mpirun exited with code 3 without naming a failed rank" in proc.stderr, proc.stderr


@pytest.mark.timeout(120)
def test_sigterm_to_horo_run_stops_the_ranks(tmp_path):
    job = "import os, time; print(os.getpid(), flush=True); time.sleep(120)"
    proc = subprocess.Popen([sys.executable, "-m", "horo.run", "-np", "2", "python", "-c", job],
                            cwd=str(REPO_ROOT), env=job_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        pids = [int(proc.stdout.readline()) for _ in range(2)]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) != 0
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(p) for p in pids), f"ranks {pids} outlived horo-run"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not running
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


# --- --check-build ---------------------------------------------------------------


def _checked(report, label):
    """True for a '[X] label' line, False for '[ ] label'."""
    for line in report.splitlines():
        mark, _, rest = line.strip().partition("] ")
        if mark in ("[X", "[ ") and rest.split("  ")[0].strip() == label:
            return mark == "[X"
    raise AssertionError(f"{label!r} missing from --check-build output:\n{report}")


@pytest.mark.timeout(60)
def test_check_build_reflects_what_is_installed():
    proc = horo_run("--check-build")
    assert proc.returncode == 0, proc.stderr
    report = proc.stdout
    assert _checked(report, "MPI")
    assert _checked(report, "NumPy")
    assert _checked(report, "PyTorch") == (importlib.util.find_spec("torch") is not None)
    assert _checked(report, "TensorFlow") == (importlib.util.find_spec("tensorflow") is not None)
    # NCCL as horo's own run-time loader finds it (HORO_NCCL_LIB, the nvidia wheels, the system's).
    nccl = subprocess.run([sys.executable, "-c", "import horo; print(horo.nccl_version())"], check=False,
                          capture_output=True, text=True, timeout=60, env=job_env(), cwd=str(REPO_ROOT)).stdout.strip()
    assert _checked(report, "NCCL") == (nccl not in ("", "None")), (nccl, report)
    assert _checked(report, "allreduce")
    exported = subprocess.run(
        [sys.executable, "-c", "import horo; print(' '.join(n for n in dir(horo) if not n.startswith('_')))"],
        check=False, capture_output=True, text=True, timeout=60, env=job_env(), cwd=str(REPO_ROOT),
    ).stdout.split()
    for op in ("broadcast", "allgather", "alltoall", "reducescatter", "barrier", "join"):
        assert _checked(report, op) == (op in exported), op
