"""Errors stay collective and waits stay interruptible (issue #14, item 5):
a call refused on one rank raises on every rank, a reused name is refused by program
order alone, a sequence of Horovod-style error tests leaves the ranks in step, and a
blocked synchronize() wakes for SIGALRM and Ctrl-C (NumPy, torch, eager TensorFlow)."""
import pytest


@pytest.mark.timeout(240)
@pytest.mark.parametrize("np_", [2, 3])
def test_errors_on_one_rank_raise_on_every_rank_and_ranks_stay_in_step(ranks, np_):
    ranks(np_, "ranks_errors_stay_collective.py", timeout=200)


@pytest.mark.timeout(240)
def test_blocked_synchronize_wakes_for_sigalrm_and_ctrl_c(ranks):
    # Eager TensorFlow is checked on the tf.numpy_function path: a native op blocks inside
    # TensorFlow's executor, where Python signal handlers cannot run (see README, TensorFlow).
    ranks(2, "ranks_interruptible_waits.py", env={"HORO_TF_NATIVE": "0"}, timeout=200)
