"""Reads Herald's feedback stream (device tokens APNs rejected) and forgets dead tokens.

    pip install redis
    python feedback_consumer.py --redis redis://127.0.0.1:6379 --queue default [--once]

Uses its own consumer group on herald:{<queue>}:feedback, so several backend processes can share
the work and an entry is acknowledged only after the token store was updated (at least once: the
handler must be idempotent, which "delete unless re-registered since" is). See docs/job-format.md.
"""
import argparse
import socket

import redis

GROUP = "backend"  # any name but Herald's own group, which lives on the jobs stream


class TokenStore:
    """Stand-in for your database: token -> when the app last registered it (ms since the epoch)."""

    def __init__(self):
        self.registered_at = {}

    def forget_if_not_renewed(self, token, topic, reason, dead_since_ms):
        last = self.registered_at.get(token.lower())
        if last is not None and last > dead_since_ms:
            print(f"keep   {token[:8]}… {reason}: re-registered after APNs saw it dead")
            return
        self.registered_at.pop(token.lower(), None)  # e.g. DELETE FROM devices WHERE token = ...
        print(f"forget {token[:8]}… {topic} {reason}")

    def move_to_environment(self, token, topic, environment):
        # The token is good, in the other APNs environment: e.g. UPDATE devices SET environment = ...
        print(f"move   {token[:8]}… {topic} to {environment}")


def handle(store, entry_id, fields):
    token = fields[b"token"].decode()
    topic = fields[b"topic"].decode()
    reason = fields[b"reason"].decode()  # Unregistered, ExpiredToken, BadDeviceToken, DeviceTokenNotForTopic, wrong_environment
    if reason == "wrong_environment":
        # Delivered, but only by the other APNs environment: not dead, fix the record.
        store.move_to_environment(token, topic, fields[b"environment"].decode())
        return
    # APNs' own time for a 410; otherwise the moment Herald wrote the entry (its id is ms-seq).
    dead_since_ms = int(fields.get(b"timestamp") or entry_id.split(b"-")[0])
    store.forget_if_not_renewed(token, topic, reason, dead_since_ms)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", default="redis://127.0.0.1:6379")
    parser.add_argument("--queue", default="default")
    parser.add_argument("--consumer", default=socket.gethostname(), help="stable per process: it re-reads its own pending entries")
    parser.add_argument("--once", action="store_true", help="exit when the stream has nothing new")
    args = parser.parse_args()
    r = redis.Redis.from_url(args.redis)
    key = f"herald:{{{args.queue}}}:feedback"
    try:
        r.xgroup_create(key, GROUP, id="0", mkstream=True)
    except redis.ResponseError as error:
        if "BUSYGROUP" not in str(error):
            raise
    store = TokenStore()

    def process(entries):
        for entry_id, fields in entries:
            if fields:  # an entry trimmed while pending comes back without fields
                handle(store, entry_id, fields)
            r.xack(key, GROUP, entry_id)  # only after the store was updated

    # 1. Our own pending entries: a previous run that stopped between handling and XACK.
    cursor = "0"
    while True:
        reply = r.xreadgroup(GROUP, args.consumer, {key: cursor}, count=100)
        entries = reply[0][1] if reply else []
        if not entries:
            break
        process(entries)
        cursor = entries[-1][0]
    # 2. New entries; when idle, take over entries another consumer left pending for a minute.
    while True:
        reply = r.xreadgroup(GROUP, args.consumer, {key: ">"}, count=100, block=1000 if args.once else 5000)
        entries = reply[0][1] if reply else []
        process(entries)
        if not entries:
            process(r.xautoclaim(key, GROUP, args.consumer, min_idle_time=60_000, count=100)[1])
            if args.once:
                break


if __name__ == "__main__":
    main()
