"""Timeline (HORO_TIMELINE, horo.start_timeline/stop_timeline): a Chrome trace written by rank 0,
one row per tensor name, its phases in order; valid JSON after a clean shutdown."""
import json

import pytest


def _rows(events):
    """tensor name -> its events (metadata excluded), in time order."""
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    rows = {}
    for e in events:
        if e["ph"] != "M":
            rows.setdefault(names[e["pid"]], []).append(e)
    for evs in rows.values():
        # At one start time: a span of 0 us first (it ended there: a blocking call's QUEUE phase
        # takes under a microsecond), then the longer before what it holds.
        evs.sort(key=lambda e: (e["ts"], e.get("dur", 0) > 0, -e.get("dur", 0)))
    return rows


def _is_activity(name):
    return name.startswith(("MEMCPY_", "MPI_", "SHM_", "RING_"))


def _top_level(evs):
    """The phases, without the activities nested inside the collective."""
    return [e["name"] for e in evs if e["ph"] == "X" and not _is_activity(e["name"])]


def _without_wait(evs):
    return [name for name in _top_level(evs) if name != "WAIT_FOR_OTHER_RANKS"]


def _inside(span, evs):
    return [e["name"] for e in evs if _is_activity(e["name"]) and span["ts"] <= e["ts"] and
            e["ts"] + e["dur"] <= span["ts"] + span["dur"]]


@pytest.mark.timeout(120)
def test_timeline_phases_in_order_and_runtime_start_stop(ranks, tmp_path):
    env_file = tmp_path / "timeline.json"
    ranks(2, "ranks_timeline.py", select="records_named", timeout=90,
          env={"HORO_TIMELINE": env_file, "HORO_TEST_TIMELINE_DIR": tmp_path})

    rows = _rows(json.loads(env_file.read_text()))
    assert {"grad.0", "grad.3", "weights.bcast", "rows.gather", "straggler"} <= set(rows)
    assert "late.sum" not in rows and "untraced" not in rows  # recorded in the run-time file instead
    grad = rows["grad.0"]
    # three steps: queued, negotiated, then the fused collective, each time
    assert _without_wait(grad) == ["QUEUE", "NEGOTIATE_ALLREDUCE", "ALLREDUCE"] * 3, _top_level(grad)
    for evs in rows.values():  # each collective holds its algorithm, and the fusion buffer copies when fused
        for span in (e for e in evs if e["name"] in ("ALLREDUCE", "BROADCAST", "ALLGATHER")):
            inside = _inside(span, evs)
            assert len([a for a in inside if a.startswith(("MPI_", "SHM_", "RING_"))]) == 1, inside
            if span["args"]["tensors"] > 1:
                assert {"MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER"} <= set(inside), inside
    # Submitted right after the previous result: on shared memory the first rank's cycle pulls an idle
    # peer in at once, so a few microseconds of skew between the ranks may show as a wait phase.
    assert _without_wait(rows["weights.bcast"]) == ["QUEUE", "NEGOTIATE_BROADCAST", "BROADCAST"]
    assert {"MPI_BCAST", "SHM_BCAST"} & {e["name"] for e in rows["weights.bcast"]}  # one host: shared memory
    assert _without_wait(rows["rows.gather"]) == ["QUEUE", "NEGOTIATE_ALLGATHER", "ALLGATHER"]
    assert _top_level(rows["straggler"]) == ["QUEUE", "NEGOTIATE_ALLREDUCE", "WAIT_FOR_OTHER_RANKS", "ALLREDUCE"]
    wait = next(e for e in rows["straggler"] if e["name"] == "WAIT_FOR_OTHER_RANKS")
    assert wait["dur"] > 100_000  # rank 1 slept 0.3 s (microseconds)

    runtime = tmp_path / "runtime.rank0.json"
    assert not (tmp_path / "runtime.rank1.json").exists()  # rank 0 writes, as Horovod's coordinator
    events = json.loads(runtime.read_text())
    rows = _rows(events)
    assert set(rows) == {"late.sum", "(engine cycles)"}, set(rows)
    assert _without_wait(rows["late.sum"]) == ["QUEUE", "NEGOTIATE_ALLREDUCE", "ALLREDUCE"]
    assert all(e["name"] == "CYCLE_START" and e["ph"] == "i" for e in rows["(engine cycles)"])


@pytest.mark.timeout(120)
def test_timeline_off_writes_no_file(ranks, tmp_path):
    ranks(2, "ranks_timeline.py", select="off_writes_nothing", timeout=90, env={"HORO_TEST_TIMELINE_DIR": tmp_path})
    assert list(tmp_path.iterdir()) == []
