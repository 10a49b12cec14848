"""Point-to-point for the horo backend: send/recv/isend/irecv and batch_isend_irecv.

horo's point-to-point takes contiguous CPU tensors and global peer ranks; a CUDA or
non-contiguous tensor is staged through a contiguous CPU copy here.

torch 2.13 coalesces batch_isend_irecv only for C++ backends (its check is
`type(group) is ProcessGroup`); for a Python group it issues one isend/irecv per op.
`install_batch()` puts a thin wrapper in front of torch.distributed.batch_isend_irecv
that sends a batch on a horo group as ONE horo batch call (one handle for the batch)
and hands any other group to torch's own function unchanged.
"""
import functools

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

import horo.torch as hvd
from horo.torch.distributed.work import HoroWork


def _staged(tensor, sending):
    """A contiguous CPU tensor for horo: `tensor` itself where it already is one."""
    if tensor.is_cpu and tensor.is_contiguous():
        return tensor
    staged = torch.empty(tensor.shape, dtype=tensor.dtype)
    if sending:
        staged.copy_(tensor)
    return staged


def _copy_back(tensor, staged):
    if staged is not tensor:
        tensor.copy_(staged)


def send(pg, tensor, dst, tag):
    staged = _staged(tensor, sending=True)
    handle = hvd.isend(staged, dst, tag=tag, process_set=pg.process_set)
    return HoroWork([handle], lambda _values: [tensor], [tensor], "send")


def recv(pg, tensor, src, tag):
    staged = _staged(tensor, sending=False)
    handle = hvd.irecv(staged, src, tag=tag, process_set=pg.process_set)

    def finish(_values):
        _copy_back(tensor, staged)
        return [tensor]

    return HoroWork([handle], finish, [tensor], "recv")


def batch(pg, p2p_ops):
    """One horo batch for the ops (all on `pg`); returns [one Work], as torch's coalesced path does."""
    horo_ops, receives = [], []
    for op in p2p_ops:
        sending = op.op in (dist.isend, dist.send)
        peer = pg.global_ranks[op.group_peer]
        tensor = torch.view_as_real(op.tensor) if op.tensor.is_complex() else op.tensor
        staged = _staged(tensor, sending)
        if not sending:
            receives.append((tensor, staged))
        horo_ops.append(hvd.P2POp("send" if sending else "recv", staged, peer, op.tag))
    handle = hvd.batch_isend_irecv(horo_ops, process_set=pg.process_set)

    def finish(_values):
        for tensor, staged in receives:
            _copy_back(tensor, staged)
        return [op.tensor for op in p2p_ops]

    return [HoroWork([handle], finish, [op.tensor for op in p2p_ops], "batch_isend_irecv")]


def install_batch():
    """Wraps torch.distributed.batch_isend_irecv (both names torch code reaches it by)."""
    original = c10d.batch_isend_irecv
    if getattr(original, "_horo_wrapped", False):
        return

    @functools.wraps(original)
    def batch_isend_irecv(p2p_op_list):
        from horo.torch.distributed.process_group import ProcessGroupHoro

        c10d._check_p2p_op_list(p2p_op_list)
        group = p2p_op_list[0].group or c10d._get_default_group()
        if isinstance(group, ProcessGroupHoro):
            return batch(group, p2p_op_list)
        return original(p2p_op_list)

    batch_isend_irecv._horo_wrapped = True
    c10d.batch_isend_irecv = batch_isend_irecv
    dist.batch_isend_irecv = batch_isend_irecv
