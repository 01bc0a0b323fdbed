#!/usr/bin/env python3
"""Writes the seed corpus of tests/fuzz/fuzz_handshake.c: scripts of operations on a requester
and a server (see the comment at the top of fuzz_handshake.c), one per interesting pairing.

usage: tests/fuzz/gen_handshake_corpus.py [OUT_DIR]  (default: tests/fuzz/corpus/fuzz_handshake)
Files are named seed_*; files libFuzzer adds keep their hash names and are left alone.
"""
import os
import sys

REQ_KEY, SRV_KEY, SRV_OTHER_KEY, OTHER_ADDR = 1, 2, 4, 8
REQ_SVC2, SRV_SVC2, NO_ID, BIG_INFLIGHT = 16, 32, 64, 128
TO_SRV, TO_REQ, FLIP_REQ, FLIP_SRV, RAW_SRV, RAW_REQ = range(6)
HONEST = bytes([TO_SRV, TO_REQ, TO_SRV, TO_REQ])


def seeds():
    yield "both_keys", bytes([REQ_KEY | SRV_KEY]) + HONEST
    yield "both_keys_rpc", bytes([REQ_KEY | SRV_KEY | REQ_SVC2 | SRV_SVC2 | BIG_INFLIGHT]) + HONEST
    yield "no_keys", bytes([0]) + HONEST
    yield "no_keys_no_id", bytes([NO_ID]) + HONEST
    yield "requester_only_key", bytes([REQ_KEY]) + HONEST
    yield "server_only_key", bytes([SRV_KEY]) + HONEST
    yield "other_keys", bytes([REQ_KEY | SRV_KEY | SRV_OTHER_KEY]) + HONEST
    yield "relayed_address", bytes([REQ_KEY | SRV_KEY | OTHER_ADDR]) + HONEST
    yield "service_mismatch", bytes([REQ_KEY | SRV_KEY | SRV_SVC2]) + HONEST
    yield "flip_hello_nonce", bytes([REQ_KEY | SRV_KEY, FLIP_REQ, 40, 1]) + HONEST[1:]
    yield "flip_ack_id", bytes([REQ_KEY | SRV_KEY, TO_SRV, FLIP_SRV, 72, 4, TO_SRV, TO_REQ])
    yield "flip_auth_proof", bytes([REQ_KEY | SRV_KEY, TO_SRV, TO_REQ, FLIP_REQ, 50, 128, TO_REQ])
    yield "replay_twice", bytes([REQ_KEY | SRV_KEY]) + HONEST + HONEST
    yield "raw_junk", bytes([REQ_KEY | SRV_KEY, RAW_SRV, 8]) + b"SHL1\x02\x03\x00\x00"
    yield "raw_to_requester", bytes([REQ_KEY, RAW_REQ, 32]) + bytes(32)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus", "fuzz_handshake")
    os.makedirs(out, exist_ok=True)
    n = 0
    for name, data in seeds():
        with open(os.path.join(out, "seed_" + name), "wb") as f:
            f.write(data)
        n += 1
    print(f"wrote {n} seeds to {out}")


if __name__ == "__main__":
    main()
