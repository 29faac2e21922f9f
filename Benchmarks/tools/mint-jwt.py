#!/usr/bin/env python3
"""Mint an APNs provider token (ES256 JWT) from a .p8 key.

Header {"alg":"ES256","kid":KEY_ID}, claims {"iss":TEAM_ID,"iat":now}, signature
raw r||s (64 bytes, not DER), all base64url without padding. Prints the token.

    mint-jwt.py --key AuthKey.p8 [--team-id TEAM000001] [--key-id KEY0000001] [--iat SECONDS]
"""
import argparse
import base64
import json
import sys
import time

try:
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
except ImportError:  # pragma: no cover
    sys.exit("mint-jwt.py needs the 'cryptography' module (Debian: python3-cryptography)")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def segment(obj) -> str:
    return b64url(json.dumps(obj, separators=(",", ":")).encode("utf-8"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--key", required=True, help="PKCS#8 PEM (.p8) P-256 private key")
    parser.add_argument("--team-id", default="TEAM000001")
    parser.add_argument("--key-id", default="KEY0000001")
    parser.add_argument("--iat", type=int, default=None, help="issued-at, UNIX seconds (default: now)")
    args = parser.parse_args()

    with open(args.key, "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        sys.exit(f"{args.key}: not a P-256 private key")

    iat = args.iat if args.iat is not None else int(time.time())
    signing_input = segment({"alg": "ES256", "kid": args.key_id}) + "." + segment({"iss": args.team_id, "iat": iat})
    der = key.sign(signing_input.encode("ascii"), ec.ECDSA(hashes.SHA256()))
    r, s = decode_dss_signature(der)
    signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    print(signing_input + "." + b64url(signature))
    return 0


if __name__ == "__main__":
    sys.exit(main())
