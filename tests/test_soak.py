"""Soak (issue #14, item 4): 1,000 seeded random collectives on 4 ranks (every kind, dtype,
op, shapes with 0-sized and odd dims, process sets, async batches submitted in a different
order on each rank), each checked against NumPy; RSS after warm-up grows < 5 MB and open
file descriptors stay flat. The 10,000-op run is scripts/soak.py."""
import pytest


@pytest.mark.timeout(240)
def test_soak_of_random_collectives_on_four_ranks(ranks):
    ranks(4, "ranks_soak.py", env={"HORO_TEST_SOAK_OPS": "1000"}, timeout=200)
