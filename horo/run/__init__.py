"""horo-run, the launcher: builds and runs the mpirun command for a horo job.

    horo-run -np 4 python train.py          (or: python -m horo.run -np 4 python train.py)

Nothing here needs the compiled core except --check-build's collective list
and --help's tunable defaults, which fall back gracefully without it.
"""
from horo.run.launcher import main

__all__ = ["main"]
