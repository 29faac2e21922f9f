"""Helpers shared by the Python measurement scripts in Benchmarks/tools (imported, not run)."""
import os
import socket
import sys

TICKS = os.sysconf("SC_CLK_TCK")


def log(message):
    """Progress on stderr, so that stdout carries only the report."""
    print(message, file=sys.stderr, flush=True)


def free_port(cluster=False):
    """A free port on 127.0.0.1; for a cluster node one at most 55535 whose bus port (+10000) is free too."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not cluster:
            return port
        if port > 55535:
            continue
        try:
            with socket.socket() as bus:
                bus.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue


def cpu_seconds(pid):
    """utime + stime of a live process (and its threads), in seconds (clock ticks: 10 ms steps)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def resp(*args):
    """One command in RESP, for `redis-cli --pipe`; arguments are str, int or bytes."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)
