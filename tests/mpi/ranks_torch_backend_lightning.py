"""Lightning's DDPStrategy on the "horo" backend, inside each MPI rank: the digits classifier
of examples/torch_lightning.py fitted over horo and then over gloo (a fresh default group
each time) reaches the same loss and the same weights.

Runs inside each MPI rank (see conftest.py in this folder); np = 2.
"""
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from torch_lightning import fit  # noqa: E402


def fit_on(backend, devices):
    loss, model = fit(backend, epochs=2, batch_size=32, devices=devices)
    assert dist.get_backend() == backend
    dist.destroy_process_group()  # Lightning leaves its default group up; the next fit makes its own
    return loss, model


def test_lightning_ddp_over_horo_equals_gloo(comm):
    horo_loss, horo_model = fit_on("horo", comm.Get_size())
    gloo_loss, gloo_model = fit_on("gloo", comm.Get_size())
    assert abs(horo_loss - gloo_loss) <= 1e-6 * max(1.0, abs(gloo_loss)), (horo_loss, gloo_loss)
    assert horo_loss < 1.0  # it learned (chance is ln 10 = 2.3)
    for (name, p), q in zip(horo_model.named_parameters(), gloo_model.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), atol=1e-6, rtol=1e-5, msg=lambda m: f"{name}: {m}")
