"""Bad input, everywhere (issue #14, item 4): one 2-rank launch runs the table of every public
function of horo (NumPy) and horo.torch against wrong types, None, 0-d, non-contiguous and
read-only buffers, bad roots, process sets, splits and names, calls before init and after
shutdown, double init and init -> shutdown -> init (tests/mpi/ranks_bad_input.py); a second
does horo.tensorflow's (tests/mpi/ranks_bad_input_tf.py). Each row must raise a clear error on
every rank, or return the right result, and leave the library working for the next call."""
import pytest


@pytest.mark.timeout(150)
def test_bad_input_to_numpy_and_torch_functions(ranks):
    ranks(2, "ranks_bad_input.py", timeout=120)


@pytest.mark.timeout(200)
def test_bad_input_to_tensorflow_functions(ranks):
    ranks(2, "ranks_bad_input_tf.py", timeout=170)
