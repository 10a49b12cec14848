"""The shared-memory transport (HORO_TRANSPORT=shm) across real MPI ranks: every
collective against NumPy with a 4 KiB chunk (so most cases take several rounds), two
jobs on the host at once, a rank killed while the others wait in shared memory (the
job ends, nothing is left in /dev/shm), and a bad HORO_TRANSPORT value. The full
collective suites also run on it: it is the default (auto) on one host, and
test_allreduce.py / test_collectives.py add HORO_TRANSPORT=mpi variants to compare.
"""
import os
import re
import shutil
import subprocess
import sys
import threading

import pytest
from launcher import REPO_ROOT, batched_launcher, horo_segments, mpi_env, mpirun_command, segments_left_behind

SHM = {"HORO_TRANSPORT": "shm", "HORO_SHM_CHUNK_BYTES": "4096"}
LAUNCH_TIMEOUT = 150


@pytest.fixture(scope="module")
def launch(request):
    """The two matrices below at one np run one after another in one MPI job (launcher.run_variants):
    `shm` is the first one's environment, the others are the second one's ids."""
    cases = {"shm": ("ranks_shm.py", SHM)}
    cases.update({name: ("ranks_shm.py", dict(SHM, **tunables)) for name, (_, tunables) in zip(HOW_IDS, HOW)})

    def launches_of(item):
        if item.originalname == "test_every_collective_on_shared_memory_matches_numpy":
            return [(item.callspec.params["np_"], "shm")]
        if item.originalname == "test_every_collective_matches_numpy_however_the_bytes_move":
            return [(item.callspec.params["np_"], item.callspec.id)]
        return []

    return batched_launcher(request, cases, launches_of, LAUNCH_TIMEOUT, select="not exits and not differ_between_ranks")


# The first test at an np runs every selected case of both matrices at that np: at most 8 (np=3).
@pytest.mark.timeout(8 * LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_", [1, 2, 3, 4])
def test_every_collective_on_shared_memory_matches_numpy(launch, np_):
    launch(np_, "shm")


HOW = [
    # With no heap (every output is private), from 1 byte up every broadcast/allgather/alltoall/
    # gather/scatter reads the senders' buffers directly (process_vm_readv) where the kernel
    # allows it, and every allreduce/reduce above one step reads its peers' inputs and writes
    # their outputs (process_vm_writev)...
    (2, {"HORO_SHM_SINGLE_COPY_BYTES": "1", "HORO_SHM_EXCHANGE_SINGLE_COPY_BYTES": "1",
         "HORO_SHM_REDUCE_SINGLE_COPY_BYTES": "1", "HORO_SHM_HEAP_BYTES": "0"}),
    (3, {"HORO_SHM_SINGLE_COPY_BYTES": "1", "HORO_SHM_EXCHANGE_SINGLE_COPY_BYTES": "1",
         "HORO_SHM_REDUCE_SINGLE_COPY_BYTES": "1", "HORO_SHM_HEAP_BYTES": "0"}),
    # ... from 4 KiB, one alltoall mixes pairs read directly with pairs through the segment;
    (3, {"HORO_SHM_SINGLE_COPY_BYTES": "4096", "HORO_SHM_EXCHANGE_SINGLE_COPY_BYTES": "4096",
         "HORO_SHM_REDUCE_SINGLE_COPY_BYTES": "4096", "HORO_SHM_HEAP_BYTES": "0"}),
    # all through the segment, copied in with non-temporal stores (odd heads and tails);
    (3, {"HORO_SHM_SINGLE_COPY_BYTES": "0", "HORO_SHM_EXCHANGE_SINGLE_COPY_BYTES": "0",
         "HORO_SHM_REDUCE_SINGLE_COPY_BYTES": "0", "HORO_SHM_STREAM_BYTES": "1", "HORO_SHM_HEAP_BYTES": "0"}),
    # everything through the segment with plain copies;
    (2, {"HORO_SHM_SINGLE_COPY_BYTES": "0", "HORO_SHM_EXCHANGE_SINGLE_COPY_BYTES": "0",
         "HORO_SHM_REDUCE_SINGLE_COPY_BYTES": "0", "HORO_SHM_STREAM_BYTES": "0", "HORO_SHM_HEAP_BYTES": "0"}),
    # a heap too small for the larger outputs: exchanges into it push, the others fall back;
    (3, {"HORO_SHM_HEAP_BYTES": "65536"}),
    # allreduces into new arrays push at every size (auto: from 1 MiB where ranks outnumber cores);
    (3, {"HORO_SHM_ALLREDUCE_PUSH_BYTES": "1"}),
    # the same pushes with non-temporal stores (auto: where 8 or more cores push megabytes at once);
    (3, {"HORO_SHM_ALLREDUCE_PUSH_BYTES": "1", "HORO_SHM_STREAM_BYTES": "1"}),
    # no inputs carried with the control step (cached collectives take their own steps).
    (3, {"HORO_SHM_PRELOAD_BYTES": "0"}),
]
HOW_IDS = ["direct-np2", "direct-np3", "mixed-np3", "streamed-np3", "plain-np2", "small-heap-np3", "push-np3",
           "streamed-push-np3", "unpreloaded-np3"]


@pytest.mark.timeout(8 * LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_,tunables", HOW, ids=HOW_IDS)
def test_every_collective_matches_numpy_however_the_bytes_move(launch, np_, tunables, request):
    launch(np_, request.node.callspec.id)


@pytest.mark.timeout(LAUNCH_TIMEOUT + 30)
def test_shared_memory_settings_that_differ_between_ranks_follow_rank_0(ranks):
    ranks(3, "ranks_shm.py", env={"HORO_TRANSPORT": "shm"}, timeout=LAUNCH_TIMEOUT, select="differ_between_ranks")


@pytest.mark.timeout(LAUNCH_TIMEOUT + 30)
def test_two_jobs_on_one_host_do_not_interfere(ranks):
    outcomes = []

    def job(i):
        try:
            ranks(2, "ranks_shm.py", env=SHM, timeout=LAUNCH_TIMEOUT, select="segment or in_place or data_movement")
            outcomes.append(None)
        except BaseException as e:  # noqa: BLE001 - reported below
            outcomes.append(f"job {i}: {e}")

    threads = [threading.Thread(target=job, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes == [None, None], "\n".join(o for o in outcomes if o)


@pytest.mark.timeout(LAUNCH_TIMEOUT + 60)
@pytest.mark.parametrize("np_", [1, 2])
def test_a_small_collective_allocates_nothing(ranks, tmp_path, np_):
    # Every malloc of the rank (any thread) is counted by a preloaded counter.
    if "libasan" in os.environ.get("LD_PRELOAD", ""):  # scripts/sanitize_suite.sh
        pytest.skip("AddressSanitizer replaces malloc and must come first in LD_PRELOAD: no room for the counter")
    counter = tmp_path / "malloc_counter.so"
    compiler = shutil.which("cc") or shutil.which("gcc")  # the core's build needs one too
    assert compiler, "no C compiler (cc or gcc) on PATH"
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(counter), str(REPO_ROOT / "tests" / "malloc_counter.c"),
                    "-ldl"], check=True)
    ranks(np_, "ranks_shm.py", env={"LD_PRELOAD": str(counter)}, timeout=LAUNCH_TIMEOUT,
          select="allocates_nothing")


@pytest.mark.timeout(90)
def test_a_rank_killed_mid_collective_ends_the_job_and_leaves_no_segment(ranks):
    before = horo_segments()
    rc, output = ranks(3, "ranks_shm.py", env=dict(SHM, HORO_TEST_KILL_RANK="1"), timeout=60, select="exits",
                       check=False)
    assert rc is not None, f"the job hung after a rank was killed:\n{output[-4000:]}"
    assert rc != 0, f"the job succeeded although rank 1 was killed:\n{output[-4000:]}"
    assert not segments_left_behind(before), "a killed job left its segment in /dev/shm"


@pytest.mark.timeout(2 * LAUNCH_TIMEOUT)
def test_the_ranks_time_both_kinds_of_store_at_start_and_keep_the_faster():
    def start(stream):
        job = mpirun_command(2, [sys.executable, "-c", "import horo; horo.init(); horo.shutdown()"])
        env = {"HORO_TRANSPORT": "shm", "HORO_LOG_LEVEL": "info", "HORO_SHM_STREAM_BYTES": stream}
        done = subprocess.run(job, cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=LAUNCH_TIMEOUT,
                              env=mpi_env(env))
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    output = start("auto")
    found = re.findall(r"rank (\d+)\] shared-memory stores: .* took ([\d.e+]+) us plain, ([\d.e+]+) us streamed: (.*)",
                       output)
    assert len(found) == 1 and found[0][0] == "0", f"rank 0 (only) should report the probe:\n{output}"
    plain, streamed, choice = float(found[0][1]), float(found[0][2]), found[0][3].strip()
    assert 0 < plain < 1e6 and 0 < streamed < 1e6, found
    assert choice == ("streaming from 16384 bytes" if plain > streamed else "plain copies"), found
    # A value set by hand is taken as it is: no probe.
    assert "shared-memory stores" not in start("0")


def test_an_unknown_transport_is_refused_at_init():
    code = "import horo\ntry:\n    horo.init()\nexcept horo.HoroError as e:\n    print('refused:', e)\n"
    out = subprocess.run([sys.executable, "-c", code], cwd=str(REPO_ROOT), capture_output=True, text=True,
                         timeout=120, env=mpi_env({"HORO_TRANSPORT": "carrier-pigeon"})).stdout
    assert "refused:" in out and "HORO_TRANSPORT='carrier-pigeon'" in out, out
