"""Python objects of any size, pickled: broadcast_object and allgather_object."""
import pickle

import numpy as np

from horo.allgather import allgather
from horo.broadcast import broadcast_
from horo import basics
from horo.process_sets import global_process_set


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's `obj` on every rank."""
    name = name or "broadcast_object"
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8) if basics.rank() == root_rank else None
    length = np.array([0 if payload is None else payload.size], dtype=np.int64)
    broadcast_(length, root_rank, name=f"{name}.length", process_set=process_set)
    buffer = payload.copy() if payload is not None else np.empty(int(length[0]), dtype=np.uint8)
    broadcast_(buffer, root_rank, name=f"{name}.data", process_set=process_set)
    return obj if basics.rank() == root_rank else pickle.loads(buffer.tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's `obj`, in rank order."""
    name = name or "allgather_object"
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    lengths = allgather(np.array([payload.size], dtype=np.int64), name=f"{name}.lengths", process_set=process_set)
    data = allgather(payload, name=f"{name}.data", process_set=process_set)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return [pickle.loads(data[offsets[r] : offsets[r + 1]].tobytes()) for r in range(len(lengths))]
