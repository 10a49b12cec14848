"""Shutdown: a pending handle fails with HoroError instead of blocking (at local
shutdown and when another rank shuts down); calls after shutdown raise ValueError.
One mpirun launch per scenario, because shutdown ends horo in that process."""
import pytest


@pytest.mark.timeout(120)
@pytest.mark.parametrize("np_", [2, 3, 4])
def test_pending_handle_fails_when_another_rank_shuts_down(ranks, np_):
    ranks(np_, "ranks_shutdown.py", select="test_pending_handle_fails_when_another_rank_shuts_down", timeout=90)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("np_", [2, 3, 4])
def test_pending_handles_fail_at_shutdown_instead_of_blocking(ranks, np_):
    ranks(np_, "ranks_shutdown.py", select="test_pending_handles_fail_at_shutdown_instead_of_blocking", timeout=90)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("np_", [1, 3])
def test_calls_after_shutdown_raise_value_error_on_every_rank(ranks, np_):
    ranks(np_, "ranks_shutdown.py", select="test_calls_after_shutdown_raise_value_error_on_every_rank", timeout=90)
