"""SyncBatchNorm: batch normalisation whose batch statistics span every rank.

    model = hvd.SyncBatchNorm.convert_sync_batchnorm(model)   # BatchNorm{1,2,3}d -> SyncBatchNorm

With a small batch per rank, plain BatchNorm normalises each rank's shard with its
own (noisy) mean and variance; SyncBatchNorm normalises with the statistics of the
whole global batch, exactly as one process would on the concatenated batch.

In training mode, forward gathers each rank's per-channel (count, mean, M2) and
combines them with Chan's parallel formula: ranks may hold different batch sizes
(even none), and no E[x^2] - E[x]^2 cancellation loses float32 precision. Backward
sums (sum dy, sum dy*(x - mean)) over the ranks: the two per-channel terms the input
gradient needs from the whole batch. Weight and bias gradients stay local, like every
other parameter's: the DistributedOptimizer averages them with the rest.
Evaluation mode, and a world of one, are plain torch batch_norm.
"""
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm


def _comm():
    # Imported when first used: horo.torch imports this module while it initialises.
    import horo.torch as hvd

    return hvd


def _world_size(process_set):
    return _comm().global_process_set.size() if process_set is None else process_set.size()


def _stats_dtype(x):
    return torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, process_set):
        hvd = _comm()
        channels = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        stats_dtype = _stats_dtype(x)
        count = x.numel() // channels if channels else 0
        xs = x.to(stats_dtype)
        if count > 0:
            var, mean = torch.var_mean(xs, dim=dims, correction=0)
        else:  # an empty shard still takes part: it contributes count 0
            mean = var = torch.zeros(channels, dtype=stats_dtype, device=x.device)
        local = torch.cat([mean, var * count, torch.tensor([float(count)], dtype=stats_dtype, device=x.device)])
        # one row per rank: [mean (C), M2 (C), count]
        process_set = hvd.global_process_set if process_set is None else process_set
        rows = hvd.allgather(local.unsqueeze(0), name=f"sync_batch_norm.stats.c{channels}", process_set=process_set)
        means, m2s, counts = rows[:, :channels], rows[:, channels:2 * channels], rows[:, 2 * channels:]
        total = counts.sum()
        if total <= 0:
            raise ValueError("SyncBatchNorm: the batch is empty on every rank")
        g_mean = (counts * means).sum(0) / total
        g_var = (m2s + counts * (means - g_mean) ** 2).sum(0) / total
        invstd = torch.rsqrt(g_var + eps)

        shape = [1, channels] + [1] * (x.dim() - 2)
        y = (xs - g_mean.view(shape)) * invstd.view(shape)
        if weight is not None:
            y = y * weight.to(stats_dtype).view(shape)
        if bias is not None:
            y = y + bias.to(stats_dtype).view(shape)
        ctx.save_for_backward(x, weight, g_mean, invstd)
        ctx.mark_non_differentiable(g_mean, g_var, total)
        ctx.total = total
        ctx.process_set = process_set
        ctx.bias_dtype = None if bias is None else bias.dtype
        return y.to(x.dtype), g_mean, g_var, total

    @staticmethod
    def backward(ctx, dy, _d_mean, _d_var, _d_total):
        hvd = _comm()
        x, weight, mean, invstd = ctx.saved_tensors
        channels = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        shape = [1, channels] + [1] * (x.dim() - 2)
        dt = mean.dtype
        dy = dy.to(dt)
        xmu = x.to(dt) - mean.view(shape)
        sum_dy = dy.sum(dims)
        sum_dy_xmu = (dy * xmu).sum(dims)

        # local shares, like any parameter's gradient: the optimizer averages them over the ranks
        grad_weight = grad_bias = None
        if weight is not None and ctx.needs_input_grad[1]:
            grad_weight = (sum_dy_xmu * invstd).to(weight.dtype)
        if ctx.bias_dtype is not None and ctx.needs_input_grad[2]:
            grad_bias = sum_dy.to(ctx.bias_dtype)

        grad_input = None
        if ctx.needs_input_grad[0]:
            both = torch.cat([sum_dy, sum_dy_xmu])
            both = hvd.allreduce(both, op=hvd.Sum, name=f"sync_batch_norm.grad.c{channels}",
                                 process_set=ctx.process_set)
            mean_dy = both[:channels] / ctx.total
            mean_dy_xmu = both[channels:] / ctx.total
            scale = invstd if weight is None else invstd * weight.to(dt)
            grad_input = dy - mean_dy.view(shape) - xmu * (invstd * invstd * mean_dy_xmu).view(shape)
            grad_input = (grad_input * scale.view(shape)).to(x.dtype)
        return grad_input, grad_weight, grad_bias, None, None


class SyncBatchNorm(_BatchNorm):
    """Drop-in for torch.nn.BatchNorm1d/2d/3d (any input of shape (N, C, ...)) whose
    training-mode statistics cover the batch of every rank in `process_set` (default: all).

    Every rank of the set must call forward (and backward) the same number of times,
    in the same order: each call is a collective."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 device=None, dtype=None, process_set=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"SyncBatchNorm: expected an input of shape (N, C, ...), got {input.dim()}D")

    def forward(self, input):
        self._check_input_dim(input)
        if input.shape[1] != self.num_features:
            raise ValueError(f"SyncBatchNorm: expected {self.num_features} channels, "
                             f"got an input of shape {tuple(input.shape)}")

        # momentum=None: a cumulative moving average, weighted 1/(number of batches seen)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)

        batch_stats = self.training or self.running_mean is None
        if not (self.training and _world_size(self.process_set) > 1):
            # eval with running stats, eval without them (local batch statistics, as torch does), one rank
            return F.batch_norm(
                input,
                self.running_mean if not self.training or self.track_running_stats else None,
                self.running_var if not self.training or self.track_running_stats else None,
                self.weight, self.bias, batch_stats, factor, self.eps)

        y, mean, var, total = _SyncBatchNormFunction.apply(input, self.weight, self.bias, self.eps, self.process_set)
        if self.track_running_stats:
            with torch.no_grad():
                unbiased = var * (total / (total - 1)) if total > 1 else var
                self.running_mean.mul_(1 - factor).add_(mean.to(self.running_mean.dtype), alpha=factor)
                self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype), alpha=factor)
        return y

    @classmethod
    def convert_sync_batchnorm(cls, module, process_set=None):
        """A copy-free conversion: every BatchNorm*d in `module` becomes a SyncBatchNorm sharing its
        parameters and buffers (returns the new module when `module` itself is a BatchNorm)."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, cls):
            out = cls(module.num_features, module.eps, module.momentum, module.affine,
                      module.track_running_stats, process_set=process_set)
            if module.affine:
                with torch.no_grad():
                    out.weight = module.weight
                    out.bias = module.bias
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
            if hasattr(module, "qconfig"):
                out.qconfig = module.qconfig
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_set))
        del module
        return out
