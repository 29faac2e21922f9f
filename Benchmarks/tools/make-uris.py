#!/usr/bin/env python3
"""Write T request URIs for h2load -i, each to its own 64-hex device token (deterministic).

    make-uris.py T BASE OUTFILE        e.g. make-uris.py 10000 https://127.0.0.1:8443 uris.txt
"""
import hashlib
import sys


def main() -> int:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    count, base, path = int(sys.argv[1]), sys.argv[2].rstrip("/"), sys.argv[3]
    if count < 1 or count > 10_000_000:
        sys.exit(f"token count must be 1..10000000, got {count}")
    with open(path, "w") as out:
        for index in range(count):
            token = hashlib.sha256(f"herald-bench-token-{index}".encode()).hexdigest()
            out.write(f"{base}/3/device/{token}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
