"""PyTorch's distributed training stack on the "horo" backend, inside each MPI rank:
DistributedDataParallel (against one process trained on the whole batch, and against
DDP over gloo), no_sync() accumulation, join() with uneven inputs, the communication
hooks (fp16, bf16, PowerSGD, post-local SGD), ZeroRedundancyOptimizer and FSDP2's
fully_shard (on CPU) against their unsharded equivalents.

Runs inside each MPI rank (see conftest.py in this folder); np = 2 and 4.
"""

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import horo.torch  # noqa: F401 - registers the backend

STEPS = 4
LOCAL = 4  # rows per rank per step


@pytest.fixture(scope="module", autouse=True)
def world():
    dist.init_process_group("horo")
    yield
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def gloo():
    """A gloo group over the same ranks, beside the horo world, for the comparisons."""
    return dist.new_group(backend="gloo")


@pytest.fixture(scope="module")
def n():
    return dist.get_world_size()


@pytest.fixture(scope="module")
def me():
    return dist.get_rank()


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 3))


def batches(n, steps=STEPS, seed=1):
    """The global batch of each step: (x, y) of n * LOCAL rows, the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(n * LOCAL, 6, generator=g), torch.randn(n * LOCAL, 3, generator=g)) for _ in range(steps)]


def mine(batch, me):
    x, y = batch
    return x[me * LOCAL:(me + 1) * LOCAL], y[me * LOCAL:(me + 1) * LOCAL]


def train(model, opt, data):
    for x, y in data:
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    return model


def assert_same_weights(a, b, what, atol=1e-6, rtol=1e-5):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), atol=atol, rtol=rtol, msg=lambda m: f"{what}: {name}: {m}")


def ddp_trained(n, me, process_group=None, hook=None, state=None, optimizer=torch.optim.SGD, steps=STEPS, seed=1,
                **ddp_kw):
    model = DDP(make_model(), process_group=process_group, **ddp_kw)
    if hook is not None:
        model.register_comm_hook(state, hook)
    opt = optimizer(model.parameters(), lr=0.05)
    return train(model, opt, [mine(b, me) for b in batches(n, steps, seed)]).module


def single_process(n, optimizer=torch.optim.SGD, steps=STEPS):
    model = make_model()
    return train(model, optimizer(model.parameters(), lr=0.05), batches(n, steps))


# --- DDP ---------------------------------------------------------------------------------------------------------------

def test_ddp_equals_one_process_on_the_whole_batch(n, me):
    assert_same_weights(ddp_trained(n, me), single_process(n), "DDP(horo) vs one process")


def test_ddp_equals_ddp_over_gloo(n, me, gloo):
    assert_same_weights(ddp_trained(n, me), ddp_trained(n, me, process_group=gloo), "DDP(horo) vs DDP(gloo)")


def test_ddp_small_buckets_and_grad_views(n, me):
    # Many buckets in flight at once, written straight into the gradients.
    model = ddp_trained(n, me, bucket_cap_mb=0.0005, gradient_as_bucket_view=True, optimizer=torch.optim.Adam)
    assert_same_weights(model, single_process(n, optimizer=torch.optim.Adam), "DDP small buckets (Adam)")


def test_ddp_no_sync_accumulation(n, me):
    model = DDP(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    reference = make_model()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05)
    data = batches(n, steps=4, seed=2)
    for first, second in (data[0:2], data[2:4]):
        opt.zero_grad()
        with model.no_sync():  # gradients stay local...
            x, y = mine(first, me)
            F.mse_loss(model(x), y).backward()
        x, y = mine(second, me)  # ...until this backward averages the sum
        F.mse_loss(model(x), y).backward()
        opt.step()
        ref_opt.zero_grad()
        for x, y in (first, second):
            F.mse_loss(reference(x), y).backward()
        ref_opt.step()
    assert_same_weights(model.module, reference, "no_sync accumulation")


def test_ddp_join_with_uneven_inputs(n, me, gloo):
    from torch.distributed.algorithms.join import Join

    def run(group):
        model = DDP(make_model(), process_group=group)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        data = [mine(b, me) for b in batches(n, steps=2 + me, seed=3)]  # rank r has 2 + r batches
        with Join([model]):
            train(model, opt, data)
        return model.module

    assert_same_weights(run(None), run(gloo), "join(): horo vs gloo")


# --- communication hooks -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("hook_name", ["fp16_compress_hook", "bf16_compress_hook"])
def test_compression_hooks(n, me, gloo, hook_name):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    if hook_name == "bf16_compress_hook":
        # torch's bf16_compress_hook refuses to run without CUDA 11+ and NCCL 2.10+ before it communicates;
        # its body (_compress_hook with bfloat16) is what runs on any backend.
        def hook(process_group, bucket):
            return default_hooks._compress_hook(torch.bfloat16, process_group, bucket)
    else:
        hook = getattr(default_hooks, hook_name)
    on_horo = ddp_trained(n, me, hook=hook, state=None)
    on_gloo = ddp_trained(n, me, process_group=gloo, hook=hook, state=gloo)
    assert_same_weights(on_horo, on_gloo, f"{hook_name}: horo vs gloo", atol=1e-3, rtol=1e-2)
    assert_same_weights(on_horo, single_process(n), f"{hook_name} vs uncompressed", atol=2e-2, rtol=5e-2)


def test_powersgd_hook(n, me, gloo):
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD

    def state(group):
        return powerSGD.PowerSGDState(process_group=group, matrix_approximation_rank=2, start_powerSGD_iter=2,
                                      min_compression_rate=0.5, random_seed=7)

    on_horo = ddp_trained(n, me, hook=powerSGD.powerSGD_hook, state=state(None), steps=6)
    on_gloo = ddp_trained(n, me, process_group=gloo, hook=powerSGD.powerSGD_hook, state=state(gloo), steps=6)
    assert_same_weights(on_horo, on_gloo, "PowerSGD: horo vs gloo", atol=1e-5, rtol=1e-4)


def test_post_local_sgd_hook_with_post_local_sgd_optimizer(n, me, gloo):
    from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as post_local
    from torch.distributed.optim import PostLocalSGDOptimizer
    from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager

    def run(group, backend):
        subgroup, _ = dist.new_subgroups(group_size=2 if n % 2 == 0 else 1, backend=backend)
        model = DDP(make_model(), process_group=group)
        model.register_comm_hook(post_local.PostLocalSGDState(process_group=group, subgroup=subgroup,
                                                              start_localSGD_iter=2), post_local.post_localSGD_hook)
        opt = PostLocalSGDOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                    PeriodicModelAverager(period=2, warmup_steps=2, process_group=group))
        return train(model, opt, [mine(b, me) for b in batches(n, steps=6, seed=4)]).module

    on_horo = run(None, None)
    on_gloo = run(gloo, "gloo")
    assert_same_weights(on_horo, on_gloo, "post-local SGD: horo vs gloo")


# --- sharding --------------------------------------------------------------------------------------------------------------

def test_zero_redundancy_optimizer_equals_unsharded(n, me):
    from torch.distributed.optim import ZeroRedundancyOptimizer

    def run(sharded):
        model = DDP(make_model())
        if sharded:
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.05)
        else:
            opt = torch.optim.Adam(model.parameters(), lr=0.05)
        return train(model, opt, [mine(b, me) for b in batches(n, seed=5)]).module

    sharded = run(True)
    assert_same_weights(sharded, run(False), "ZeroRedundancyOptimizer vs Adam")


def test_fsdp2_fully_shard_equals_ddp(n, me):
    # FSDP2 (fully_shard) runs on CPU with a CPU DeviceMesh, whose groups are horo process sets.
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (n,))
    model = make_model()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    train(model, opt, [mine(b, me) for b in batches(n, seed=6)])
    ddp = ddp_trained(n, me, optimizer=torch.optim.Adam, seed=6)
    for (name, p), q in zip(model.named_parameters(), ddp.parameters()):
        torch.testing.assert_close(p.full_tensor().detach(), q.detach(), atol=1e-6, rtol=1e-5,
                                   msg=lambda m: f"FSDP2 vs DDP: {name}: {m}")
