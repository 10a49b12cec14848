"""A monitored barrier for the horo backend, through the group's store as gloo's is.

torch 2.13's dist.monitored_barrier() accepts only gloo groups before it asks the
backend, so this runs as `group.monitored_barrier(timeout)` on a horo group (see
docs/torch-distributed.md). Group rank 0 waits for every other rank's arrival key and,
past `timeout`, raises naming the ranks that did not arrive; the others wait for its
release key, so a missing rank fails every rank that did arrive.
"""
import datetime
import time


def monitored_barrier(pg, number, timeout, wait_all_ranks):
    if isinstance(timeout, (int, float)):
        timeout = datetime.timedelta(seconds=timeout)
    store, me, size = pg.get_group_store(), pg.getRank(), pg.getSize()
    prefix = f"horo/monitored_barrier/{number}"
    store.set(f"{prefix}/arrived/{me}", "1")
    if me == 0:
        deadline = time.monotonic() + timeout.total_seconds()
        missing = list(range(1, size))
        while missing and time.monotonic() < deadline:
            missing = [r for r in missing if not store.check([f"{prefix}/arrived/{r}"])]
            if missing:
                time.sleep(0.01)
        if missing:
            shown = missing if wait_all_ranks else missing[:1]
            message = (f"horo backend: monitored_barrier: rank(s) {shown} of group {pg.getGroupName()!r} did not "
                       f"arrive within {timeout}")
            store.set(f"{prefix}/release", message)
            raise RuntimeError(message)
        store.set(f"{prefix}/release", "ok")
        return
    store.wait([f"{prefix}/release"], timeout + datetime.timedelta(seconds=5))
    outcome = store.get(f"{prefix}/release").decode()
    if outcome != "ok":
        raise RuntimeError(outcome)
