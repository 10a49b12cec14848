"""Time from a rank's SIGKILL to the launcher's exit, median of N runs per scenario (np=3).

    python scripts/killed_rank_exit_times.py [--runs 5] [--transport shm]
Prints one row per (launcher, scenario): median and range in seconds, exit status, and
whether any process or /dev/shm entry of the job was left behind.
"""
import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from killed_rank import run_killed_rank_job  # noqa: E402

SCENARIOS = [("mpirun", "fused"), ("mpirun", "broadcast"), ("mpirun", "idle"),
             ("horo-run", "fused"), ("horo-run", "broadcast"), ("horo-run", "idle")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--transport", default=None, help="HORO_TRANSPORT for the job (default: unset)")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.1f}; transport: {args.transport or 'default'}; runs: {args.runs}")
    print(f"{'launcher':9} {'scenario':10} {'median s':>9} {'min s':>7} {'max s':>7}  exit  orphans  shm left")
    for launcher, scenario in SCENARIOS:
        jobs = [run_killed_rank_job(scenario, launcher, args.transport) for _ in range(args.runs)]
        secs = [j["seconds"] for j in jobs if j["seconds"] is not None and not j["hung"]]
        codes = sorted({j["rc"] for j in jobs})
        orphans = sum(len(j["orphans"]) for j in jobs)
        shm = sum(len(j["shm_left"]) for j in jobs)
        hung = sum(j["hung"] for j in jobs)
        median = f"{statistics.median(secs):9.2f}" if secs else f"{'-':>9}"
        low_high = f"{min(secs):7.2f} {max(secs):7.2f}" if secs else f"{'-':>7} {'-':>7}"
        print(f"{launcher:9} {scenario:10} {median} {low_high}  {codes}  {orphans}  {shm}" + (f"  HUNG x{hung}" if hung else ""))
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
