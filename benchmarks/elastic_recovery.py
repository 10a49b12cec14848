"""Recovery time of an elastic job, horo against torchrun, on the namespaced cluster (scripts/cluster.sh)
or on this machine alone.

    python benchmarks/elastic_recovery.py [--runs 1] [--last-call 30]
    python benchmarks/elastic_recovery.py --single-host [--runs 3] [--last-call 1]

The same training (an MLP of 5M parameters, batch 32 per rank, SGD with momentum, 6 ranks as
3 hosts x 2) runs under
  horo:     horo-run -np 6 --min-np 2 --max-np 6 --host-discovery-script ..., TorchState committed
            every 10 steps (held in memory by horo-run);
  torchrun: torchrun --nnodes=2:3 --nproc-per-node=2 --max-restarts=10 --rdzv-backend=c10d on each
            host, DDP over gloo, a checkpoint written every 10 steps to a file the restarted workers
            load (torchrun's way; this machine's disk is every host's).
Once step 30 is reached, every process of the job on h3 is SIGKILLed (for torchrun its agent too:
the host is gone). Recovery time: from the kill to the first step completed after it (wall clocks
of one machine). torchrun's rendezvous waits `last_call_timeout` for more nodes once it has the
minimum (30 s by default); --last-call sets it. torchrun is given its fastest settings here: a dead
agent leaves the rendezvous after 3 missed heartbeats of --keep-alive s (torch's default 5 s), and
gloo connects lazily (TORCH_GLOO_LAZY_INIT=1; with gloo's eager full-mesh connect, restarted workers
that start seconds apart refuse each other until the restarts run out). Needs root (namespaces);
run it alone.

--single-host: no namespaces; 2 "hosts" x 2 ranks on this machine (horo: localhost and 127.0.0.1,
which Open MPI both runs here; torchrun: two agents, --nnodes=1:2, rendezvous on 127.0.0.1), and
the second host's processes are SIGKILLed.
"""
import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CLUSTER = REPO_ROOT / "scripts" / "cluster.sh"
NAME = "horoeb"
STEP = re.compile(r"^step (\d+) t=([\d.]+) size=(\d+)")
WORKER = re.compile(r"worker pid (\d+) on (\S+)")
# gloo connects a pair when it is first used, not every pair in init_process_group: restarted workers
# that start seconds apart (each agent restarts its own) then do not give up connecting to each other
# (gloo's eager connect retries a refused connection three times).
TORCHRUN_ENV = {"TORCH_GLOO_LAZY_INIT": "1"}


def worker(mode, checkpoint):
    import torch

    if mode == "horo":
        import horo.torch as hvd

        hvd.init()
        rank, size = hvd.rank(), hvd.size()
    else:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, size = dist.get_rank(), dist.get_world_size()
    # The host a process stands for: the agent's (torchrun), or the one its rank fills (horo-run fills each
    # host's 2 slots in order); with namespaces, the machine's name.
    node = os.environ.get("HORO_BENCH_NODE") or (f"h{rank // 2 + 1}" if os.environ.get("HORO_BENCH_SINGLE_HOST")
                                                 else socket.gethostname())
    print(f"worker pid {os.getpid()} on {node}", flush=True)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3072, 1536), torch.nn.ReLU(), torch.nn.Linear(1536, 10))
    x, y = torch.randn(32, 3072), torch.randint(0, 10, (32,))
    if mode == "horo":
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                             named_parameters=model.named_parameters())
        state = hvd.elastic.TorchState(model, optimizer, step=0)

        @hvd.elastic.run
        def train(state):
            while state.step < 10_000:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
                state.step += 1
                if hvd.rank() == 0:
                    print(f"step {state.step} t={time.time():.3f} size={hvd.size()}", flush=True)
                if state.step % 10 == 0:
                    state.commit()

        train(state)
        return
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    step = 0
    if os.path.exists(checkpoint):
        saved = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        step = saved["step"]
    while step < 10_000:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        optimizer.step()
        step += 1
        if rank == 0:
            print(f"step {step} t={time.time():.3f} size={size}", flush=True)
            if step % 10 == 0:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
                           checkpoint + ".tmp")
                os.replace(checkpoint + ".tmp", checkpoint)


def cluster(*args):
    return subprocess.run(["bash", str(CLUSTER), *args, "--name", NAME], capture_output=True, text=True,
                          timeout=120, check=True).stdout


class Watched:
    """Processes whose merged output is appended to one log, read back as it grows."""

    def __init__(self, log):
        self.log = log
        self.procs = []

    def start(self, cmd, env):
        out = open(self.log, "ab")
        self.procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))

    def text(self):
        return self.log.read_bytes().decode("utf-8", "replace")

    def wait_for(self, predicate, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = predicate(self.text())
            if found:
                return found
            time.sleep(0.1)
        raise TimeoutError(f"{self.log}: gave up after {timeout} s:\n{self.text()[-3000:]}")

    def stop(self):
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def steps_after(text, t, below_size=None):
    """(step, time, size) of the steps completed after time `t` (by fewer than `below_size` ranks)."""
    return [(int(m.group(1)), float(m.group(2)), int(m.group(3)))
            for m in map(STEP.match, text.splitlines())
            if m and float(m.group(2)) > t and (below_size is None or int(m.group(3)) < below_size)]


def measure(mode, env, workdir, last_call, max_restarts, single_host, keep_alive_s):
    log = workdir / f"{mode}.log"
    log.write_bytes(b"")
    checkpoint = str(workdir / "torchrun.ckpt")
    # A dead agent leaves the rendezvous once it misses 3 heartbeats (torch's default: every 5 s); until
    # then the survivors' re-rendezvous counts it and their workers fail connecting to its ports.
    keep_alive = f"keep_alive_interval={keep_alive_s},keep_alive_max_attempt=3"
    if os.path.exists(checkpoint):
        os.remove(checkpoint)
    job = Watched(log)
    me = [sys.executable, str(Path(__file__).resolve())]
    agents = []
    victim_host = "h2" if single_host else "h3"
    if mode == "horo":
        hosts = workdir / "hosts.txt"
        hosts.write_text("localhost:2\n127.0.0.1:2\n" if single_host else "h1:2\nh2:2\nh3:2\n")
        n = "4" if single_host else "6"
        job.start([str(Path(sys.executable).parent / "horo-run"), "-np", n, "--min-np", "2", "--max-np", n,
                   "--host-discovery-script", f"cat {hosts}", *me, "--worker", "horo", checkpoint],
                  {**env, "HORO_BENCH_SINGLE_HOST": "1"} if single_host else env)
    elif single_host:
        for host in ("h1", "h2"):
            job.start([str(Path(sys.executable).parent / "torchrun"),
                       "--nnodes=1:2", "--nproc-per-node=2", f"--max-restarts={max_restarts}", "--rdzv-backend=c10d",
                       "--rdzv-endpoint=127.0.0.1:29400", "--rdzv-id=horo-bench", "--monitor-interval=0.5",
                       f"--rdzv-conf=last_call_timeout={last_call},{keep_alive},is_host={str(host == 'h1').lower()}",
                       str(Path(__file__).resolve()), "--worker", "torchrun", checkpoint],
                      {**env, **TORCHRUN_ENV, "HORO_BENCH_NODE": host, "GLOO_SOCKET_IFNAME": "lo"})
            agents.append(job.procs[-1].pid)
    else:
        h1 = env["OMPI_MCA_oob_tcp_if_include"].split("/")[0].rsplit(".", 1)[0] + ".1"
        for host in ("h1", "h2", "h3"):
            job.start(["bash", str(CLUSTER), "exec", host, str(Path(sys.executable).parent / "torchrun"),
                       "--nnodes=2:3", "--nproc-per-node=2", f"--max-restarts={max_restarts}", "--rdzv-backend=c10d",
                       f"--rdzv-endpoint={h1}:29400", "--rdzv-id=horo-bench", "--monitor-interval=0.5",
                       f"--rdzv-conf=last_call_timeout={last_call},{keep_alive},is_host={str(host == 'h1').lower()}",
                       str(Path(__file__).resolve()), "--worker", "torchrun", checkpoint,
                       "--name", NAME], {**env, **TORCHRUN_ENV, "GLOO_SOCKET_IFNAME": "eth0"})
            agents.append(job.procs[-1].pid)
    try:
        job.wait_for(lambda text: any(s >= 30 for s, _, _ in steps_after(text, 0)), timeout=600)
        victims = [int(p) for p, host in WORKER.findall(job.text()) if host == victim_host]
        if mode == "torchrun":
            victims.append(agents[-1])  # the host is gone: its agent too (nsenter execs torchrun: same pid)
        killed = time.time()
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # The first step of the job that goes on without the host: the whole job may still finish a
        # step or two after the kill, before the survivors notice it.
        full = max(size for _, _, size in steps_after(job.text(), 0))
        after = job.wait_for(lambda text: steps_after(text, killed, below_size=full), timeout=600)
        step, at, size = after[0]
        return at - killed, step, size
    finally:
        job.stop()


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--last-call", type=int, default=30, help="torchrun's rendezvous last_call_timeout, s")
    p.add_argument("--max-restarts", type=int, default=10, help="torchrun's --max-restarts")
    p.add_argument("--keep-alive", type=int, default=1,
                   help="torchrun's rendezvous keep_alive_interval, s (3 missed: a node is gone; torch's default 5)")
    p.add_argument("--modes", default="horo,torchrun")
    p.add_argument("--workdir", default="/tmp/horo-elastic-recovery")
    p.add_argument("--single-host", action="store_true", help="2 hosts x 2 ranks on this machine, no namespaces")
    args = p.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if args.single_host:
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PYTHONUNBUFFERED="1",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
        compare(args, env, workdir)
        return
    up = cluster("up", "3", "--rate", "1gbit")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PYTHONUNBUFFERED="1",
               PYTHONPATH=str(REPO_ROOT))
    for line in up.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    # torchrun's agents and workers find each other by host name: give the hosts (only theirs: each has
    # a mount namespace of its own) an /etc/hosts that names h1..h3.
    names = workdir / "etc_hosts"
    net = env["OMPI_MCA_oob_tcp_if_include"].split("/")[0].rsplit(".", 1)[0]
    names.write_text(Path("/etc/hosts").read_text() + "".join(f"{net}.{i} h{i}\n" for i in (1, 2, 3)))
    for host in ("h1", "h2", "h3"):
        cluster("exec", host, "mount", "--bind", str(names), "/etc/hosts")
    try:
        compare(args, env, workdir)
    finally:
        cluster("down")


def compare(args, env, workdir):
    results = {"horo": [], "torchrun": []}
    for _ in range(args.runs):
        for mode in args.modes.split(","):
            seconds, step, size = measure(mode, env, workdir, args.last_call, args.max_restarts, args.single_host,
                                          args.keep_alive)
            results[mode].append(seconds)
            print(f"{mode:8s}: {seconds:6.1f} s from the kill on {'h2' if args.single_host else 'h3'} to step {step} "
                  f"on {size} ranks (load {os.getloadavg()[0]:.1f})", flush=True)
    if not (results["horo"] and results["torchrun"]):
        return
    h, t = statistics.median(results["horo"]), statistics.median(results["torchrun"])
    print(f"median of {args.runs}: horo {h:.1f} s, torchrun (last_call_timeout {args.last_call:g} s) {t:.1f} s, "
          f"horo/torchrun {h / t:.2f}")


if __name__ == "__main__":
    main()
