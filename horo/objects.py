"""Python objects of any size, pickled: broadcast_object and allgather_object.

Pickling fails on one rank only when that rank's object differs (a lambda on the
root, say): the refusal goes to the others as the first collective's rejection, so
they raise too instead of waiting for bytes that will never come."""
import pickle

import numpy as np

from horo.allgather import allgather
from horo.broadcast import broadcast_
from horo import basics
from horo.enqueue import checked_root, refusing, tensor_name
from horo.errors import HoroValueError
from horo.process_sets import global_process_set


def _pickled(obj, name, collective, first_name, process_set):
    with refusing(collective, first_name, process_set):
        try:
            return np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
        except Exception as e:  # noqa: BLE001 - pickle raises TypeError, AttributeError, PicklingError, ...
            raise HoroValueError(f"'{name}': obj of type {type(obj).__name__} cannot be pickled on rank "
                                 f"{basics.rank()}: {type(e).__name__}: {e}") from e


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's `obj` on every rank."""
    name = tensor_name(name, "broadcast", process_set) if name not in (None, "") else "broadcast_object"
    root_rank = checked_root(root_rank, name)
    root = basics.rank() == root_rank
    payload = _pickled(obj, name, "broadcast", f"{name}.length", process_set) if root else None
    length = np.array([0 if payload is None else payload.size], dtype=np.int64)
    broadcast_(length, root_rank, name=f"{name}.length", process_set=process_set)
    buffer = payload.copy() if payload is not None else np.empty(int(length[0]), dtype=np.uint8)
    broadcast_(buffer, root_rank, name=f"{name}.data", process_set=process_set)
    return obj if root else pickle.loads(buffer.tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's `obj`, in rank order."""
    name = tensor_name(name, "allgather", process_set) if name not in (None, "") else "allgather_object"
    payload = _pickled(obj, name, "allgather", f"{name}.lengths", process_set)
    lengths = allgather(np.array([payload.size], dtype=np.int64), name=f"{name}.lengths", process_set=process_set)
    data = allgather(payload, name=f"{name}.data", process_set=process_set)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return [pickle.loads(data[offsets[r] : offsets[r + 1]].tobytes()) for r in range(len(lengths))]
