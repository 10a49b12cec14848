"""How a job across hosts ends when a host drops off the network.

Every rank's core gives up on unreachable peers after HORO_PEER_TIMEOUT_SECONDS
(csrc/transport/peer_watch.h) and names them. Ending the job is then the launcher's
part: Open MPI's launcher waits for every host's daemon while it aborts a job, and
for a host off the network TCP retries for many minutes. It notices a lost daemon
sooner only through TCP keepalive on its connection to that daemon (300 s idle,
then 9 probes 20 s apart, by default). horo-run tunes that keepalive to the
timeout: the launcher notices the host 1.5 to 2.5 timeouts after it went (after
the ranks have reported it at one timeout, and before they call MPI_Abort at
three: peer_watch.cc), ends the job and names the host, and horo-run exits non-zero.
"""
import math

DEFAULT_PEER_TIMEOUT_SECONDS = 60.0  # the core's default (its tunables table)
PROBES = 3


def peer_timeout(env, tunable_env):
    text = tunable_env.get("HORO_PEER_TIMEOUT_SECONDS", env.get("HORO_PEER_TIMEOUT_SECONDS", ""))
    try:
        return float(text) if text.strip() else DEFAULT_PEER_TIMEOUT_SECONDS
    except ValueError:
        return DEFAULT_PEER_TIMEOUT_SECONDS


def keepalive_env(env, tunable_env):
    """Open MPI launcher settings (5.x PRTE_MCA_*, 4.x OMPI_MCA_*) that are not set already."""
    timeout = peer_timeout(env, tunable_env)
    if timeout <= 0:
        return {}
    # idle T, then PROBES probes T/2 apart: noticed between 1.5 T and 2.5 T after the host went
    values = {"keepalive_time": math.ceil(timeout), "keepalive_intvl": max(1, math.ceil(timeout / 2)),
              "keepalive_probes": PROBES}
    out = {}
    for prefix in ("PRTE_MCA_oob_tcp_", "OMPI_MCA_oob_tcp_"):
        for key, value in values.items():
            if prefix + key not in env:
                out[prefix + key] = str(value)
    return out
