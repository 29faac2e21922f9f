#!/usr/bin/env python3
"""Write an APNs alert payload of exactly N bytes: {"aps":{"alert":"xxxx…"}}.

    make-payload.py BYTES OUTFILE
"""
import sys

PREFIX = '{"aps":{"alert":"'
SUFFIX = '"}}'


def main() -> int:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    size = int(sys.argv[1])
    minimum = len(PREFIX) + len(SUFFIX)
    if size < minimum or size > 4096:
        sys.exit(f"payload size must be {minimum}..4096 bytes (APNs' limit for alerts), got {size}")
    text = "Herald benchmark "
    body = (text * (size // len(text) + 1))[: size - minimum]
    data = (PREFIX + body + SUFFIX).encode("ascii")
    assert len(data) == size
    with open(sys.argv[2], "wb") as f:
        f.write(data)  # no trailing newline: the file is the request body
    return 0


if __name__ == "__main__":
    sys.exit(main())
