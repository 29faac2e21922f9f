#!/usr/bin/env python3
"""The measurement behind Benchmarks/scheduled-drain.sh (run that; it builds herald first).

Two cases on one private redis-server, one `herald worker` and `herald mock-apns`, alternating
when --runs > 1:
  stream     N jobs in the jobs stream (`herald enqueue --count N`), then the worker drains them
  scheduled  N jobs due now in the scheduled set (one ZADD pipeline through `redis-cli --pipe`,
             members exactly as the worker writes them), then the worker promotes and drains them
Each: the time from starting the worker until the emulator accepted all N, the rate, the worker's
and redis-server's CPU per notification (utime + stime from /proc/PID/stat), and the largest
jobs-stream length seen while draining (sampled every 20 ms: the promotion's backlog bound).
Prints Markdown on stdout, progress on stderr.
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

from benchkit import cpu_seconds, free_port, log, resp


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args], capture_output=True, text=True).stdout.strip()


class Bench:
    def __init__(self, args):
        self.args = args
        self.herald = os.path.abspath(args.herald)
        self.dir = tempfile.mkdtemp(prefix="herald-scheduled-")
        self.children = []
        self.payload = '{"aps":{"alert":"' + "x" * (256 - len('{"aps":{"alert":""}}')) + '"}}'

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

    def accepted(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.stats_port}/_herald/stats", timeout=5) as response:
            return json.load(response)["accepted"]

    def start_redis(self, name):
        port = free_port()
        process = self.spawn(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                              "--dir", self.dir, "--dbfilename", f"{name}.rdb"], f"redis-{name}.log")
        deadline = time.monotonic() + 10
        while redis_cli(port, "PING") != "PONG":
            if time.monotonic() > deadline:
                raise SystemExit("redis-server did not start")
            time.sleep(0.05)
        return port, process

    def fill_scheduled(self, port, n):
        """N members due now, as DeliveryRules writes them (RetryEntry with `scheduled`), in one pipeline."""
        now = int(time.time() * 1000)
        key = "herald:{bench}:scheduled"
        chunks = []
        for index in range(n):
            token = "ab" * 28 + f"{index % 10000:08x}"
            origin = f"{now - 60000}-{index}"
            member = ["payload", self.payload, "topic", "com.example.bench", "deliver_at", str(now - 1000), "token", token,
                      "attempts", "0", "origin", origin, "enqueued_at", str(now - 60000),
                      "retry_id", f"{origin}/s/{index}", "scheduled", str(now - 1000)]
            chunks.append(resp("ZADD", key, str(now - 1000), json.dumps(member, separators=(",", ":"))))
        data = b"".join(chunks)
        out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "--pipe"], input=data, capture_output=True)
        if out.returncode != 0:
            raise SystemExit(f"redis-cli --pipe failed: {out.stderr.decode()}")
        held = int(redis_cli(port, "ZCARD", key))
        if held != n:
            raise SystemExit(f"the scheduled set holds {held}, not {n}")

    def run_case(self, case):
        a = self.args
        port, redis = self.start_redis(f"{case}-{time.monotonic_ns()}")
        url = f"redis://127.0.0.1:{port}"
        log(f"  {case}: filling {a.n:,} …")
        if case == "stream":
            # The bulk stream, where the scheduled jobs are promoted to (`--lane auto` would put
            # these alerts in the urgent lane).
            out = subprocess.run([self.herald, "enqueue", "--redis", url, "--queue", "bench", "--count", str(a.n),
                                  "--distinct-tokens", "10000", "--token", "ab" * 32, "--payload", self.payload,
                                  "--topic", "com.example.bench", "--lane", "bulk"], capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"herald enqueue failed: {out.stderr}")
        else:
            self.fill_scheduled(port, a.n)
        redis_before = cpu_seconds(redis.pid)
        accepted_before = self.accepted()
        start = time.monotonic()
        worker = self.spawn([self.herald, "worker", "--redis", url, "--queue", "bench", "--apns-host", "127.0.0.1",
                             "--apns-port", str(self.apns_port), "--ca-file", self.cert, "--team-id", "TEAM000001",
                             "--key-id", "KEY0000001", "--key-file", self.key, "--bundle-id", "com.example.bench",
                             "--no-metrics", "--consumer", f"bench-{case}", "--log-level", "warning"], f"worker-{case}.log")
        worker_cpu = 0.0
        largest = 0
        deadline = start + 3600
        while True:
            if worker.poll() is not None:
                raise SystemExit(f"the worker exited ({worker.returncode}); see {self.dir}")
            worker_cpu = cpu_seconds(worker.pid)
            length = redis_cli(port, "XLEN", "herald:{bench}:jobs")
            if length.isdigit():
                largest = max(largest, int(length))
            if self.accepted() - accepted_before >= a.n:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"{case}: not drained within an hour")
            time.sleep(0.02)
        elapsed = time.monotonic() - start
        redis_cpu = cpu_seconds(redis.pid) - redis_before
        left = redis_cli(port, "ZCARD", "herald:{bench}:scheduled")
        self.stop(worker, signal.SIGTERM)
        self.stop(redis)
        return {"case": case, "seconds": elapsed, "rate": a.n / elapsed, "worker_us": worker_cpu * 1e6 / a.n,
                "redis_us": redis_cpu * 1e6 / a.n, "largest": largest, "left": left}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--herald", required=True)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--keep", type=int, default=0)
    args = parser.parse_args()
    bench = Bench(args)
    try:
        bench.start_emulator()
        rows = []
        for run in range(args.runs):
            for case in (["stream", "scheduled"] if run % 2 == 0 else ["scheduled", "stream"]):
                rows.append(bench.run_case(case))
                log(f"  {rows[-1]}")
        model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
        load = open("/proc/loadavg").read().split()[:3]
        version = redis_cli_version()
        print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {model}, {os.cpu_count()} cores; load average at the end "
              f"{' '.join(load)}; redis-server {version}; {args.n:,} notifications per case, 256-byte payloads, 1 worker "
              f"(4 connections × 1000 streams), emulator latency 0\n")
        print("| case | drain s | notifications/s | worker CPU µs/notification | redis-server CPU µs/notification | largest jobs-stream length seen |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for row in rows:
            print(f"| {row['case']} | {row['seconds']:.1f} | {row['rate']:,.0f} | {row['worker_us']:.1f} | {row['redis_us']:.1f} | {row['largest']:,} |")
    finally:
        bench.close()


def redis_cli_version():
    out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()
    return next((part.removeprefix("v=") for part in out if part.startswith("v=")), "?")


if __name__ == "__main__":
    main()
