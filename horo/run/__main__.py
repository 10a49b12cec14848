"""python -m horo.run: the same as the horo-run console script."""
import sys

from horo.run.launcher import main

sys.exit(main())
