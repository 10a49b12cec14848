"""Point-to-point: tagged send / recv between two ranks, for pipeline stages and model parallelism.

    horo.send(activations, dst=1, tag=7)
    horo.recv(buffer, src=0, tag=7)          # fills `buffer` in place and returns it
    h = horo.irecv(buffer, src=0); ...; horo.synchronize(h)
    h = horo.batch_isend_irecv([horo.P2POp("send", x, 1), horo.P2POp("recv", y, 1)])

Transfers start at once on the calling thread, without the coordinator's negotiation, so they
never wait behind a collective. Messages between a pair with the same tag arrive in the order they
were sent, as in MPI. Peers are global ranks (as process-set roots are); a receive buffer must have
exactly the size of the message, and a mismatch raises on both sides.
"""
import collections
import numbers

import numpy as np

from horo import cuda_arrays, process_sets
from horo._native import _core
from horo.errors import HoroValueError
from horo.handles import synchronize, track
from horo.tensors import as_array

P2POp = collections.namedtuple("P2POp", ["op", "tensor", "peer", "tag"], defaults=(0,))
P2POp.__doc__ = """One transfer of batch_isend_irecv(): op is "send" or "recv", peer a global rank."""


def host_buffer(tensor, name, writable):
    """(address, bytes, the object that owns them) of a NumPy-compatible host array."""
    if type(tensor) is not np.ndarray and cuda_arrays.is_cuda_array(tensor):
        raise HoroValueError(f"'{name}': point-to-point takes host memory; copy the GPU array to the host first")
    array = as_array(tensor, name, in_place=writable)
    return _core.data_address(array), array.nbytes, array


def _checked_int(value, what, name):
    if type(value) is int:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"'{name}': {what} must be an int, got {type(value).__name__} ({value!r})")
    return int(value)


def start(ops, name, process_set, buffer_of, finish=lambda _: None):
    """Posts `ops` (P2POps) together; returns one tracked handle. `buffer_of(tensor, name, writable)`
    gives (address, bytes, owner) for the caller's framework; synchronize() returns finish(None)."""
    set_id = process_sets.set_id(process_set, name)
    transfers, owners = [], []
    for op in ops:
        if not isinstance(op, P2POp):
            op = P2POp(*op)
        if op.op not in ("send", "recv"):
            raise HoroValueError(f"'{name}': a transfer's op must be 'send' or 'recv', got {op.op!r}")
        address, nbytes, owner = buffer_of(op.tensor, name, op.op == "recv")
        peer = _checked_int(op.peer, "the peer rank", name)
        tag = _checked_int(op.tag, "the tag", name)
        transfers.append((op.op == "send", address, nbytes, peer, tag))
        owners.append(owner)
    handle = _core.point_to_point(set_id, transfers, name)
    return track(handle, name, finish, owners)


def isend(tensor, dst, tag=0, name=None, process_set=None):
    """Starts sending `tensor` to global rank `dst`; synchronize(handle) returns once it was received."""
    name = name or f"send.to{dst}.tag{tag}"
    return start([P2POp("send", tensor, dst, tag)], name, process_set, host_buffer)


def irecv(tensor, src, tag=0, name=None, process_set=None):
    """Starts receiving into `tensor` from global rank `src`; synchronize(handle) returns `tensor`."""
    name = name or f"recv.from{src}.tag{tag}"
    return start([P2POp("recv", tensor, src, tag)], name, process_set, host_buffer, lambda _: tensor)


def transfer(send, tensor, peer, tag, name, process_set, buffer_of):
    """One blocking send or receive, started and waited for in one call into the core."""
    address, nbytes, owner = buffer_of(tensor, name, not send)
    peer = _checked_int(peer, "the peer rank", name)
    tag = _checked_int(tag, "the tag", name)
    _core.transfer(process_sets.set_id(process_set, name), send, address, nbytes, peer, tag, name, owner)
    return tensor


def send(tensor, dst, tag=0, name=None, process_set=None):
    """Sends `tensor` to global rank `dst`; returns once `dst` has received it."""
    # A plain NumPy array in the global set runs from the core's lane (bindings.cc: transfer_plain).
    if _core.transfer_plain(True, tensor, dst, tag, name or None, process_set) is NotImplemented:
        transfer(True, tensor, dst, tag, name or f"send.to{dst}.tag{tag}", process_set, host_buffer)


def recv(tensor, src, tag=0, name=None, process_set=None):
    """Receives a message from global rank `src` into `tensor` (in place) and returns it."""
    if _core.transfer_plain(False, tensor, src, tag, name or None, process_set) is NotImplemented:
        transfer(False, tensor, src, tag, name or f"recv.from{src}.tag{tag}", process_set, host_buffer)
    return tensor


def batch_isend_irecv(ops, name=None, process_set=None):
    """Starts every P2POp in `ops` together; one handle completes once all have (synchronize: None)."""
    return start(list(ops), name or "batch_isend_irecv", process_set, host_buffer)
