"""torch.distributed.pipelining on the "horo" backend, inside each MPI rank: ScheduleGPipe
and Schedule1F1B over as many stages as ranks (2 and 4) give the unsplit model's
per-micro-batch losses and gradients, over several optimizer steps; and at np=4, two
stages x two data-parallel replicas (pipelines on process-set groups, gradients averaged
across replicas) give the whole batch's gradients.

Runs inside each MPI rank (see conftest.py in this folder); np = 2 and 4.
"""
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

import horo.torch  # noqa: F401 - registers the backend

BLOCKS = 4
MICRO = 4
WIDTH = 8


@pytest.fixture(scope="module", autouse=True)
def world():
    dist.init_process_group("horo")
    yield
    dist.destroy_process_group()


def whole_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh())
                                 for _ in range(BLOCKS)])


def stage_of(model, stage, stages):
    per = BLOCKS // stages
    return torch.nn.Sequential(*list(model)[stage * per:(stage + 1) * per])


def batch(step, rows=16):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(rows, WIDTH, generator=g), torch.randn(rows, WIDTH, generator=g)


def run_pipeline(schedule_class, stage_module, stage, stages, x, y, group=None):
    """One schedule step; returns the last stage's per-micro-batch losses (else [])."""
    pipe = PipelineStage(stage_module, stage, stages, torch.device("cpu"), group=group)
    schedule = schedule_class(pipe, n_microbatches=MICRO, loss_fn=F.mse_loss)
    losses = []
    if stage == 0:
        schedule.step(x)
    elif stage == stages - 1:
        schedule.step(target=y, losses=losses)
    else:
        schedule.step()
    return losses


@pytest.mark.parametrize("schedule_class", [ScheduleGPipe, Schedule1F1B], ids=lambda c: c.__name__)
def test_schedule_equals_the_unsplit_model(schedule_class):
    stages, stage = dist.get_world_size(), dist.get_rank()
    if BLOCKS % stages:
        pytest.skip(f"{BLOCKS} blocks do not split into {stages} stages")
    mine = stage_of(whole_model(), stage, stages)
    reference = whole_model()
    opt = torch.optim.SGD(mine.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(3):
        x, y = batch(step)
        opt.zero_grad()
        losses = run_pipeline(schedule_class, mine, stage, stages, x, y)
        ref_opt.zero_grad()
        ref_losses = [F.mse_loss(reference(xm), ym).detach() for xm, ym in zip(x.chunk(MICRO), y.chunk(MICRO))]
        F.mse_loss(reference(x), y).backward()  # the schedule averages the micro-batches' gradients
        if stage == stages - 1:
            torch.testing.assert_close(torch.stack(losses).detach(), torch.stack(ref_losses), atol=1e-6, rtol=1e-5)
        for (name, p), q in zip(mine.named_parameters(), stage_of(reference, stage, stages).parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-5,
                                       msg=lambda m: f"step {step}, stage {stage}, {name}: {m}")
        opt.step()
        ref_opt.step()


def test_two_stages_times_two_replicas():
    if dist.get_world_size() != 4:
        pytest.skip("2 stages x 2 replicas needs 4 ranks")
    me = dist.get_rank()
    replica, stage = divmod(me, 2)  # ranks {0,1} and {2,3} are pipelines; {0,2} and {1,3} replicas of a stage
    pipelines = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    replicas = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    mine = stage_of(whole_model(), stage, 2)
    x, y = batch(7, rows=32)
    half = slice(replica * 16, (replica + 1) * 16)
    run_pipeline(Schedule1F1B, mine, stage, 2, x[half], y[half], group=pipelines[replica])
    for p in mine.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=replicas[stage])
    reference = whole_model()
    F.mse_loss(reference(x), y).backward()
    for p, q in zip(mine.parameters(), stage_of(reference, stage, 2).parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-5)
