"""The full soak: 10,000 seeded random collectives on 4 ranks, each checked against NumPy,
with resident memory and open file descriptors sampled after warm-up and at the end.

    python scripts/soak.py [--ops 10000] [--np 4] [--seed 14]
Prints one row per rank; exits non-zero if any result was wrong, RSS grew by 5 MB or
more, or file descriptors grew. The suite runs the same code with 1,000 ops
(tests/test_soak.py).
"""
import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import pytest  # noqa: E402  (launcher.py reports through pytest.fail)

from launcher import run_ranks  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=10000)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="horo-soak-"))
    env = {"HORO_TEST_SOAK_OPS": args.ops, "HORO_TEST_SOAK_SEED": args.seed, "HORO_TEST_RESULTS_DIR": out}
    print(f"load before: {os.getloadavg()[0]:.1f}")
    try:
        rc, output = run_ranks(args.np, "ranks_soak.py", env=env, timeout=3000, inner_timeout=2900, check=False)
    except pytest.fail.Exception as e:
        print(e)
        return 1
    results = json.loads((out / "soak.json").read_text()) if (out / "soak.json").exists() else None
    if results is None:
        print(output[-5000:])
        return 1
    print(f"{'rank':>4} {'ops':>6} {'checked':>7} {'wrong':>5} {'RSS growth MB':>13} {'RSS end MB':>10} {'fd growth':>9} {'wall s':>7}")
    for r, res in enumerate(results):
        print(f"{r:>4} {res['ops']:>6} {res['checked']:>7} {res['wrong']:>5} {res['rss_growth_bytes'] / 2**20:>13.2f} "
              f"{res['rss_end_bytes'] / 2**20:>10.1f} {res['fd_growth']:>9} {res['seconds']:>7.1f}")
    print(f"load after: {os.getloadavg()[0]:.1f}; pytest exit {rc}")
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
