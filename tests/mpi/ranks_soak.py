"""The soak (tests/mpi/soak.py) inside each MPI rank: HORO_TEST_SOAK_OPS random collectives
(1,000 by default), no wrong result, resident memory after warm-up growing < 5 MB and
open file descriptors flat on every rank. Rank 0 writes the figures to
$HORO_TEST_RESULTS_DIR/soak.json when that is set (scripts/soak.py)."""
import json
import os

from rank_helpers import gather_and_compare
from soak import Soak


def test_random_collectives_match_numpy_with_flat_memory_and_fds(hvd, comm):
    ops = int(os.environ.get("HORO_TEST_SOAK_OPS", "1000"))
    seed = int(os.environ.get("HORO_TEST_SOAK_SEED", "14"))
    result = Soak(hvd, comm, seed).run(ops)
    everyone = comm.gather(result, root=0)
    directory = os.environ.get("HORO_TEST_RESULTS_DIR")
    if comm.Get_rank() == 0 and directory:
        with open(os.path.join(directory, "soak.json"), "w") as f:
            json.dump(everyone, f, indent=1)
    gather_and_compare(comm, True, "finished the soak")
    assert result["checked"] > ops // 2, f"only {result['checked']} of {ops} results were checked"
    assert result["wrong"] == 0, f"{result['wrong']} wrong results: {result['first_wrong']}"
    assert result["rss_growth_bytes"] < 5 * 1024 * 1024, f"RSS grew {result['rss_growth_bytes']} bytes"
    assert result["fd_growth"] <= 0, f"{result['fd_growth']} more open file descriptors"
