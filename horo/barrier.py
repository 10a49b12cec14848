"""barrier: returns once every rank (of the process set) has called it."""
import numpy as np

from horo.enqueue import enqueue, returning, tensor_name

_TOKEN = np.zeros(0, dtype=np.uint8)


def barrier(name=None, process_set=None):
    # A blocking call: unnamed, it takes the collective's one name (enqueue.tensor_name), so a loop of
    # barriers hits the response cache, and the core runs it on this thread in one call.
    name = tensor_name(name, "barrier", process_set, waits=True)
    return enqueue("barrier", name, _TOKEN, _TOKEN, returning(None), process_set=process_set, waits=True)
