"""Start every rank from the same place: broadcast_parameters and broadcast_optimizer_state
(plus horo's broadcast_object / allgather_object, which move any picklable object).

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

Tensors are broadcast in place: all enqueued, then all awaited (they fuse).
"""
import torch

from horo import basics
from horo.enqueue import returning
from horo.handles import blocking, synchronize_all
from horo.objects import allgather_object, broadcast_object
from horo.process_sets import global_process_set
from horo.torch.enqueue import enqueue, tensor_name
from horo.torch.tensors import CODES, as_bytes, checked

__all__ = ["broadcast_parameters", "broadcast_optimizer_state", "broadcast_object", "allgather_object"]


def _broadcast_in_place_async(tensor, root_rank, name, process_set):
    # A broadcast only copies bytes: a dtype the core cannot reduce (a bool mask, an
    # int16 or complex buffer in a state_dict) travels as uint8 over the same memory.
    unreducible = isinstance(tensor, torch.Tensor) and tensor.dtype not in CODES
    t = as_bytes(tensor, name) if unreducible else checked(tensor, name, in_place=True)
    return enqueue("broadcast", name, t, t, returning(tensor), root=root_rank, process_set=process_set)


@blocking
def broadcast_parameters(params, root_rank=0, process_set=global_process_set):
    """Overwrites every tensor in `params` with root_rank's, in place.

    `params`: model.state_dict(), model.named_parameters(), a dict of name -> tensor,
    or a list of tensors / (name, tensor) pairs; the same structure on every rank.
    """
    if isinstance(params, dict):
        items = list(params.items())
    else:
        try:
            items = [p if isinstance(p, tuple) else (None, p) for p in params]
        except TypeError:
            raise ValueError(f"broadcast_parameters: invalid params of type {type(params).__name__}; pass "
                             "model.state_dict(), model.named_parameters() or a list of tensors") from None
    handles = []
    for name, tensor in items:
        name = tensor_name(None, "broadcast_parameters", process_set) if name is None \
            else f"broadcast_parameters.{name}"
        try:
            handles.append(_broadcast_in_place_async(tensor, root_rank, name, process_set))
        except Exception:
            synchronize_all(handles)  # let the ones already enqueued finish before raising
            raise
    synchronize_all(handles)


@blocking
def broadcast_optimizer_state(optimizer, root_rank=0, model=None, process_set=global_process_set):
    """Makes every rank's optimizer state and hyper-parameters (lr, betas, ...) root_rank's.

    `model` is accepted for Horovod's signature and not needed. As Horovod's dummy step
    leaves them, parameters that require a gradient and have none get a zero one when
    the optimizer has no state yet (scripts read p.grad right after this call).

    Root describes its state (which parameters have which entries; tensor shapes
    and dtypes; non-tensor values such as step counts) in one small object; every
    rank then creates or reshapes its entries to match (so lazily created state,
    e.g. Adam's before its first step, needs no dummy step) and the tensors are
    broadcast in place. Parameters are matched by their position in param_groups.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"broadcast_optimizer_state: optimizer must be a torch.optim.Optimizer, "
                        f"got {type(optimizer).__name__}")
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not any(optimizer.state.get(p) for p in params):
        for p in params:
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)
    layout = [len(group["params"]) for group in optimizer.param_groups]
    skeleton = None
    if basics.rank() == root_rank:
        skeleton = {
            "layout": layout,
            "groups": [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups],
            "state": {i: {k: _describe(v) for k, v in optimizer.state[p].items()}
                      for i, p in enumerate(params) if optimizer.state.get(p)},
        }
    skeleton = broadcast_object(skeleton, root_rank, name="broadcast_optimizer_state.skeleton",
                                process_set=process_set)
    # Every rank learns whether any rank's optimizer differs in shape from root's, so all raise together.
    problem = None
    if skeleton["layout"] != layout:
        problem = (f"rank {basics.rank()}: parameters per group {layout} differ from root rank {root_rank}'s "
                   f"{skeleton['layout']}")
    problems = [p for p in allgather_object(problem, name="broadcast_optimizer_state.check",
                                            process_set=process_set) if p]
    if problems:
        raise ValueError("broadcast_optimizer_state: " + "; ".join(problems))

    for group, values in zip(optimizer.param_groups, skeleton["groups"]):
        group.update(values)
    tensors = []
    for i, p in enumerate(params):
        entries = skeleton["state"].get(i)
        if entries is None:
            optimizer.state.pop(p, None)
            continue
        state = optimizer.state[p]
        for key in [k for k in state if k not in entries]:
            del state[key]
        for key, (kind, value) in entries.items():
            if kind == "value":
                state[key] = value
                continue
            shape, dtype = value
            mine = state.get(key)
            if isinstance(mine, torch.Tensor) and mine.shape == shape and mine.dtype == dtype \
                    and mine.device.type in ("cpu", "cuda") and mine.layout is torch.strided:
                if not mine.is_contiguous():
                    state[key] = mine = mine.contiguous()
            else:
                # State lives with its parameter (a CUDA model's Adam moments on its GPU); scalars
                # such as Adam's step stay on the CPU, where torch's optimizers keep them.
                device = p.device if len(shape) > 0 else "cpu"
                state[key] = mine = torch.empty(shape, dtype=dtype, device=device)
            tensors.append((f"{i}.{key}", mine))
    handles = [_broadcast_in_place_async(t, root_rank, f"broadcast_optimizer_state.{name}", process_set)
               for name, t in tensors]
    synchronize_all(handles)


def _describe(value):
    """How root's state entry travels: tensors in place (shape, dtype), anything else pickled."""
    if isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.layout is torch.strided:
        return "tensor", (value.shape, value.dtype)
    return "value", value
