"""Open MPI's `ofi` transport, left out of jobs on one host.

Open MPI 5 (PyPI's wheel included) probes libfabric for its `ofi` network transport in every
rank's MPI_Init; where no fabric answers, that takes about a second per launch. Ranks of one host
talk through shared memory and never use it, so for a job whose ranks all run on this host
horo-run excludes it, unless the environment already chooses Open MPI's transports
(OMPI_MCA_btl; `--mpi-args "--mca btl ..."` wins over the environment anyway).
"""
import socket

LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}


def on_this_host_only(spec):
    """Whether every rank of the LaunchSpec runs on this host."""
    if spec.hostfile is not None:
        named = spec.hostfile.hosts
    else:
        named = spec.hosts or []
    here = LOCAL_NAMES | {socket.gethostname()}  # not getfqdn(): a DNS lookup on every launch
    return all(h.name in here for h in named)


def launch_env(spec):
    """Environment additions for an Open MPI launch of `spec` (not set already)."""
    if "OMPI_MCA_btl" in spec.env or not on_this_host_only(spec):
        return {}
    return {"OMPI_MCA_btl": "^ofi"}
