"""`horo-run -np N [-H ...] --check-build`: where each rank landed, as horo sees it.

Run on every rank by the launcher: horo's topology comes from MPI alone (a shared-memory
split of the world for the hosts, one cross communicator per local rank), so this shows
what mpirun, srun or a hostfile actually did. Rank 0 prints one line per rank.
"""
import socket

import horo


def main():
    horo.init()
    from horo import _core

    mine = (horo.rank(), socket.gethostname(), horo.local_rank(), horo.local_size(), horo.cross_rank(),
            horo.cross_size())
    everyone = horo.allgather_object(mine, name="horo.run.topology")
    if horo.rank() == 0:
        print(f"\nTopology ({horo.size()} ranks on {horo.cross_size()} host(s), transport {_core.transport()}):")
        print("    rank  host                 local_rank/size  cross_rank/size")
        for rank, host, lr, ls, cr, cs in sorted(everyone):
            print(f"    {rank:>4}  {host:<20} {lr:>5}/{ls:<10} {cr:>5}/{cs}")
    horo.shutdown()


if __name__ == "__main__":
    main()
