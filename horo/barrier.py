"""barrier: returns once every rank (of the process set) has called it."""
import numpy as np

from horo.enqueue import enqueue, returning, tensor_name
from horo.handles import blocking, synchronize

_TOKEN = np.zeros(0, dtype=np.uint8)


@blocking
def barrier(name=None, process_set=None):
    name = tensor_name(name, "barrier", process_set)
    synchronize(enqueue("barrier", name, _TOKEN, _TOKEN, returning(None), process_set=process_set))
