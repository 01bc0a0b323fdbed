#!/usr/bin/env python3
"""Writes the seed corpus of tests/fuzz/fuzz_wire.c: valid frames of every message type and a few
malformed ones, each a 32-byte header followed by its body (payloads are not part of the frame
the codec sees).

It encodes the format from docs/iorpc-protocol.md on its own (CRC32C included) rather than through
the C codec, so the seeds double as a second implementation's view of the bytes.

usage: tests/fuzz/gen_wire_corpus.py [OUT_DIR]   (default: tests/fuzz/corpus/fuzz_wire)
Files are named seed_*; files libFuzzer adds keep their hash names and are left alone.
"""
import os
import struct
import sys

MAGIC = b"SHL1"
HELLO, HELLO_ACK, AUTH, AUTH_OK = 1, 2, 3, 4
READ, READ_RESP, ERROR, PING, PONG, INFO, INFO_RESP, CORRUPT, GOAWAY, PUT_BLOCK, PUT_RESP = \
    range(16, 27)
WF_AUTH_REQUIRED, WF_RDMA_TARGET, WF_RDMA_WRITTEN, WF_FILL = 1, 2, 4, 8
ST_NOT_OWNER, ST_BUSY = 3, 9
CHUNK = 64 * 1024
MiB = 1024 * 1024


def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


VERSION = 2


def header(type_, body, flags=0, status=0, payload_len=0, msg_id=1, body_len=None, version=VERSION,
           magic=MAGIC):
    if body_len is None:
        body_len = len(body)
    h = magic + struct.pack("<BBHIIIQ", version, type_, flags, status, body_len, payload_len,
                            msg_id)
    # The CRC runs over header bytes 0..27 and then the body as declared.
    return h + struct.pack("<I", crc32c(body, crc32c(h)))


def frame(type_, body=b"", **kw):
    return header(type_, body, **kw) + body


def hello(service, lo=VERSION, hi=VERSION):
    return bytes([lo, hi, service]) + bytes(range(1, 33))


def hello_ack(max_inflight, member_id=b"4f1c2a9e0b7d6c5e4f3a2b1c0d9e8f7a"):
    return (bytes([VERSION]) + bytes(range(200, 232)) + struct.pack("<I", max_inflight) +
            bytes([len(member_id)]) + member_id)


def read(key=b"dir/obj.bin", version=b'"etag-1"', obj_size=10 * MiB + 100000, block_size=4 * MiB,
         index=0, offset=CHUNK, length=2 * CHUNK, rdma_addr=0, rdma_key=0, view=7):
    return struct.pack("<QQIIIIQQHH", view, obj_size, block_size, index, offset, length,
                       rdma_addr, rdma_key, len(key), len(version)) + key + version


def read_resp(offset, length, block=bytes(range(0xA0, 0xB0)), n_crcs=None):
    n = (length + CHUNK - 1) // CHUNK
    crcs = b"".join(struct.pack("<I", 0x9E3779B9 * (i + 1) & 0xFFFFFFFF) for i in range(n))
    return block + struct.pack("<III", offset, length, n if n_crcs is None else n_crcs) + crcs


def put(key=b"ckpt/step-100.pt", version=b'"etag-9"', obj_size=10 * MiB + 100000,
        block_size=4 * MiB, index=2):
    return struct.pack("<QQIIHH", 7, obj_size, block_size, index, len(key), len(version)) + key \
        + version


def s8(s):
    return bytes([len(s)]) + s


def info_resp(rdma=(), tcp=b"10.0.0.1:4000", iorpc=b"10.0.0.1:4001", block_size=4 * MiB,
              url=b"s3://bucket/prefix"):
    return (s8(tcp) + s8(iorpc) + bytes([len(rdma)]) + b"".join(s8(a) for a in rdma) +
            struct.pack("<IH", block_size, len(url)) + url)


def seeds():
    rd = read()
    yield "valid_hello_tcp_pool", frame(HELLO, hello(1))
    yield "valid_hello_iorpc", frame(HELLO, hello(2, 1, 3))
    yield "valid_hello_version1_only", frame(HELLO, hello(2, 1, 1))
    yield "valid_hello_rdma", frame(HELLO, hello(3))
    yield "valid_hello_ack_auth", frame(HELLO_ACK, hello_ack(2048), flags=WF_AUTH_REQUIRED)
    yield "valid_hello_ack_noauth", frame(HELLO_ACK, hello_ack(1, b""))
    yield "valid_auth", frame(AUTH, bytes(range(32, 64)), msg_id=2)
    yield "valid_auth_ok", frame(AUTH_OK, bytes(range(64, 96)), msg_id=2)
    yield "valid_read", frame(READ, rd, msg_id=100, flags=WF_FILL)
    yield "valid_read_rdma", frame(READ, read(rdma_addr=0x7F0012345000, rdma_key=0x1234),
                                   flags=WF_RDMA_TARGET | WF_FILL, msg_id=2**63)
    yield "valid_read_last_block", frame(READ, read(index=2, offset=32 * CHUNK, length=100000))
    yield "valid_read_small_object", frame(READ, read(obj_size=1, block_size=64 * 1024, offset=0,
                                                      length=1, key=b"a", version=b"1-2"))
    yield "valid_read_resp", frame(READ_RESP, read_resp(CHUNK, 2 * CHUNK), payload_len=2 * CHUNK)
    yield "valid_read_resp_short", frame(READ_RESP, read_resp(0, 100), payload_len=100)
    yield "valid_read_resp_rdma", frame(READ_RESP, read_resp(0, 3 * CHUNK), flags=WF_RDMA_WRITTEN)
    yield "valid_error", frame(ERROR, b"not owner under view 9", status=ST_NOT_OWNER)
    yield "valid_error_empty", frame(ERROR, status=ST_BUSY)
    yield "valid_ping", frame(PING, b"12345678", msg_id=9)
    yield "valid_pong", frame(PONG, b"12345678", msg_id=9)
    yield "valid_info", frame(INFO)
    yield "valid_info_resp", frame(INFO_RESP, info_resp())
    yield "valid_info_resp_rdma", frame(INFO_RESP, info_resp(rdma=(b"192.168.1.1:5000",
                                                                    b"192.168.2.1:5001")))
    yield "valid_corrupt", frame(CORRUPT, rd, msg_id=0)
    yield "valid_goaway", frame(GOAWAY, msg_id=0)
    # PUT_BLOCK's payload is the last block's CRCs (2 chunks) and its 100000 bytes.
    yield "valid_put_block", frame(PUT_BLOCK, put(), payload_len=4 * 2 + 100000, msg_id=77)
    yield "valid_put_resp", frame(PUT_RESP, msg_id=77)

    bad = bytearray(frame(READ, rd))
    bad[40] ^= 0x04
    yield "bad_crc_body_bit", bytes(bad)
    yield "bad_magic", frame(READ, rd, magic=b"SHL2")
    yield "bad_version1_hello", frame(HELLO, hello(2, 1, 1), version=1)
    yield "bad_hello_ack_id_slash", frame(HELLO_ACK, hello_ack(8, b"a/b"))
    yield "bad_auth_ok_empty", frame(AUTH_OK, msg_id=2)
    yield "bad_type", frame(5, b"")
    yield "bad_truncated_read", frame(READ, rd)[: 32 + 40]
    yield "bad_key_nul", frame(READ, read(key=b"dir\x00obj"))
    yield "bad_unaligned_offset", frame(READ, read(offset=CHUNK + 4096))
    yield "bad_ncrcs", frame(READ_RESP, read_resp(0, 2 * CHUNK, n_crcs=3) + bytes(4),
                             payload_len=2 * CHUNK)
    yield "bad_body_past_max", header(READ, b"", body_len=5000)
    yield "bad_info_string_past_body", frame(INFO_RESP, bytes([60]) + b"10.0.0.1")
    yield "bad_trailing", frame(READ, rd + b"\x00")
    yield "bad_put_index_past_end", frame(PUT_BLOCK, put(index=3), payload_len=8)
    yield "bad_put_payload_past_max", frame(PUT_BLOCK, put(), payload_len=64 * MiB + 4096 + 1)
    yield "bad_put_resp_payload", frame(PUT_RESP, payload_len=1)
    # Bare bodies, no header: the fuzz target hands every input to every body decoder too.
    yield "body_read", rd
    yield "body_put", put(index=0)
    yield "body_info_resp", info_resp(rdma=(b"10.1.1.1:7000",))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus", "fuzz_wire")
    os.makedirs(out, exist_ok=True)
    n = 0
    for name, data in seeds():
        with open(os.path.join(out, "seed_" + name), "wb") as f:
            f.write(data)
        n += 1
    print(f"wrote {n} seeds to {out}")


if __name__ == "__main__":
    main()
