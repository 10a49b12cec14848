"""horo on CUDA tensors, inside each MPI rank (driven by tests/test_gpu.py, which
skips where no GPU is visible): every collective through horo's GPU path (NCCL, or
MPI staging for HORO_GPU_TRANSPORT=mpi and for ranks sharing one GPU) against the
NumPy reference; results stay on the device; a tensor produced on a side stream
is read only after its producer; CuPy in and out; DistributedOptimizer on a CUDA
model equals one process on the whole batch.
"""
import numpy as np
import pytest
import torch

from horo_reference import BFLOAT16, DTYPES, OPS, check_result, kinds_for, make_rank_inputs, must_be_exact, reference
from rank_helpers import expect_raise_on_every_rank

TORCH_DTYPES = {
    "uint8": torch.uint8, "int8": torch.int8, "int32": torch.int32, "int64": torch.int64,
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
}


@pytest.fixture(scope="module")
def hvd():
    import horo.torch as hvd

    hvd.init()
    # One GPU per rank where there are enough, else all on GPU 0 (MPI staging then).
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    yield hvd


def cuda(a):
    a = np.ascontiguousarray(a)
    if a.dtype == BFLOAT16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).cuda()
    return torch.from_numpy(a.copy()).cuda()


def host(t):
    assert t.is_cuda, f"result is on {t.device}, not on the GPU"
    t = t.cpu()
    return t.view(torch.int16).numpy().view(BFLOAT16) if t.dtype == torch.bfloat16 else t.numpy()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_allreduce_every_dtype_and_op(hvd, dtype, op):
    for kind in kinds_for(dtype):
        inputs = make_rank_inputs(("gpu", dtype, op, kind), dtype, (5, 7), op, kind, hvd.size())
        t = cuda(inputs[hvd.rank()])
        exact = must_be_exact(dtype, op, kind, hvd.size())
        out = hvd.allreduce(t, op=getattr(hvd, op), name=f"ar.{dtype}.{op}.{kind}")
        check_result(host(out), inputs, op, exact, what=f"allreduce {dtype} {op} {kind}")
        hvd.allreduce_(t, op=getattr(hvd, op), name=f"ar_.{dtype}.{op}.{kind}")
        check_result(host(t), inputs, op, exact, what=f"allreduce_ {dtype} {op} {kind}")


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_allreduce_fused_with_scale_factors(hvd, dtype):
    inputs = [make_rank_inputs(("fused", dtype, i), dtype, (3 + i,), "Sum", "exact", hvd.size()) for i in range(6)]
    ts = [cuda(x[hvd.rank()]) for x in inputs]
    outs = hvd.grouped_allreduce(ts, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0, name=f"fused.{dtype}")
    for i, out in enumerate(outs):
        check_result(host(out), inputs[i], "Sum", True, 0.5, 4.0, what=f"fused {dtype} tensor {i}")


def test_large_fused_allreduce_equals_the_reference(hvd):
    # 3 x 6 MiB in one fused group: under MPI staging the fused buffer is pipelined in 4 MiB chunks
    # across tensor boundaries; under NCCL one fused collective. Either must give the NumPy answer.
    n = hvd.size()
    ts = [torch.full((6 << 18,), float(hvd.rank() + 1 + i), device="cuda") for i in range(3)]
    outs = hvd.grouped_allreduce(ts, op=hvd.Sum, name="fused.large")
    for i, out in enumerate(outs):
        expected = sum(r + 1 + i for r in range(n))
        got = host(out)
        assert got.shape == (6 << 18,) and (got == expected).all(), f"tensor {i}: {got[:4]} != {expected}"


def test_core_allocated_outputs_are_freed_in_stream_order(hvd):
    # allgather outputs come from cudaMallocAsync and go back with cudaFreeAsync on the caller's
    # stream: dropping them while later work is queued must neither corrupt it nor fail.
    n = hvd.size()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        for step in range(20):
            x = torch.full((1 << 16,), float(step + hvd.rank()), device="cuda")
            gathered = hvd.allgather(x, name=f"ag.free.{step}")
            total = gathered.sum()
            del gathered  # freed on `side`, after the sum queued there
            assert total.item() == (1 << 16) * sum(step + r for r in range(n))
    torch.cuda.synchronize()


def test_broadcast_allgather_alltoall_reducescatter(hvd):
    n, me = hvd.size(), hvd.rank()
    x = torch.arange(12, dtype=torch.float32, device="cuda").reshape(4, 3) + 100 * me
    assert np.array_equal(host(hvd.broadcast(x, root_rank=n - 1, name="bc")), host(x) - 100 * me + 100 * (n - 1))
    rows = torch.full((me + 1, 2), float(me), device="cuda")  # ragged first dimension
    gathered = host(hvd.allgather(rows, name="ag"))
    assert np.array_equal(gathered, np.concatenate([np.full((r + 1, 2), float(r), np.float32) for r in range(n)]))
    send = torch.arange(n * 2, dtype=torch.int64, device="cuda").reshape(n * 2, 1) + 1000 * me
    received = host(hvd.alltoall(send, name="a2a"))
    assert np.array_equal(received.reshape(-1), np.concatenate([1000 * r + np.arange(2 * me, 2 * me + 2) for r in range(n)]))
    y = torch.ones((2 * n + 1, 3), dtype=torch.float32, device="cuda") * (me + 1)
    part = host(hvd.reducescatter(y, op=hvd.Sum, name="rs"))
    mine = 2 + (1 if me < 1 else 0)
    assert np.array_equal(part, np.full((mine, 3), n * (n + 1) / 2, np.float32))


def test_side_stream_producer_is_waited_for(hvd):
    # The producer's kernel is still running when horo gets the tensor: horo must wait on it.
    side = torch.cuda.Stream()
    x = torch.zeros(1 << 20, device="cuda")
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time before the fill
        x.fill_(hvd.rank() + 1.0)
        out = hvd.allreduce(x, op=hvd.Sum, name="side")
        total = out.sum().item()  # on the side stream, after synchronize() made it wait
    n = hvd.size()
    assert total == (1 << 20) * n * (n + 1) / 2


def test_cupy_in_and_out(hvd):
    cupy = pytest.importorskip("cupy")
    import horo

    x = cupy.arange(6, dtype=cupy.float32) * (hvd.rank() + 1)
    out = horo.allreduce(x, op=horo.Sum, name="cupy")
    assert isinstance(out, cupy.ndarray)
    n = hvd.size()
    assert np.array_equal(cupy.asnumpy(out), np.arange(6, dtype=np.float32) * n * (n + 1) / 2)
    g = horo.allgather(cupy.full((2,), hvd.rank(), dtype=cupy.int32), name="cupy.ag")
    assert isinstance(g, cupy.ndarray) and cupy.asnumpy(g).tolist() == [r for r in range(n) for _ in range(2)]


def test_distributed_optimizer_equals_one_process_on_the_whole_batch(hvd):
    torch.manual_seed(0)
    n, me = hvd.size(), hvd.rank()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).cuda().double()
    single = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).cuda().double()
    single.load_state_dict(model.state_dict())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(single.parameters(), lr=0.1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        xb = torch.randn(4 * n, 8, generator=gen, dtype=torch.float64).cuda()
        yb = torch.randn(4 * n, 4, generator=gen, dtype=torch.float64).cuda()
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xb[4 * me:4 * me + 4]), yb[4 * me:4 * me + 4]).backward()
        opt.step()
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(single(xb), yb).backward()
        ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), single.parameters()):
        assert torch.allclose(p, q, rtol=1e-9, atol=1e-12), name


def test_mismatched_device_kinds_raise_on_every_rank(hvd, comm):
    if hvd.size() < 2:
        pytest.skip("needs two ranks")
    t = torch.ones(3, device="cuda" if hvd.rank() == 0 else "cpu")
    expect_raise_on_every_rank(comm, Exception, lambda: hvd.allreduce(t, name="mixed"), ["memory differs"])
