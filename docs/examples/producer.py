"""Herald producer with redis-py: one job, one fan-out job, a pipelined bulk enqueue.

    pip install redis
    python producer.py --redis redis://127.0.0.1:6379 --queue default --count 1000

See docs/job-format.md for every field.
"""
import argparse
import json
import time

import redis


def jobs_key(queue: str) -> str:
    # The braces are a Redis Cluster hash tag: all of a queue's keys share one slot.
    return f"herald:{{{queue}}}:jobs"


def job(tokens, payload, **headers):
    """The fields of one job. tokens: one hex token or a list (fan-out, up to 10,000).
    headers: topic, push_type, priority, expiration, collapse_id, id (all optional)."""
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    limit = 5120 if headers.get("push_type") == "voip" else 4096
    if len(body.encode()) > limit:
        raise ValueError(f"payload is {len(body.encode())} bytes; the limit is {limit}")
    fields = {"payload": body}
    if isinstance(tokens, str):
        fields["token"] = tokens
    else:
        fields["tokens"] = ",".join(tokens)
    for name, value in headers.items():
        if value is not None:
            fields[name] = str(value)
    return fields


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", default="redis://127.0.0.1:6379")
    parser.add_argument("--queue", default="default")
    parser.add_argument("--count", type=int, default=1000)
    args = parser.parse_args()
    r = redis.Redis.from_url(args.redis)
    key = jobs_key(args.queue)
    token = "7a2f5c3b9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809102"

    # 1. One notification. XADD returns the entry id: keep it to find the job in :dead later.
    entry_id = r.xadd(key, job(token, {"aps": {"alert": {"title": "Order shipped", "body": "On its way."}}},
                               collapse_id="order-1234"))
    print("single:", entry_id.decode())

    # 2. Fan-out: one payload, many tokens, one entry.
    tokens = [token[:-2] + f"{i:02x}" for i in range(3, 6)]
    entry_id = r.xadd(key, job(tokens, {"aps": {"alert": "Flash sale: 20% off today only"}},
                               priority=5, expiration=int(time.time()) + 3600))
    print("fan-out:", entry_id.decode())

    # 3. Bulk: pipeline (no MULTI needed), sent in chunks of 1,000.
    pipe = r.pipeline(transaction=False)
    for i in range(args.count):
        pipe.xadd(key, job(token[:-8] + f"{i:08x}", {"aps": {"alert": f"Hello #{i}"}, "n": i}))
        if len(pipe) == 1000:
            pipe.execute()
    pipe.execute()
    print("bulk:", args.count, "jobs")


if __name__ == "__main__":
    main()
