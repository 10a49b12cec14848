"""Launch overhead under Slurm against plain mpirun, on the same 3 namespaced hosts x 2 ranks.

    python benchmarks/slurm_launch_overhead.py [--reps 7] [--json out.json] [--keep]

Brings up a real Slurm (scripts/slurm.sh, cluster `horosb`: slurmctld + 3 slurmd) and, from h1
(the login node), launches the same 6-rank job (tests/mpi/slurm_job.py timed: init, one
allreduce, a barrier, exit) in each way, interleaved rep by rep:

    mpirun            mpirun -np 6 -H h1:2,h2:2,h3:2 (no Slurm: daemons through scripts/cluster_rsh.sh)
    srun              srun --mpi=pmix -N 3 -n 6 (a new allocation and step per launch)
    salloc+horo-run   salloc -N 3 --ntasks-per-node=2 horo-run (auto: srun --mpi=pmix)
    salloc+horo-run/mpirun   the same with --slurm-launch mpirun (Open MPI's daemons through srun)

For each launch: start = submission to the first collective done on rank 0, exit = the last
collective done on rank 0 to the launch command's exit, both wall-clock on this machine (the
hosts share its clock). Every variant's ranks run the same MPI transports (scripts/cluster.sh's
OMPI_MCA_btl settings), so the launchers differ and nothing else. Reports medians and each
variant's total against mpirun's (goal: <= 1.2x).
Needs root; takes the cluster down again unless --keep.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SLURM_SH = REPO / "scripts" / "slurm.sh"
CLUSTER_SH = REPO / "scripts" / "cluster.sh"
JOB = REPO / "tests" / "mpi" / "slurm_job.py"
NAME = "horosb"


def base_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_COMM_WORLD", "PMIX_", "PMI_"))}
    bindir = str(Path(sys.executable).parent)
    env.update({"PATH": bindir + os.pathsep + env.get("PATH", ""), "PYTHONPATH": str(REPO),
                "HORO_SLURM_NAME": NAME, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    return env


def cluster_env(env):
    """mpirun's settings for reaching the namespaced hosts without Slurm (scripts/cluster.sh env)."""
    text = subprocess.run(["bash", str(CLUSTER_SH), "env", "--name", NAME], capture_output=True, text=True,
                          check=True).stdout
    out = dict(env)
    for line in text.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        out[key] = value
    return out


def transports_env(env, cluster):
    """`env` with the ranks' MPI transports of `cluster` (the BTLs, the subnet) and not its launch settings:
    without them Open MPI 5 probes libfabric (its ofi BTL) in MPI_Init, a cost of the MPI's configuration
    that only the Slurm launches would pay."""
    return {**env, **{k: v for k, v in cluster.items() if k.startswith("OMPI_MCA_btl")}}


def variants():
    py, horo_run = sys.executable, str(Path(sys.executable).parent / "horo-run")
    mpirun = str(Path(sys.executable).parent / "mpirun")
    job = [py, str(JOB), "timed"]
    alloc = ["salloc", "-N", "3", "--ntasks-per-node=2"]
    return {
        "mpirun": ([mpirun, "-np", "6", "-H", "h1:2,h2:2,h3:2", "--bind-to", "none", "--map-by", "slot",
                    "--allow-run-as-root", "-x", "PATH", "-x", "PYTHONPATH", *job], True),
        "srun": (["srun", "--mpi=pmix", "-N", "3", "-n", "6", *job], False),
        "salloc+horo-run": ([*alloc, horo_run, *job], False),
        "salloc+horo-run/mpirun": ([*alloc, horo_run, "--slurm-launch", "mpirun", *job], False),
    }


def launch(cmd, env, timeout=180):
    start = time.time()
    proc = subprocess.run(["bash", str(SLURM_SH), "exec", "h1", *cmd], env=env, capture_output=True, text=True,
                          timeout=timeout)
    end = time.time()
    first = re.search(r"^FIRST ([\d.]+)$", proc.stdout, re.M)
    last = re.search(r"^LAST ([\d.]+)$", proc.stdout, re.M)
    if proc.returncode or not (first and last):
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-6000:]}")
    return float(first.group(1)) - start, end - float(last.group(1))


def launch_again_if_failed(cmd, env, failures):
    """A launch, repeated once if it failed (logged, and counted in `failures`): a rare crash inside Open MPI's
    MPI_Init under srun must not cost the whole run."""
    try:
        return launch(cmd, env)
    except RuntimeError as e:
        failures.append(str(e))
        print(f"failed launch (repeated): {e}", file=sys.stderr, flush=True)
        return launch(cmd, env)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=7, help="launches per variant, interleaved (default 7)")
    p.add_argument("--json", metavar="PATH", help="write the figures to this JSON file")
    p.add_argument("--keep", action="store_true", help="leave the Slurm cluster up afterwards")
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("slurm_launch_overhead.py needs root (network namespaces, the Slurm daemons)")
    up = subprocess.run(["bash", str(SLURM_SH), "up", "3", "--tasks", "2", "--name", NAME], capture_output=True,
                        text=True, timeout=600)
    if up.returncode:
        sys.exit(f"scripts/slurm.sh up 3 failed:\n{up.stderr}")
    try:
        env = base_env()
        cluster = cluster_env(env)
        envs = {True: cluster, False: transports_env(env, cluster)}
        runs = {name: [] for name in variants()}
        failures = []
        for name, (cmd, plain) in variants().items():  # one untimed launch each: caches warm
            launch_again_if_failed(cmd, envs[plain], failures)
        for rep in range(args.reps):
            for name, (cmd, plain) in variants().items():
                runs[name].append(launch_again_if_failed(cmd, envs[plain], failures))
            print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr, flush=True)
    finally:
        if not args.keep:
            subprocess.run(["bash", str(SLURM_SH), "down", "--name", NAME], capture_output=True, timeout=120)

    base = statistics.median(s + e for s, e in runs["mpirun"])
    rows = []
    print(f"\nLaunch overhead, 6 ranks on 3 namespaced hosts x 2, medians of {args.reps} launches (seconds)")
    print(f"| {'launch':<24} | start -> first collective | last collective -> exit | total | vs mpirun |")
    print(f"|{'-' * 26}|{'-' * 27}|{'-' * 25}|{'-' * 7}|{'-' * 11}|")
    for name, samples in runs.items():
        start = statistics.median(s for s, _ in samples)
        end = statistics.median(e for _, e in samples)
        total = statistics.median(s + e for s, e in samples)
        rows.append({"launch": name, "start_s": start, "exit_s": end, "total_s": total, "ratio": total / base,
                     "samples": samples})
        print(f"| {name:<24} | {start:>25.3f} | {end:>23.3f} | {total:>5.2f} | {total / base:>8.2f}x |")
    if failures:
        print(f"{len(failures)} failed launch(es) repeated (their output is above, on stderr)")
    if args.json:
        Path(args.json).write_text(json.dumps({"reps": args.reps, "rows": rows, "failures": failures}, indent=2))


if __name__ == "__main__":
    main()
