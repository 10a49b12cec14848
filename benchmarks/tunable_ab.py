"""A/B of horo settings (HORO_* environment variables) in alternating jobs.

    python benchmarks/tunable_ab.py --np 8 --runs 3 --a HORO_SHM_STREAM_BYTES=1048576 \\
        -- alltoall -b 64K -e 4M -f 4 -n 50 -w 5

Runs `horo-bench ... --baseline` under mpirun once per variant per run, A and B in turn (B: the
defaults unless --b is given), so both see the same drift of a shared machine; every other run
starts with B, since the first job of a pair runs at another speed than the second. For each size it
prints the median horo time of each variant, their quotient (A/B: below 1, A is faster), and each
variant's median ratio against MPI in its own jobs (MPI time / horo time). Judge a setting by
A/B together with the ratios: a job-to-job swing moves both variants' MPI times too.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def settings(pairs):
    env = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("HORO_"):
            raise SystemExit(f"not a HORO_NAME=value setting: {pair!r}")
        env[key] = value
    return env


def run_job(np_, env, bench_args, json_path, timeout):
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none"]
    for key in env:
        cmd += ["-x", key]
    cmd += ["horo-bench", *bench_args, "--baseline", "--no-progress", "--json", str(json_path)]
    job_env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", **env}
    done = subprocess.run(cmd, env=job_env, timeout=timeout, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"job failed ({done.returncode}): {' '.join(cmd)}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    results = json.loads(Path(json_path).read_text())
    if results["total_wrong"]:
        raise SystemExit(f"wrong results in {' '.join(cmd)}")
    return {r["bytes"]: (r["time_us"], r["ratio"]) for r in results["results"] if r["variant"] == "horo"}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--runs", type=int, default=3, help="jobs per variant (default 3)")
    p.add_argument("--a", action="append", metavar="HORO_NAME=value", required=True)
    p.add_argument("--b", action="append", metavar="HORO_NAME=value", help="default: horo's own defaults")
    p.add_argument("--timeout", type=float, default=300, help="seconds one job may take")
    p.add_argument("bench", nargs=argparse.REMAINDER, help="-- then horo-bench's arguments (a collective first)")
    args = p.parse_args()
    bench = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    if not bench:
        p.error("give horo-bench's arguments after --")
    variants = {"A": settings(args.a), "B": settings(args.b)}
    seen = {v: {} for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            # A, B, then B, A: here a pair's first job ran 0.80-0.85 of its second's time at 16-64 KiB
            # with the same settings in both (an A/A test, eight pairs), MPI's time likewise.
            for v in ("A", "B") if run % 2 == 0 else ("B", "A"):
                env = variants[v]
                for size, cell in run_job(args.np, env, bench, Path(tmp) / f"{v}{run}.json", args.timeout).items():
                    seen[v].setdefault(size, []).append(cell)
    describe = {v: " ".join(f"{k}={x}" for k, x in env.items()) or "defaults" for v, env in variants.items()}
    print(f"# np={args.np}, {args.runs} jobs each: horo-bench {' '.join(bench)}")
    print(f"# A: {describe['A']}\n# B: {describe['B']}")
    print(f"{'bytes':>10} {'A us':>9} {'B us':>9} {'A/B':>6} {'A ratio':>8} {'B ratio':>8}")
    for size in sorted(seen["A"]):
        a_us, b_us = (statistics.median(t for t, _ in seen[v][size]) for v in "AB")
        a_ratio, b_ratio = (statistics.median(r for _, r in seen[v][size]) for v in "AB")
        print(f"{size:>10} {a_us:9.1f} {b_us:9.1f} {a_us / b_us:6.2f} {a_ratio:8.2f} {b_ratio:8.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
