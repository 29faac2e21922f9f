#!/usr/bin/env python3
"""What redis-server spends per stream entry for each way of reading a queue (no Herald involved).

Every case runs on a fresh stream of N entries shaped like `herald loadgen`'s jobs (a 64-digit
`token` and a 256-byte `payload`) in one private redis-server, and reads it to the end in reads of
--batch entries, sent as one `redis-cli --pipe` pipeline (so the client's speed does not matter).
The figure is redis-server's utime + stime (from /proc/PID/stat) over the reads, per entry:

  pel               XREADGROUP COUNT B, then MULTI { XACK the B ids } EXEC: Herald's worker
  pel-no-ack        the same reads, never acknowledged (the pending list grows)
  noack             XREADGROUP … NOACK: no pending list at all (nothing survives a crash)
  noack-script      NOACK and a record of the range read (HSET) in one Lua script, then the
                    record removed in a MULTI: the only atomic read-and-record without a pending list
  noack-then-record NOACK, then the record written and removed in a MULTI (not atomic with the
                    read: a worker that stops in between loses the batch)
  lease             Herald's worker since leases: MULTI { HSET placeholder, EVAL leaseRead,
                    XREADGROUP … NOACK } EXEC, then the read's positions set in two outcome
                    batches (EVAL leaseFinish, each in a MULTI) and the lease deleted (leaseDelete); the
                    scripts are read from Sources/Queue/StreamLease.swift

Cases alternate round by round (--rounds). CPU time is counted in clock ticks (10 ms), so keep N
at 100,000 or more. Prints Markdown on stdout, progress on stderr.
Usage: python3 Benchmarks/tools/redis_read_costs.py [--n 500000] [--batch 256] [--rounds 2]
"""
import argparse
import os
import platform
import re
import subprocess
import sys
import time

from benchkit import cpu_seconds, free_port, log, resp

CASES = ["pel", "pel-no-ack", "noack", "noack-script", "noack-then-record", "lease"]
SCRIPT = """local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3], 'NOACK', 'STREAMS', KEYS[1], '>')
if r then
  local entries = r[1][2]
  redis.call('HSET', KEYS[2], ARGV[2] .. ' ' .. entries[1][1], entries[#entries][1] .. ' ' .. ARGV[4])
end
return r"""


def lease_scripts():
    """leaseRead and leaseFinish as the worker sends them (from the Swift source, unindented)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../Sources/Queue/StreamLease.swift")
    found = dict(re.findall(r'public static let (\w+) = """\n(.*?)\n\s*"""', open(path).read(), re.S))
    return {name: "\n".join(line[8:] if line.startswith(" " * 8) else line for line in found[name].split("\n"))
            for name in ("leaseRead", "leaseFinish", "leaseDelete")}


def mask(positions):
    """The hex mask of `positions` (see StreamLease)."""
    digits = [0] * ((max(positions) + 4) // 4)
    for p in positions:
        digits[p // 4] |= 1 << (p % 4)
    return "".join("%x" % d for d in digits)


def pipe(port, data):
    done = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "--pipe"], input=data, capture_output=True)
    if done.returncode != 0 or b"errors: 0" not in done.stdout:
        sys.exit(f"redis-cli --pipe failed: {done.stdout[-400:]!r} {done.stderr[-400:]!r}")


def reads(case, key, n, batch, sha, scripts):
    commands = []
    for start in range(1, n + 1, batch):
        ids = [f"1-{i}" for i in range(start, min(n, start + batch - 1) + 1)]
        lease = f"c 1-{start}"
        if case in ("pel", "pel-no-ack"):
            commands.append(resp("XREADGROUP", "GROUP", "g", "c", "COUNT", batch, "STREAMS", key, ">"))
            if case == "pel":
                commands += [resp("MULTI"), resp("XACK", key, "g", *ids), resp("EXEC")]
        elif case == "noack":
            commands.append(resp("XREADGROUP", "GROUP", "g", "c", "COUNT", batch, "NOACK", "STREAMS", key, ">"))
        elif case == "noack-script":
            commands.append(resp("EVALSHA", sha, 2, key, "leases", "g", "c", batch, 1700000000000))
            commands += [resp("MULTI"), resp("HDEL", "leases", lease), resp("EXEC")]
        elif case == "lease":
            field = f"i-{start}"
            commands += [resp("MULTI"), resp("HSET", key + ":leases", field, "-"),
                         resp("EVAL", scripts["leaseRead"], 2, key, key + ":leases", "g", field, batch, "c"),
                         resp("XREADGROUP", "GROUP", "g", "c", "COUNT", batch, "NOACK", "STREAMS", key, ">"), resp("EXEC")]
            half = len(ids) // 2
            for part in (range(0, half), range(half, len(ids))):
                if len(part):
                    commands += [resp("MULTI"), resp("EVAL", scripts["leaseFinish"], 1, key + ":leases", field, len(ids), ids[-1], mask(part)),
                                 resp("EXEC")]
            commands.append(resp("EVAL", scripts["leaseDelete"], 1, key + ":leases", field))
        elif case == "noack-then-record":
            commands.append(resp("XREADGROUP", "GROUP", "g", "c", "COUNT", batch, "NOACK", "STREAMS", key, ">"))
            commands += [resp("MULTI"), resp("HSET", "leases", lease, f"{ids[-1]} 1700000000000"),
                         resp("HDEL", "leases", lease), resp("EXEC")]
    return b"".join(commands)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500_000, help="entries per case (default 500000)")
    parser.add_argument("--batch", type=int, default=256, help="entries per read (default 256, the worker's)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every case, alternating (default 2)")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ", ".join(CASES))
    args = parser.parse_args()
    cases = args.cases.split(",")
    for case in cases:
        if case not in CASES:
            sys.exit(f"unknown case {case!r} (one of {', '.join(CASES)})")
    if args.n < 1 or args.batch < 1 or args.rounds < 1:
        sys.exit("--n, --batch and --rounds must be at least 1")
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True, text=True).stdout.strip() == "PONG":
                break
            time.sleep(0.05)
        else:
            sys.exit("redis-server did not start")
        version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()
        sha = subprocess.run(["redis-cli", "-p", str(port), "SCRIPT", "LOAD", SCRIPT], capture_output=True, text=True).stdout.strip()
        scripts = lease_scripts()
        payload = b'{"aps":{"alert":"' + b"x" * 236 + b'"}}'
        results = {case: [] for case in cases}
        for round_ in range(args.rounds):
            for case in (cases if round_ % 2 == 0 else list(reversed(cases))):
                key = f"bench-{case}"
                fill = [resp("DEL", key, "leases", key + ":leases"), resp("XGROUP", "CREATE", key, "g", "0", "MKSTREAM")]
                fill += [resp("XADD", key, f"1-{i}", "token", "%064x" % i, "payload", payload) for i in range(1, args.n + 1)]
                pipe(port, b"".join(fill))
                data = reads(case, key, args.n, args.batch, sha, scripts)
                before = cpu_seconds(server.pid)
                pipe(port, data)
                spent = cpu_seconds(server.pid) - before
                results[case].append(spent / args.n * 1e6)
                log(f"round {round_ + 1}: {case}: {spent:.2f} s for {args.n:,} entries")
                pipe(port, resp("DEL", key, "leases"))
    finally:
        server.terminate()
        server.wait()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), platform.processor())
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {cpu}, {os.cpu_count()} cores; redis-server "
          f"{next((v.removeprefix('v=') for v in version if v.startswith('v=')), '?')} (--save '', no AOF, no replica); "
          f"{args.n:,} entries per case (64-digit token, 256-byte payload), reads of {args.batch}, {args.rounds} round{'s' if args.rounds > 1 else ''}\n")
    base = sorted(results["pel"])[len(results["pel"]) // 2] if "pel" in results else None
    print("| case | redis-server CPU µs per entry (each round) | median | ÷ pel |")
    print("| --- | --- | ---: | ---: |")
    for case in cases:
        values = results[case]
        median = sorted(values)[len(values) // 2]
        ratio = f"{median / base:.2f}" if base else "—"
        print(f"| {case} | {', '.join(f'{v:.2f}' for v in values)} | {median:.2f} | {ratio} |")


if __name__ == "__main__":
    main()
