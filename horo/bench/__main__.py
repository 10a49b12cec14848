"""`python -m horo.bench` == `horo-bench`."""
import sys

from horo.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
