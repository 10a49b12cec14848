"""horo-run, the launcher: builds and runs the mpirun command for a horo job.

    horo-run -np 4 python train.py          (or: python -m horo.run -np 4 python train.py)

Nothing here needs the compiled core except --check-build's collective list
and --help's tunable defaults, which fall back gracefully without it.
"""

__all__ = ["main"]


def __getattr__(name):
    # Ranks import horo.run.slurm at horo.init(): the launcher (argparse, subprocess) stays unloaded there.
    if name == "main":
        from horo.run.launcher import main

        return main
    raise AttributeError(f"module 'horo.run' has no attribute {name!r}")
