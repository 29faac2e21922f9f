#!/usr/bin/env python3
"""Send N notifications with aioapns (PyPI) as fast as its API allows, and print the rate.

The peer of Benchmarks/compare.sh: an established asyncio APNs client a user would otherwise
pick. It runs in Benchmarks/.venv (compare.sh creates it and pins the aioapns version).

How it is pointed at the emulator (aioapns has no host/port option):
  * host and port: the class attributes APNS_SERVER / APNS_PORT of
    aioapns.connection.APNsProductionClientProtocol are set to --host / --port before the
    client is made (monkeypatch; aioapns also puts APNS_SERVER in the `host` header and uses
    it as the TLS server name);
  * trust: aioapns' own `ssl_context=` argument, a default context that trusts --ca-file
    (the emulator's certificate) and offers ALPN h2, as APNs expects;
  * provider token: aioapns' own key/key_id/team_id arguments (it mints the ES256 JWT with PyJWT).
Nothing else of aioapns is changed.

Sending: --connections is aioapns' max_connections; aioapns itself caps each connection at
1000 concurrent streams (its ChannelPool) and lowers that to the server's
SETTINGS_MAX_CONCURRENT_STREAMS. We keep connections x streams requests in flight: that many
coroutines, each awaiting send_notification() in a loop until N are sent (--mode pipeline,
the default), or asyncio.gather over windows of that many (--mode window). Every response is
checked (status 200); the script exits 1 if any is not.

Prints one line:  RATE SECONDS OK NOT_OK detail  (rate = 200 answers per second of the timed
part), and with --json FILE the same as JSON plus this process's CPU seconds.

    aioapns_send.py --host 127.0.0.1 --port PORT --ca-file ca.pem --key key.p8 \
        --team-id TEAM000001 --key-id KEY0000001 --topic com.example.app \
        --token HEX --payload-file payload.json --n 20000 [--connections 4] [--streams 1000]
        [--warmup 2000] [--mode pipeline|window] [--max-seconds S] [--timeout S] [--json FILE]
"""
import argparse
import asyncio
import json
import logging
import resource
import ssl
import sys
import time

import aioapns
from aioapns import APNs, NotificationRequest, PushType
from aioapns import connection as aioapns_connection


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def exact_message(path: str, size: int) -> dict:
    """The payload file as a dict, its alert trimmed so that aioapns' own serialization
    (json.dumps(message, ensure_ascii=False), with ', ' and ': ' separators) is exactly `size` bytes."""
    with open(path, "rb") as f:
        message = json.loads(f.read())
    dumped = json.dumps(message, ensure_ascii=False).encode()
    excess = len(dumped) - size
    if excess > 0:
        alert = message["aps"]["alert"]
        if excess >= len(alert):
            sys.exit(f"payload of {size} bytes is too small for aioapns' serialization")
        message["aps"]["alert"] = alert[: len(alert) - excess]
    elif excess < 0:
        message["aps"]["alert"] += "x" * (-excess)
    final = len(json.dumps(message, ensure_ascii=False).encode())
    assert final == size, (final, size)
    return message


async def run(args) -> int:
    # Point aioapns at the emulator (see the module docstring).
    aioapns_connection.APNsProductionClientProtocol.APNS_SERVER = args.host
    aioapns_connection.APNsProductionClientProtocol.APNS_PORT = args.port
    context = ssl.create_default_context(cafile=args.ca_file)
    context.set_alpn_protocols(["h2"])
    with open(args.key) as f:
        key = f.read()
    client = APNs(key=key, key_id=args.key_id, team_id=args.team_id, topic=args.topic,
                  max_connections=args.connections, use_sandbox=False, ssl_context=context)
    message = exact_message(args.payload_file, args.payload_bytes)
    flow_control_errors = count_flow_control_errors()
    busy_waits = count_busy_pool_waits()
    limit = args.connections * args.streams
    statuses: dict = {}

    def request() -> NotificationRequest:
        # A fresh apns-id per notification (aioapns' default: uuid4), like Herald.
        return NotificationRequest(device_token=args.token, message=message, priority=10,
                                   push_type=PushType.ALERT)

    async def send_one() -> None:
        try:
            result = await client.send_notification(request())
            status = result.status if result.is_successful else f"{result.status}:{result.description}"
        except Exception as error:  # aioapns raises after max_connection_attempts
            status = type(error).__name__
        statuses[status] = statuses.get(status, 0) + 1

    sent = 0
    deadline = [float("inf")]

    async def send(count: int) -> None:
        nonlocal sent
        if args.mode == "window":
            for start in range(0, count, limit):
                if time.perf_counter() > deadline[0]:
                    return
                size = min(limit, count - start)
                sent += size
                await asyncio.gather(*(send_one() for _ in range(size)))
            return
        remaining = count

        async def lane() -> None:
            nonlocal remaining, sent
            while remaining > 0 and time.perf_counter() <= deadline[0]:
                remaining -= 1
                sent += 1
                await send_one()

        await asyncio.gather(*(lane() for _ in range(min(limit, count))))

    if args.warmup:
        try:  # opens the connections; not timed, not counted
            await asyncio.wait_for(send(args.warmup), timeout=args.timeout)
        except asyncio.TimeoutError:
            print(f"0 0 0 0 warm-up_timed_out_after_{args.timeout}s,statuses={statuses}")
            return 2
        statuses.clear()
    busy_waits[0] = 0
    sent = 0
    cpu_before = cpu_seconds()
    start = time.perf_counter()
    if args.max_seconds:
        deadline[0] = start + args.max_seconds
    timed_out = False
    try:
        # aioapns polls forever for a free stream once its connections are gone: bound the wait.
        await asyncio.wait_for(send(args.n), timeout=args.timeout)
    except asyncio.TimeoutError:
        timed_out = True
    seconds = time.perf_counter() - start
    cpu = cpu_seconds() - cpu_before
    client.pool.close()

    ok = statuses.get("200", 0)
    stopped_early = sent < args.n
    rate = ok / seconds if seconds > 0 else 0.0
    bounds = sorted({c.free_channels.bound for c in client.pool.connections})
    detail = ",".join(f"{k}={v}" for k, v in sorted(statuses.items()) if k != "200") or "all-200"
    detail += f",connections={len(client.pool.connections)},stream_bounds={'/'.join(map(str, bounds))}"
    detail += f",flow_control_retries={flow_control_errors[0]},pool_busy_waits={busy_waits[0]}"
    if timed_out:
        detail += f",TIMED_OUT_after_{args.timeout}s"
    elif stopped_early:
        detail += f",stopped_after_{args.max_seconds}s_with_{sent}_sent"
    print(f"{rate:.0f} {seconds:.3f} {ok} {sent - ok} {detail}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(tool="aioapns", aioapns_version=version(),
                           python=sys.version.split()[0], n=args.n, sent=sent, max_seconds=args.max_seconds,
                           timed_out=timed_out, warmup=args.warmup, ok=ok, not_ok=sent - ok, pool_busy_waits=busy_waits[0], statuses=statuses, seconds=seconds, rate=rate,
                           cpu_seconds=cpu, connections=len(client.pool.connections),
                           stream_bounds=bounds, in_flight_limit=limit,
                           flow_control_retries=flow_control_errors[0], mode=args.mode,
                           payload_bytes=args.payload_bytes), f, indent=2)
    return 2 if timed_out else 0 if ok == sent else 1


def count_flow_control_errors() -> list:
    """Counts the h2 FlowControlErrors aioapns' connections raise (measurement only: the error is
    re-raised unchanged, and aioapns' pool then sleeps 1 s and retries the notification on a new
    stream, leaving the first stream open without its body)."""
    counter = [0]
    original = aioapns_connection.APNsBaseClientProtocol.send_notification

    async def counted(self, request):
        try:
            return await original(self, request)
        except aioapns_connection.FlowControlError:
            counter[0] += 1
            raise

    aioapns_connection.APNsBaseClientProtocol.send_notification = counted
    return counter


def count_busy_pool_waits() -> list:
    """Counts aioapns' "Pool is completely busy" warnings (each is a request that found every
    connection at its stream limit and polls every 10 ms for a free one) and keeps them out of
    stderr; every other warning is dropped too (errors still print)."""
    counter = [0]

    class Count(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            if record.levelno >= logging.ERROR:
                return True
            if str(record.msg).startswith("Pool is completely busy"):
                counter[0] += 1
            return False

    logging.getLogger("aioapns").addFilter(Count())
    return counter


def version() -> str:
    try:
        from importlib.metadata import version as v
        return v("aioapns")
    except Exception:
        return "unknown"


def main() -> int:
    if sys.argv[1:] == ["--version"]:
        print(version())
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ca-file", required=True)
    parser.add_argument("--key", required=True, help=".p8 provider-token key")
    parser.add_argument("--team-id", default="TEAM000001")
    parser.add_argument("--key-id", default="KEY0000001")
    parser.add_argument("--topic", default="com.example.app")
    parser.add_argument("--token", required=True)
    parser.add_argument("--payload-file", required=True)
    parser.add_argument("--payload-bytes", type=int, default=256)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--streams", type=int, default=1000, help="in flight per connection (aioapns caps it at 1000)")
    parser.add_argument("--mode", choices=("pipeline", "window"), default="pipeline")
    parser.add_argument("--max-seconds", type=float, default=0,
                        help="stop starting new notifications after this many seconds (0: none); the rate counts those answered")
    parser.add_argument("--timeout", type=float, default=300,
                        help="give up after this many seconds (each of warm-up and run); exit 2")
    parser.add_argument("--json")
    parser.add_argument("--version", action="store_true", help="print the aioapns version and exit (alone)")
    args = parser.parse_args()
    # aioapns logs a warning for every request that finds its pool busy: counted, not printed.
    logging.getLogger("aioapns").setLevel(logging.WARNING)
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
