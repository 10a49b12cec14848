"""Point-to-point on torch tensors (horo.point_to_point has the semantics): contiguous CPU tensors,
received in place. Peers are global ranks."""
import torch

from horo import point_to_point as _p2p
from horo._native import _core
from horo.point_to_point import P2POp
from horo.torch.tensors import CODES


def _buffer(tensor, name, writable):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"'{name}': expected a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_cpu:
        raise ValueError(f"'{name}': point-to-point takes CPU tensors, this one is on '{tensor.device}'; "
                         "send tensor.cpu() (the \"horo\" torch.distributed backend stages CUDA tensors itself)")
    if tensor.dtype not in CODES or tensor.layout is not torch.strided:
        raise TypeError(f"'{name}': {tensor.dtype} {tensor.layout} tensors cannot be sent")
    if not tensor.is_contiguous():
        raise ValueError(f"'{name}': point-to-point needs a contiguous tensor (shape {tuple(tensor.shape)}, "
                         f"strides {tensor.stride()}); use tensor.contiguous()")
    return tensor.data_ptr(), tensor.numel() * tensor.element_size(), tensor


def isend(tensor, dst, tag=0, name=None, process_set=None):
    """Starts sending `tensor` to global rank `dst`; synchronize(handle) returns once it was received."""
    return _p2p.start([P2POp("send", tensor, dst, tag)], name or f"send.to{dst}.tag{tag}", process_set, _buffer)


def irecv(tensor, src, tag=0, name=None, process_set=None):
    """Starts receiving into `tensor` from global rank `src`; synchronize(handle) returns `tensor`."""
    return _p2p.start([P2POp("recv", tensor, src, tag)], name or f"recv.from{src}.tag{tag}", process_set, _buffer,
                      lambda _: tensor)


def _plain(tensor, peer, tag, process_set):
    """Whether _buffer() would pass `tensor` as it is, for a transfer in the global set (its lane)."""
    return (type(tensor) is torch.Tensor and process_set is None and type(peer) is int and type(tag) is int
            and tensor.is_cpu and tensor.layout is torch.strided and tensor.dtype in CODES and tensor.is_contiguous())


def send(tensor, dst, tag=0, name=None, process_set=None):
    """Sends `tensor` to global rank `dst`; returns once `dst` has received it."""
    if _plain(tensor, dst, tag, process_set):
        _core.transfer_checked(True, tensor.data_ptr(), tensor.nbytes, dst, tag, name or None, tensor)
    else:
        _p2p.transfer(True, tensor, dst, tag, name or f"send.to{dst}.tag{tag}", process_set, _buffer)


def recv(tensor, src, tag=0, name=None, process_set=None):
    """Receives a message from global rank `src` into `tensor` (in place) and returns it."""
    if _plain(tensor, src, tag, process_set):
        _core.transfer_checked(False, tensor.data_ptr(), tensor.nbytes, src, tag, name or None, tensor)
        return tensor
    return _p2p.transfer(False, tensor, src, tag, name or f"recv.from{src}.tag{tag}", process_set, _buffer)


def batch_isend_irecv(ops, name=None, process_set=None):
    """Starts every horo.P2POp in `ops` together; one handle completes once all have."""
    return _p2p.start(list(ops), name or "batch_isend_irecv", process_set, _buffer)
