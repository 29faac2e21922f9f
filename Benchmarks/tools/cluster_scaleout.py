#!/usr/bin/env python3
"""The measurement behind Benchmarks/cluster-scaleout.sh (run that; it builds herald first).

Four cases, their order rotated when --runs > 1:
  single    one queue on one redis-server (no replica), W workers
  sharded   the S shards on that one redis-server: what sharding alone costs, without a cluster
  cluster   S shards (--queue Q --shards S) on a local Redis Cluster of 3 masters + 3 replicas
            (cluster-node-timeout 5000, no persistence), W workers each reading every shard
  cluster0  the same shards on 3 masters without replicas: the replication's share of the cost
The shards' base name decides their slots: the default `alerts` puts alerts-0 … alerts-5 two on
each master of a 3-master cluster made by redis-cli (CRC16 of the name; check with
`redis-cli CLUSTER KEYSLOT '{alerts-0}'`). The busiest master's share is printed to show it.

For each: enqueue N notifications (256-byte payloads, 10,000 distinct tokens) with `herald
enqueue`, then start the workers and wait until the emulator has accepted all N. CPU of every
redis-server (utime + stime from /proc/PID/stat) and of the workers is read before and after the
drain. Prints Markdown on stdout, progress on stderr.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

from benchkit import cpu_seconds, free_port, log


def wait_until(what, condition, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    raise SystemExit(f"timed out after {timeout} s waiting until {what}")


def redis_cli(port, *args):
    out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args], capture_output=True, text=True)
    return out.stdout.strip()


class Bench:
    def __init__(self, args):
        self.args = args
        self.herald = os.path.abspath(args.herald)
        self.dir = tempfile.mkdtemp(prefix="herald-scaleout-")
        self.children = []
        self.payload = '{"aps":{"alert":"' + "x" * (256 - len('{"aps":{"alert":""}}')) + '"}}'
        assert len(self.payload) == 256

    def spawn(self, arguments, log_name, stdout=None):
        logf = open(os.path.join(self.dir, log_name), "w")
        process = subprocess.Popen(arguments, stdout=stdout or logf, stderr=logf, stdin=subprocess.DEVNULL, text=True)
        self.children.append(process)
        return process

    def stop(self, process, sig=signal.SIGKILL):
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def close(self):
        for process in self.children:
            self.stop(process)
        if not self.args.keep:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            log(f"files kept in {self.dir}")

    # --- the emulator -------------------------------------------------------------------------

    def start_emulator(self):
        self.cert = os.path.join(self.dir, "emulator.pem")
        self.key = os.path.join(self.dir, "provider.p8")
        process = self.spawn([self.herald, "mock-apns", "--port", "0", "--stats-port", "0", "--cert-out", self.cert,
                              "--write-key", self.key, "--team-id", "TEAM000001", "--key-id", "KEY0000001",
                              "--max-streams", "1000", "--log-level", "warning"], "mock-apns.log", stdout=subprocess.PIPE)
        self.apns_port = self.stats_port = None
        while self.apns_port is None or self.stats_port is None:
            line = process.stdout.readline()
            if not line:
                raise SystemExit("the emulator did not start; see mock-apns.log")
            if line.startswith("listening on "):
                self.apns_port = int(line.rsplit(":", 1)[1])
            if line.startswith("stats on "):
                self.stats_port = int(line.rsplit(":", 1)[1])
        self.emulator = process

    def accepted(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.stats_port}/_herald/stats", timeout=5) as response:
            return json.load(response)["accepted"]

    # --- Redis ---------------------------------------------------------------------------------

    def start_redis(self, name, cluster=False):
        port = free_port(cluster)
        directory = os.path.join(self.dir, name)
        os.makedirs(directory)
        arguments = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", directory, "--save", "",
                     "--appendonly", "no", "--protected-mode", "no", "--logfile", os.path.join(directory, "redis.log")]
        if cluster:
            arguments += ["--cluster-enabled", "yes", "--cluster-config-file", os.path.join(directory, "nodes.conf"),
                          "--cluster-node-timeout", "5000"]
        process = self.spawn(arguments, f"{name}.out")
        wait_until(f"{name} answers PING", lambda: redis_cli(port, "PING") == "PONG", 10)
        return port, process

    def start_cluster(self, replicas):
        self.clusters = getattr(self, "clusters", 0) + 1
        nodes = [self.start_redis(f"cluster{self.clusters}-node-{index}", cluster=True) for index in range(3 * (1 + replicas))]
        out = subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{port}" for port, _ in nodes],
                              "--cluster-replicas", str(replicas), "--cluster-yes"], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit("redis-cli --cluster create failed:\n" + out.stdout + out.stderr)

        def healthy():
            for port, _ in nodes:
                if "cluster_state:ok" not in redis_cli(port, "CLUSTER", "INFO"):
                    return False
                replication = redis_cli(port, "INFO", "replication")
                if "role:slave" in replication and "master_link_status:up" not in replication:
                    return False
            return True
        wait_until("the cluster is ok and every replica in sync", healthy, 60, 0.2)
        masters = [(port, process) for port, process in nodes if "role:master" in redis_cli(port, "INFO", "replication")]
        replicas = [(port, process) for port, process in nodes if (port, process) not in masters]
        return nodes, masters, replicas

    # --- one case ------------------------------------------------------------------------------

    def run_case(self, case):
        a = self.args
        if case in ("single", "sharded"):
            self.singles = getattr(self, "singles", 0) + 1
            port, process = self.start_redis(f"single{self.singles}")
            redis_processes = {"master": [(port, process)], "replica": []}
            url = f"redis://127.0.0.1:{port}"
            queue_flags = ["--queue", a.queue] if case == "single" else ["--queue", a.queue, "--shards", str(a.shards)]
            cleanup = [process]
        else:
            nodes, masters, replicas = self.start_cluster(1 if case == "cluster" else 0)
            redis_processes = {"master": masters, "replica": replicas}
            url = "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port, _ in nodes) + "/"
            queue_flags = ["--queue", a.queue, "--shards", str(a.shards)]
            cleanup = [process for _, process in nodes]
        every = redis_processes["master"] + redis_processes["replica"]

        before_enqueue = {port: cpu_seconds(process.pid) for port, process in every}
        log(f"  {case}: enqueueing {a.n:,} notifications …")
        out = subprocess.run([self.herald, "enqueue", "--redis", url, *queue_flags, "--count", str(a.n),
                              "--distinct-tokens", "10000", "--token", "ab" * 32, "--payload", self.payload,
                              "--topic", "com.example.bench", "--lane", "bulk"], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"herald enqueue failed: {out.stderr}")
        after_enqueue = {port: cpu_seconds(process.pid) for port, process in every}
        # Which master holds how many jobs (each shard's stream lives on one master; the jobs
        # went to the bulk stream, and the check below stops the run if they did not).
        names = [a.queue] if case == "single" else [f"{a.queue}-{index}" for index in range(a.shards)]
        per_master = {}
        for port, _ in redis_processes["master"]:
            held = 0
            for name in names:
                answer = redis_cli(port, "XLEN", f"herald:{{{name}}}:jobs")
                if answer.isdigit():
                    held += int(answer)
            per_master[port] = held
        if sum(per_master.values()) != a.n:
            raise SystemExit(f"{case}: the masters hold {sum(per_master.values()):,} jobs after the enqueue, not {a.n:,}")

        accepted_before = self.accepted()
        workers = []
        start = time.monotonic()
        for index in range(a.workers):
            workers.append(self.spawn([self.herald, "worker", "--redis", url, *queue_flags, "--apns-host", "127.0.0.1",
                                       "--apns-port", str(self.apns_port), "--ca-file", self.cert, "--team-id", "TEAM000001",
                                       "--key-id", "KEY0000001", "--key-file", self.key, "--bundle-id", "com.example.bench",
                                       "--no-metrics", "--consumer", f"bench-{case}-{index}", "--log-level", "warning"],
                                      f"worker-{case}-{index}.log"))
        last_cpu = {}

        def drained():
            for worker in workers:
                if worker.poll() is None:
                    last_cpu[worker.pid] = cpu_seconds(worker.pid)
                else:
                    raise SystemExit(f"a worker exited ({worker.returncode}); see its log in {self.dir}")
            return self.accepted() - accepted_before >= a.n
        wait_until(f"{case}: the workers deliver {a.n:,} notifications", drained, 1800, 0.1)
        elapsed = time.monotonic() - start
        after_drain = {port: cpu_seconds(process.pid) for port, process in every}
        worker_cpu = sum(last_cpu.values())
        for worker in workers:
            self.stop(worker, signal.SIGTERM)
        for process in cleanup:
            self.stop(process)

        def drain_cpu(role):
            return sum(after_drain[port] - after_enqueue[port] for port, _ in redis_processes[role])

        def enqueue_cpu(role):
            return sum(after_enqueue[port] - before_enqueue[port] for port, _ in redis_processes[role])
        busiest = max(per_master, key=lambda port: per_master[port])
        return {
            "case": case, "n": a.n, "seconds": elapsed, "rate": a.n / elapsed,
            "drain_master_us": drain_cpu("master") / a.n * 1e6,
            "drain_replica_us": drain_cpu("replica") / a.n * 1e6,
            "enqueue_master_us": enqueue_cpu("master") / a.n * 1e6,
            "enqueue_replica_us": enqueue_cpu("replica") / a.n * 1e6,
            "worker_us": worker_cpu / a.n * 1e6,
            "per_master": {str(port): per_master[port] for port in per_master},
            "busiest_master_us": (after_drain[busiest] - after_enqueue[busiest]) / max(1, per_master[busiest]) * 1e6,
            "busiest_share": per_master[busiest] / a.n,
        }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--herald", required=True)
    parser.add_argument("--n", type=int, default=300000)
    parser.add_argument("--shards", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--queue", default="alerts")
    parser.add_argument("--keep", type=int, default=0)
    args = parser.parse_args()
    bench = Bench(args)
    results = []
    try:
        bench.start_emulator()
        for run in range(args.runs):
            order = ["single", "sharded", "cluster", "cluster0"]
            order = order[run % 4:] + order[:run % 4]
            for case in order:
                log(f"run {run + 1}: {case}")
                results.append(bench.run_case(case))
    finally:
        bench.close()

    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("Model name")), "?")
    cores = os.cpu_count()
    load = open("/proc/loadavg").read().split()[:3]
    version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()[2]
    print(f"Machine: {model}, {cores} cores; load average {' '.join(load)} at the end; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"redis-server {version.removeprefix('v=')}; {args.n:,} notifications per case, 256-byte payloads, {args.workers} worker processes, "
          f"emulator latency 0.\n")
    print("| case | drain s | notifications/s | Redis CPU µs/notification, masters | … replicas | enqueue (XADD) µs, masters | … replicas | busiest master µs/notification (its share) | worker CPU µs/notification |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        label = {"single": "one queue, one redis-server", "sharded": f"{args.shards} shards, one redis-server", "cluster": f"{args.shards} shards, 3 masters + 3 replicas",
                 "cluster0": f"{args.shards} shards, 3 masters, no replicas"}[r["case"]]
        print(f"| {label} | {r['seconds']:.1f} | {r['rate']:,.0f} | {r['drain_master_us']:.2f} | {r['drain_replica_us']:.2f} | "
              f"{r['enqueue_master_us']:.2f} | {r['enqueue_replica_us']:.2f} | {r['busiest_master_us']:.2f} ({r['busiest_share']:.0%}) | {r['worker_us']:.2f} |")

    # The projection, from the cluster's own per-notification figures.
    cluster = [r for r in results if r["case"] == "cluster"]
    if cluster:
        master = max(r["drain_master_us"] + r["enqueue_master_us"] for r in cluster)
        replica = max(r["drain_replica_us"] + r["enqueue_replica_us"] for r in cluster)
        worker = max(r["worker_us"] for r in cluster)
        target = 1_000_000
        headroom = 0.5
        master_cores = target * master / 1e6
        masters = int(-(-master_cores // headroom))
        replica_cores = target * replica / 1e6
        worker_cores = target * worker / 1e6
        print()
        print(f"Projection to {target:,} notifications/s (enqueue + drain, from the worst cluster run above):")
        print(f"- masters: {master:.2f} µs of Redis CPU per notification → {master_cores:.1f} busy cores; Redis runs commands on one "
              f"core per node, so at {headroom:.0%} busy per node: **{masters} masters**, with at least {masters} shards "
              f"(better 2–4 per master, so slots can be rebalanced), each shard ≤ {target / masters:,.0f}/s;")
        print(f"- replicas: {replica:.2f} µs per notification → {replica_cores:.1f} cores over the {masters} replicas (one each);")
        print(f"- workers: {worker:.2f} µs per notification → {worker_cores:.1f} busy cores of `herald worker` "
              f"(e.g. {int(-(-worker_cores // 0.7))} processes at 70 %);")
        print("- assumptions: shards spread evenly over the masters (the busiest master's share above says how evenly this run's "
              "names fell), a master's cost per notification stays as measured when it serves more shards (same commands, same "
              "batching), one core per Redis node for commands (I/O threads off), APNs and the network are not the limit, "
              "no AOF (appendfsync everysec adds write and fsync cost on masters).")


if __name__ == "__main__":
    main()
