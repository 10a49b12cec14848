"""Runs one rank suite under several settings, one after another, in ONE MPI job.

    mpirun -np 3 python tests/mpi/variants.py PLAN.json

PLAN.json: {"suite": "<path of a rank suite>", "pytest_args": [...],
            "variants": [["name", {"HORO_X": "1", ...}, "<suite of its own, optional>"], ...]}

For each variant in turn every rank sets that variant's environment, then runs the suite with
pytest in this process; the suite's session fixture initialises horo (which reads its settings
then) and shuts it down at the end, so each variant runs exactly as its own launch would, but
without starting mpirun, Python, NumPy, mpi4py and horo again: seconds a launch on 2 cores.
A failing variant ends the job (tests/mpi/conftest.py aborts it, so no rank waits for a peer
that stopped); the driver (tests/launcher.py, run_variants) reads each variant's outcome from
the lines printed here.
"""
import json
import os
import sys

import pytest

MARK = "[horo-variant]"


def main(plan_file):
    with open(plan_file) as f:
        plan = json.load(f)
    for name, env, *suite in plan["variants"]:
        saved = {k: os.environ.get(k) for k in env}
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = str(v)
        print(f"{MARK} {name} start", flush=True)
        rc = int(pytest.main(list(plan["pytest_args"]) + [suite[0] if suite else plan["suite"]]))
        print(f"{MARK} {name} rc={rc}", flush=True)
        for k, v in saved.items():  # the next variant starts from the job's own environment
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if rc != 0:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
