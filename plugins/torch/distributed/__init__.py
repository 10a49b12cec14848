"""horo as a torch.distributed backend named "horo" (registered by `import horo.torch`).

    import horo.torch                      # registers the backend
    import torch.distributed as dist
    dist.init_process_group("horo")        # under mpirun / horo-run: nothing else to set
    model = torch.nn.parallel.DistributedDataParallel(model)

The process group is Python over horo's core (launch.py: rendezvous and store;
process_group.py: the operations; work.py: Work and futures; groups.py: subgroups as
horo process sets; p2p.py: point-to-point); nothing is compiled against torch.
"""
import torch.distributed as dist

from horo.torch.distributed import groups, launch, p2p
from horo.torch.distributed.process_group import BACKEND_NAME, ProcessGroupHoro
from horo.torch.distributed.work import HoroWork


def _create(opts, _backend_options):
    """torch's creator (extended API): called on every member of a new "horo" group."""
    ranks = list(opts.global_ranks_in_group)
    if not ranks:  # the default group
        launch.check_world(opts.group_rank, opts.group_size)
        ranks = list(range(opts.group_size))
    process_set = groups.process_set_for(opts.group_id, list(opts.global_ranks_in_group))
    return ProcessGroupHoro(opts.store, opts.group_rank, opts.group_size, ranks, process_set, opts.timeout,
                            opts.group_id)


def register():
    if not dist.is_available():
        return
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=["cpu", "cuda"])
    launch.install_rendezvous()
    groups.install()
    p2p.install_batch()


__all__ = ["ProcessGroupHoro", "HoroWork", "register"]

register()
