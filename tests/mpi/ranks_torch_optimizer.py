"""horo.torch training, inside each MPI rank: DistributedOptimizer on N ranks equals one
process training on the concatenated batch (computed inside every rank from the same
seeds), with SGD+momentum and Adam, Average/Sum/predivide, gradient accumulation
(backward_passes_per_step), fp16 compression, skip_synchronize, unused parameters and
sparse gradients; broadcast_parameters and broadcast_optimizer_state.

Runs inside each MPI rank (see conftest.py in this folder for how to launch it).
"""
import copy
import hashlib

import pytest
import torch

from rank_helpers import gather_and_compare

BATCH = 4  # rows per rank per step
STEPS = 4


@pytest.fixture(scope="module")
def thvd():
    import horo.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    yield hvd


class Net(torch.nn.Module):
    def __init__(self, seed, extra=False):
        super().__init__()
        torch.manual_seed(seed)
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 3)
        self.extra = torch.nn.Linear(8, 3) if extra else None
        self.double()

    def forward(self, x, use_extra=False):
        h = torch.relu(self.fc1(x))
        out = self.fc2(h)
        if use_extra:
            out = out + self.extra(h)
        return out


def batches(size, steps=STEPS, seed=7):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(size * BATCH, 6, generator=g, dtype=torch.float64),
             torch.randn(size * BATCH, 3, generator=g, dtype=torch.float64)) for _ in range(steps)]


def loss_fn(out, y):
    return ((out - y) ** 2).mean()


def train_reference(make_opt, size, steps=STEPS, seed=0):
    """One process, the whole global batch each step."""
    model = Net(seed)
    opt = make_opt(model)
    for x, y in batches(size, steps):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    return model


def digest(model):
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:20]


def assert_close_models(a, b, rtol=1e-10, atol=1e-12):
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=rtol, atol=atol, msg=lambda m, name=name: f"{name}: {m}")


SGD = (lambda model: torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
ADAM = (lambda model: torch.optim.Adam(model.parameters(), lr=0.01))


@pytest.mark.parametrize("make_opt,kwargs", [
    (SGD, {}),
    (ADAM, {}),
    (SGD, {"gradient_predivide_factor": 2.0}),
    (SGD, {"named": False}),
], ids=["sgd", "adam", "predivide", "unnamed"])
def test_training_equals_one_process_on_the_global_batch(thvd, comm, make_opt, kwargs):
    size, rank = thvd.size(), thvd.rank()
    kwargs = dict(kwargs)
    named = kwargs.pop("named", True)
    model = Net(100 + rank)  # every rank starts elsewhere: broadcast_parameters must fix that
    thvd.broadcast_parameters(model.state_dict(), root_rank=0)
    assert_close_models(model, Net(100))  # root's initial weights, everywhere
    gather_and_compare(comm, digest(model), "weights after broadcast_parameters")
    base = make_opt(model)
    opt = thvd.DistributedOptimizer(base, named_parameters=model.named_parameters() if named else None, **kwargs)
    assert isinstance(opt, type(base))
    for x, y in batches(size):
        opt.zero_grad()
        mine = slice(rank * BATCH, (rank + 1) * BATCH)
        loss_fn(model(x[mine]), y[mine]).backward()
        opt.step()
    reference = train_reference(make_opt, size, seed=100)
    assert_close_models(model, reference)
    gather_and_compare(comm, digest(model), "weights after training")
    # the wrapper's state is a torch optimizer's: it loads into a plain one
    plain = make_opt(copy.deepcopy(model))
    plain.load_state_dict(opt.state_dict())


def test_op_sum_adds_the_gradients(thvd):
    size, rank = thvd.size(), thvd.rank()
    model = Net(0)
    opt = thvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1 / size), op=thvd.Sum,
                                    named_parameters=model.named_parameters())
    for x, y in batches(size):
        opt.zero_grad()
        mine = slice(rank * BATCH, (rank + 1) * BATCH)
        loss_fn(model(x[mine]), y[mine]).backward()
        opt.step()
    assert_close_models(model, train_reference(lambda m: torch.optim.SGD(m.parameters(), lr=0.1), size))


def test_backward_passes_per_step_equals_the_larger_batch(thvd):
    size, rank = thvd.size(), thvd.rank()
    model = Net(0)
    opt = thvd.DistributedOptimizer(SGD(model), named_parameters=model.named_parameters(),
                                    backward_passes_per_step=2)
    half = BATCH // 2
    for x, y in batches(size):
        opt.zero_grad()
        for k in range(2):  # two micro-batches of half the rows; the loss scaled as for accumulation
            rows = slice(rank * BATCH + k * half, rank * BATCH + (k + 1) * half)
            (loss_fn(model(x[rows]), y[rows]) / 2).backward()
        opt.step()
    assert_close_models(model, train_reference(SGD, size))


def test_fp16_compression_within_tolerance(thvd):
    size, rank = thvd.size(), thvd.rank()
    model = Net(0)
    opt = thvd.DistributedOptimizer(SGD(model), named_parameters=model.named_parameters(),
                                    compression=thvd.Compression.fp16)
    for x, y in batches(size):
        opt.zero_grad()
        mine = slice(rank * BATCH, (rank + 1) * BATCH)
        loss_fn(model(x[mine]), y[mine]).backward()
        opt.step()
        assert all(p.grad.dtype == torch.float64 for p in model.parameters())
    # fp16 keeps ~3 significant digits of each averaged gradient; over 4 steps the weights stay within 1e-3
    assert_close_models(model, train_reference(SGD, size), rtol=1e-3, atol=1e-3)


def test_synchronize_then_clip_then_skip_synchronize(thvd):
    size, rank = thvd.size(), thvd.rank()
    model = Net(0)
    opt = thvd.DistributedOptimizer(SGD(model), named_parameters=model.named_parameters())
    ref = Net(0)
    ref_opt = SGD(ref)
    for x, y in batches(size):
        opt.zero_grad()
        mine = slice(rank * BATCH, (rank + 1) * BATCH)
        loss_fn(model(x[mine]), y[mine]).backward()
        opt.synchronize()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        with opt.skip_synchronize():
            opt.step()
        ref_opt.zero_grad()
        loss_fn(ref(x), y).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        ref_opt.step()
    assert_close_models(model, ref)


def test_zero_grad_with_allreduces_pending_raises(thvd):
    size, rank = thvd.size(), thvd.rank()
    if size < 2:
        pytest.skip("a world of one does not allreduce")
    model = Net(0)
    opt = thvd.DistributedOptimizer(SGD(model), named_parameters=model.named_parameters())
    x, y = batches(size, 1)[0]
    loss_fn(model(x), y).backward()
    with pytest.raises(AssertionError, match="zero_grad"):
        opt.zero_grad()
    opt.step()
    opt.zero_grad()  # fine once step() has waited
    assert all(p.grad is None for p in model.parameters())
    # a second backward without step() (backward_passes_per_step=1) is refused clearly
    loss_fn(model(x), y).backward(retain_graph=False)
    with pytest.raises(AssertionError, match="backward_passes_per_step"):
        loss_fn(model(x), y).backward()
    opt.synchronize()


def test_parameters_without_gradient_do_not_hang(thvd, comm):
    size, rank = thvd.size(), thvd.rank()
    model = Net(0, extra=True)
    frozen = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))  # in the optimizer, never used
    opt = thvd.DistributedOptimizer(
        torch.optim.SGD(list(model.parameters()) + [frozen], lr=0.1),
        named_parameters=list(model.named_parameters()) + [("frozen", frozen)],
    )
    x, y = batches(size, 1)[0]
    mine = slice(rank * BATCH, (rank + 1) * BATCH)
    for _ in range(2):
        opt.zero_grad()
        if rank == 0:
            # This rank's own gradient of `extra`, taken without accumulating into .grad: after
            # backward() p.grad is already being averaged in place (the other ranks may have
            # reached step() and sent their zeros), so reading it there would race.
            loss = loss_fn(model(x[mine], use_extra=True), y[mine])
            local = torch.autograd.grad(loss, model.extra.weight)[0]
        # only rank 0 uses `extra`: the other ranks contribute zeros for its gradient
        loss_fn(model(x[mine], use_extra=(rank == 0)), y[mine]).backward()
        opt.step()
    # the averaged gradient of `extra` is rank 0's divided by the number of ranks
    if rank == 0:
        torch.testing.assert_close(model.extra.weight.grad, local / size)
    gather_and_compare(comm, digest(model), "weights with a parameter used on rank 0 only")
    if size > 1:  # (a world of one leaves gradients alone, as Horovod does)
        assert torch.equal(frozen.grad, torch.zeros(2, dtype=torch.float64))


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_embedding_gradients(thvd, sparse_as_dense):
    size, rank = thvd.size(), thvd.rank()

    def make():
        torch.manual_seed(3)
        return torch.nn.Embedding(10, 3, sparse=True).double()

    emb, ref = make(), make()
    opt = thvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.5),
                                    named_parameters=emb.named_parameters(), sparse_as_dense=sparse_as_dense)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    ids = [torch.tensor([r % 10, (3 * r + 1) % 10, 7]) for r in range(size)]
    for _ in range(2):
        opt.zero_grad()
        emb(ids[rank]).pow(2).sum().div(size).backward()
        opt.step()
        ref_opt.zero_grad()
        sum(ref(i).pow(2).sum() for i in ids).div(size * size).backward()
        ref_opt.step()
    torch.testing.assert_close(emb.weight, ref.weight, rtol=1e-12, atol=1e-12)


def test_broadcast_optimizer_state_lazy_state_and_hyperparameters(thvd, comm):
    size, rank = thvd.size(), thvd.rank()
    model = Net(0)
    base = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.9, 0.99))
    if rank == 0:  # only root has stepped (the others' Adam state does not exist yet) and changed lr/betas
        for x, y in batches(1, 2, seed=11):
            base.zero_grad()
            loss_fn(model(x), y).backward()
            base.step()
        base.param_groups[0]["lr"] = 0.123
        base.param_groups[0]["betas"] = (0.8, 0.95)
    else:
        assert not base.state
    thvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = thvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
    thvd.broadcast_optimizer_state(opt, root_rank=0)
    state = opt.state_dict()
    assert state["param_groups"][0]["lr"] == 0.123 and state["param_groups"][0]["betas"] == (0.8, 0.95)
    assert all(float(s["step"]) == 2.0 for s in state["state"].values())
    h = hashlib.sha256(repr(state["param_groups"]).encode())
    for i in sorted(state["state"]):
        for k in sorted(state["state"][i]):
            h.update(state["state"][i][k].numpy().tobytes())
    gather_and_compare(comm, h.hexdigest(), "optimizer state after broadcast_optimizer_state")
    # and training on from there stays in lockstep
    for x, y in batches(size, 2, seed=12):
        opt.zero_grad()
        mine = slice(rank * BATCH, (rank + 1) * BATCH)
        loss_fn(model(x[mine]), y[mine]).backward()
        opt.step()
    gather_and_compare(comm, digest(model), "weights after training on from the broadcast state")


def test_broadcast_parameters_forms_and_buffers(thvd, comm):
    size, rank = thvd.size(), thvd.rank()
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    model.register_buffer("mask", torch.rand(4) > 0.5)  # bool: broadcast as bytes
    model(torch.randn(5, 3))  # BatchNorm running stats and num_batches_tracked differ per rank
    thvd.broadcast_parameters(model.state_dict(), root_rank=size - 1)
    gather_and_compare(comm, digest(model), "state_dict after broadcast_parameters")
    before = digest(model)
    torch.manual_seed(50 + rank)
    for p in model.parameters():
        p.data.normal_()
    thvd.broadcast_parameters(model.named_parameters(), root_rank=0)  # a generator of (name, tensor)
    thvd.broadcast_parameters([p for p in model.parameters()], root_rank=0)  # bare tensors
    gather_and_compare(comm, digest(model), "parameters after broadcast_parameters(named_parameters())")
    assert before != digest(model) or size == 1
    with pytest.raises(ValueError, match="contiguous"):
        thvd.broadcast_parameters({"t": torch.zeros(3, 2).t()})
