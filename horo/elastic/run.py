"""`elastic.run`: Horovod's retry loop, for a job that horo-run relaunches.

Horovod resets its ranks in place. horo's ranks are MPI processes, and MPI cannot lose or gain a
process in a running world (without ULFM, which the core does not use), so horo-run is the elastic
driver: when a rank dies or the hosts change, it ends the launch and starts a new one on the hosts
it has, and the new ranks begin from the last commit, which the driver holds in memory. The wrapped
function therefore starts afresh in each launch; inside one, the loop is Horovod's:

    HostsUpdatedInterrupt  (raised by commit() on every rank): the ranks leave together, once the driver
                           holds the state just committed, and horo-run relaunches on the new hosts from it;
    HorovodInternalError   (a peer died or became unreachable): this rank reports it to the driver and
                           waits for the launcher to end the launch; the relaunch restores the last commit.
"""
import functools
import os
import signal
import socket
import sys
import time

from horo import basics
from horo.elastic import driver_link
from horo.errors import HorovodInternalError, HostsUpdatedInterrupt

# How long a rank that saw a peer fail waits for mpirun to end the launch (it kills the survivors as soon
# as it sees the dead rank) before leaving by itself, so the launcher names the dead rank first.
LEAVE_AFTER_PEER_LOSS_SECONDS = 10.0
# The exit status of a rank that left because a peer failed: horo-run does not blame that rank's host.
EXIT_PEER_LOST = 75
# How long rank 0, told to terminate, lets a commit on its way to the driver finish (the launcher that ends
# a launch on a failure follows its SIGTERM with a SIGKILL soon after, which cuts it short anyway).
FINISH_HANDOFF_ON_SIGTERM_SECONDS = 5.0


def run_fn(func, reset=None):
    """Wraps `func(state, *args, **kwargs)`: see the module's docstring. `reset` is accepted for
    Horovod's signature; a relaunch replaces it."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if not driver_link.under_driver():
            # Launched without an elastic horo-run: nothing can replace a lost rank, so run once.
            state.sync()
            return func(state, *args, **kwargs)
        state.resume_from_driver()
        if basics.rank() == 0:
            _finish_handoff_on_sigterm()
        try:
            result = func(state, *args, **kwargs)
        except HostsUpdatedInterrupt:
            # Every rank raised it at the same commit: once the driver holds that commit, rank 0 says the
            # launch stops for the hosts, and every rank leaves cleanly, skipping the program's own code
            # after the training function (it runs in the next launch).
            if basics.rank() == 0:
                driver_link.handoff_done()
                driver_link.link().request("leaving")
            sys.stdout.flush()
            raise SystemExit(0) from None
        except HorovodInternalError as error:
            _leave_after_peer_loss(error)
        driver_link.handoff_done()  # the last commit reaches the driver before the process can end
        return result

    return wrapper


def run(func):
    """Horovod's `@hvd.elastic.run` decorator."""
    return run_fn(func)


def _finish_handoff_on_sigterm():
    """On rank 0: SIGTERM (the launcher ending the launch because another rank failed, or horo-run stopping)
    first lets the commit on its way to the driver arrive, so the relaunch resumes from it, then terminates
    the process as SIGTERM would have. A handler the program installed itself is left in place."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def handler(signum, _frame):
        try:
            driver_link.handoff_done(timeout=FINISH_HANDOFF_ON_SIGTERM_SECONDS)
        except (OSError, ConnectionError):
            pass
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:
        pass  # not the main thread: SIGTERM keeps its default action


def _leave_after_peer_loss(error):
    message = str(error)
    print(f"horo: elastic: rank {basics.rank()} lost a peer; the launch ends and restarts from the last "
          f"commit: {message}", file=sys.stderr, flush=True)
    try:
        # A commit still on its way (rank 0's) is finished first, so the relaunch resumes from it.
        driver_link.handoff_done(timeout=LEAVE_AFTER_PEER_LOSS_SECONDS)
    except (OSError, ConnectionError):
        pass
    try:
        link = driver_link.link()
        link.request("peer_lost", rank=basics.rank(), host=socket.gethostname(), message=message)
    except (OSError, ConnectionError):
        pass  # the launcher's own report of the failure still reaches the driver
    # Not sys.exit: finalizing MPI with a dead peer can block; the driver relaunches either way.
    time.sleep(LEAVE_AFTER_PEER_LOSS_SECONDS)
    os._exit(EXIT_PEER_LOST)
