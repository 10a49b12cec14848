"""Slurm's description of an allocation, as horo reads it, without a Slurm: node lists, tasks per node,
the launch horo-run builds from them (--dry-run), and init's refusal of a singleton that Slurm started
as one of several tasks (a real horo.init() in a real process, under the variables srun sets).
tests/test_slurm.py runs the same on a real Slurm."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from horo.run import slurm

HORO_RUN = str(Path(sys.executable).parent / "horo-run")
ALLOC = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu[01-02,07]", "SLURM_TASKS_PER_NODE": "4(x2),2",
         "SLURM_NTASKS": "10"}


def clean_env(extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "OMPI_COMM_WORLD", "PMIX_", "PMI_", "HORO_", "HOROVOD_"))}
    return {**env, **extra}


@pytest.mark.parametrize("text, names", [
    ("h1", ["h1"]),
    ("h[1-3]", ["h1", "h2", "h3"]),
    ("gpu[01-02,07],login", ["gpu01", "gpu02", "gpu07", "login"]),
    ("node[098-101]", ["node098", "node099", "node100", "node101"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
])
def test_node_lists_expand_as_scontrol_show_hostnames(text, names):
    assert slurm.expand_nodelist(text) == names


def test_bad_node_lists_and_task_counts_are_named():
    with pytest.raises(slurm.SlurmError, match="unbalanced"):
        slurm.expand_nodelist("h[1-3")
    with pytest.raises(slurm.SlurmError, match="backwards"):
        slurm.expand_nodelist("h[3-1]")
    with pytest.raises(slurm.SlurmError, match="SLURM_TASKS_PER_NODE"):
        slurm.expand_tasks_per_node("2(x3")


def test_allocation_hosts_slots_and_tasks():
    assert slurm.expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    alloc = slurm.allocation(ALLOC)
    assert alloc.host_list == "gpu01:4,gpu02:4,gpu07:2" and alloc.num_tasks == 10 and alloc.job_id == "42"
    assert slurm.allocation({}) is None
    with pytest.raises(slurm.SlurmError, match="gives 2 node"):
        slurm.allocation({**ALLOC, "SLURM_TASKS_PER_NODE": "4(x2)"})


def test_horo_run_in_an_allocation_launches_on_its_hosts():
    env = clean_env(ALLOC)
    mpirun = subprocess.run([HORO_RUN, "--slurm-launch", "mpirun", "--dry-run", "python", "train.py"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert mpirun.returncode == 0, mpirun.stderr
    assert " -np 10 -H gpu01:4,gpu02:4,gpu07:2 " in mpirun.stdout, mpirun.stdout
    srun = subprocess.run([HORO_RUN, "--slurm-launch", "srun", "--dry-run", "python", "train.py"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert srun.returncode == 0, srun.stderr
    assert srun.stdout.split()[1:] == ["--mpi=pmix", "--kill-on-bad-exit=1", "-n", "10", "-N", "3", "python",
                                       "train.py"], srun.stdout
    # hosts named on the command line win over the allocation
    named = subprocess.run([HORO_RUN, "-np", "2", "-H", "a:2", "--dry-run", "python", "train.py"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert " -np 2 -H a:2 " in named.stdout, named.stdout


def test_horo_run_as_a_task_of_an_srun_step_is_refused():
    env = clean_env({**ALLOC, "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "10", "SLURM_PROCID": "3"})
    proc = subprocess.run([HORO_RUN, "--dry-run", "python", "train.py"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "one of 10 tasks of an srun step: run horo-run once" in proc.stderr, proc.stderr


@pytest.mark.timeout(120)
def test_init_refuses_a_singleton_that_srun_started_as_one_of_several_tasks():
    env = clean_env({**ALLOC, "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "2",
                     "SLURM_MPI_TYPE": "none"})
    code = "import horo\ntry:\n    horo.init()\nexcept horo.HoroError as e:\n    print(e)\n    raise SystemExit(3)\n"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=100)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "this is task 2 of 4 that srun started in Slurm job 42 with MPI plugin 'none'" in proc.stdout, proc.stdout
    assert "`srun --mpi=pmix python train.py`" in proc.stdout and "`horo-run python train.py`" in proc.stdout
    # the batch script itself (no step) with more than one task allotted
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(ALLOC), capture_output=True, text=True,
                          timeout=100)
    assert proc.returncode == 3 and "Slurm job 42 has 10 tasks" in proc.stdout, proc.stdout + proc.stderr
    # one task is one process: nothing to refuse
    ok = subprocess.run([sys.executable, "-c", "import horo; horo.init(); print(horo.size())"],
                        env=clean_env({**ALLOC, "SLURM_NTASKS": "1", "SLURM_TASKS_PER_NODE": "1,0,0"}),
                        capture_output=True, text=True, timeout=100)
    assert ok.returncode == 0 and ok.stdout.strip() == "1", ok.stdout + ok.stderr


def test_singleton_rule_trusts_a_launcher_that_says_the_world_is_one():
    step = {**ALLOC, "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "3"}
    assert slurm.singleton_error(1, step)
    # before MPI starts: plain srun is refused, a PMI plugin's task is left to MPI to join
    assert slurm.singleton_error(None, {**step, "SLURM_MPI_TYPE": "none"})
    assert slurm.singleton_error(None, {**step, "SLURM_MPI_TYPE": "pmix", "PMIX_RANK": "0"}) is None
    assert slurm.singleton_error(None, {**step, "SLURM_MPI_TYPE": "none", "OMPI_COMM_WORLD_SIZE": "3"}) is None
    assert slurm.singleton_error(None, ALLOC) is None  # the batch script: only MPI's world size tells
    assert slurm.singleton_error(1, {**step, "OMPI_COMM_WORLD_SIZE": "1"}) is None  # mpirun -np 1 in a job
    assert slurm.singleton_error(3, step) is None
    assert slurm.singleton_error(1, {}) is None


def test_local_rank_from_slurm_localid_only_where_mpi_finds_no_neighbours():
    step = {"SLURM_JOB_ID": "1", "SLURM_STEP_ID": "0", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
            "SLURM_STEP_TASKS_PER_NODE": "2(x3)"}
    assert slurm.slurm_local_rank(0, 1, 6, step) == 1  # MPI: every rank alone on its host
    assert slurm.slurm_local_rank(0, 2, 6, step) == 0  # MPI knows the host: MPI's answer
    assert slurm.slurm_local_rank(0, 1, 6, {**step, "SLURM_STEP_TASKS_PER_NODE": "1(x6)"}) == 0
    assert slurm.slurm_local_rank(0, 1, 6, {}) == 0


def test_choose_launcher_says_why():
    assert slurm.choose_launcher("mpirun", "openmpi", "")[0] == "mpirun"
    launcher, why = slurm.choose_launcher("auto", "openmpi", "mpirun (Open MPI) 3.1.6")
    assert launcher == "mpirun" and "not Open MPI >= 4" in why
    launcher, why = slurm.choose_launcher("auto", "mpich", "HYDRA build details")
    assert launcher == "mpirun"
