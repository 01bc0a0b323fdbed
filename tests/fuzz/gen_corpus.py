#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets other than fuzz_wire (gen_wire_corpus.py has that
one): well-formed inputs of each layout described at the top of each tests/fuzz/fuzz_*.c, and a
few damaged ones. The fuzzer grows the corpora from these; scripts/fuzz.sh merges what it finds
into tests/fuzz/corpus-new/ for review.

usage: tests/fuzz/gen_corpus.py [CORPUS_ROOT]   (default: tests/fuzz/corpus)
Files are named seed_*; files the fuzzer added keep their hash names and are left alone.
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_wire_corpus as w  # noqa: E402  (the frame encoder and CRC32C)

CHUNK = 64 * 1024
MiB = 1024 * 1024
ANSWER_ID = 0x1122334455667788


def u8(v):
    return struct.pack("<B", v)


def u16(v):
    return struct.pack("<H", v)


def u32(v):
    return struct.pack("<I", v & 0xFFFFFFFF)


def u64(v):
    return struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)


def s8(b):
    return u8(len(b)) + b


# ---- fuzz_frames: byte 0 (bit 0 pre-auth, bits 1-7 the cut), then the stream ----

def frames():
    rd = w.read()
    ready = (w.frame(w.READ, rd, msg_id=1, flags=w.WF_FILL) + w.frame(w.PING, b"12345678", msg_id=2)
             + w.frame(w.INFO, msg_id=3) + w.frame(w.CORRUPT, rd, msg_id=0)
             + w.frame(w.READ, w.read(index=2, offset=32 * CHUNK, length=100000), msg_id=4)
             + w.frame(w.GOAWAY, msg_id=0))
    hs = w.frame(w.HELLO, w.hello(2)) + w.frame(w.AUTH, bytes(range(32, 64)), msg_id=2)
    yield "ready_whole", u8(0) + ready
    yield "ready_cut", u8(0x2a) + ready
    yield "ready_bytewise", u8(0xfe) + ready
    yield "preauth_handshake", u8(1) + hs
    yield "preauth_cut", u8(0x11) + hs
    yield "preauth_read_too_big", u8(1) + w.frame(w.READ, rd)
    yield "ends_mid_frame", u8(0) + ready[:-7]
    bad = bytearray(ready)
    bad[len(w.frame(w.READ, rd)) + 40] ^= 1
    yield "second_frame_bad_crc", u8(0x0c) + bytes(bad)
    yield "payload_refused", u8(0) + w.frame(w.READ_RESP, w.read_resp(0, 100), payload_len=100)
    yield "bad_magic_after_one", u8(0) + w.frame(w.PING, b"x") + w.frame(w.PING, magic=b"SHL0")


# ---- fuzz_answer ----

def answer(mode, bs_shift=6, blen=4 * MiB, index=2, off=CHUNK, length=2 * CHUNK, seed=1,
           key=b"dir/obj.bin", version=b"etag-1", sel=0, edits=(), rest=b""):
    b = u8(mode) + u8(bs_shift) + u32(blen - 1) + u32(index) + u32(off) + u32(length - 1)
    b += u64(seed) + s8(key) + s8(version) + u8(sel) + u8(len(edits))
    for pos, x in edits:
        b += u32(pos) + u8(x)
    return b + rest


def answers():
    body_end = 32 + 28 + 8  # READ_RESP header and body for 2 chunks
    yield "read_ok", answer(0)
    yield "read_one_chunk", answer(0, off=0, length=CHUNK)
    yield "read_last_short_chunk", answer(0, blen=100000, off=CHUNK, length=100000 - CHUNK)
    yield "read_small_block", answer(0, bs_shift=0, blen=1000, index=0, off=0, length=1000)
    yield "read_payload_flip", answer(0, edits=[(body_end + 100, 0x40)])
    yield "read_header_flip", answer(0, edits=[(13, 1)])
    yield "read_id_flip_crc_fixed", answer(4, edits=[(32 + 3, 0x80)])
    yield "read_payload_flip_crcs_fixed", answer(8 | 4, edits=[(body_end + 5, 2)])
    yield "read_offset_edit_fixed", answer(4, edits=[(32 + 18, 1)])
    yield "read_rdma_ok", answer(16)
    yield "read_rdma_buffer_flip", answer(16, edits=[(body_end - 2 * CHUNK + 7, 8)])
    yield "read_unaligned", answer(32, off=1000, length=5000)
    yield "error_not_owner", answer(1, sel=2, rest=b"not owner under view 9")
    yield "error_stale_rdma", answer(1 | 16, sel=1, rest=b"stale")
    yield "error_flip", answer(1, sel=4, edits=[(40, 1)], rest=b"busy")
    info = s8(b"10.0.0.1:4000") + s8(b"10.0.0.1:4001") + s8(b"192.168.1.1:5000") + \
        s8(b"192.168.2.1:5001") + s8(b"s3://bucket/prefix")
    yield "info_two_rdma", answer(2, sel=2, rest=info)
    yield "info_flip_fixed", answer(2 | 4, sel=0, edits=[(33, 7)], rest=info)
    raw_err = w.frame(w.ERROR, b"no such key", status=1, msg_id=ANSWER_ID)
    yield "raw_error", answer(3, rest=raw_err)
    yield "raw_wrong_id", answer(3, rest=w.frame(w.ERROR, b"x", status=9, msg_id=5))
    yield "raw_read_resp_short", answer(3, rest=w.frame(w.READ_RESP, w.read_resp(CHUNK, 2 * CHUNK),
                                                        payload_len=2 * CHUNK, msg_id=ANSWER_ID))


# ---- fuzz_http: byte 0 picks the appended tail, then the request head ----

def http():
    yield "get_metrics", b"\x00GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9567\r\n\r\n"
    yield "head_stats", b"\x01HEAD /stats HTTP/1.1\r\nHost: localhost\r\n\r\n"
    yield "format_stats", b"\x02GET /metrics?format=stats HTTP/1.0\r\n\r\n"
    yield "query", b"\x03GET /metrics?name[]=x HTTP/1.1\r\nAccept: */*\r\n\r\n"
    yield "lf_only", b"\x04GET /metrics HTTP/1.1\nHost: x\n\n"
    yield "post", b"\x05POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
    yield "not_found", b"\x06GET /nope HTTP/1.1\r\n\r\n"
    yield "garbage", b"\x07garbage\r\n\r\n"
    yield "no_space", b"\x00GET/metrics HTTP/1.1\r\n\r\n"
    yield "version_cut", b"\x01GET /metrics HTTP/1.\r\n\r\n"
    yield "incomplete", b"\x02GET /metrics HTTP/1.1\r\nHost: x\r\n"


# ---- fuzz_s3 ----

def contents(key, size=5, etag=b'"0123abcd"', lm=b"2026-11-29T18:50:00.123Z"):
    return (b"<Contents><Key>" + key + b"</Key><LastModified>" + lm + b"</LastModified><ETag>" +
            etag + b"</ETag><Size>" + (size if isinstance(size, bytes) else str(size).encode()) +
            b"</Size>"
            b"<StorageClass>STANDARD</StorageClass></Contents>")


def prefix_el(p):
    return b"<CommonPrefixes><Prefix>" + p + b"</Prefix></CommonPrefixes>"


def page(items, truncated=False, token=b"tok123", url=True):
    b = (b'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult '
         b'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bucket</Name><Prefix>data/'
         b'</Prefix><KeyCount>' + str(len(items)).encode() + b"</KeyCount><MaxKeys>1000</MaxKeys>")
    if url:
        b += b"<EncodingType>url</EncodingType>"
    b += b"<IsTruncated>" + (b"true" if truncated else b"false") + b"</IsTruncated>"
    if truncated:
        b += b"<NextContinuationToken>" + token + b"</NextContinuationToken>"
    return b + b"".join(items) + b"</ListBucketResult>"


def s3():
    items = [contents(b"data/a.bin"), contents(b"data/b+c%20d", 123456789),
             contents(b"data/%E2%82%AC.txt", 0, b"&quot;e-1&quot;"), prefix_el(b"data/sub/"),
             contents(b"other/x", 7), contents(b"data/c", 9, b'W/"weak"')]
    yield "list_prefix_data", u8(0) + u8(1) + u8(0) + page(items)
    yield "list_no_prefix", u8(0) + u8(0) + u8(0) + page(items, url=False)
    yield "list_truncated", u8(0) + u8(1) + u8(0) + page(items[:2], truncated=True)
    yield "list_truncated_no_token", u8(0) + u8(1) + u8(0) + page(items[:1], True, token=b"")
    yield "list_stop_after_2", u8(0) + u8(1) + u8(2) + page(items)
    yield "list_empty", u8(0) + u8(2) + u8(0) + b"<ListBucketResult><KeyCount>0</KeyCount>" \
        b"<IsTruncated>false</IsTruncated></ListBucketResult>"
    yield "list_entities", u8(0) + u8(0) + u8(0) + page(
        [contents(b"a&amp;b&#x41;&#66;&lt;&gt;"), prefix_el(b"p&apos;q/")], url=False)
    yield "list_bad_size", u8(0) + u8(0) + u8(0) + page([contents(b"k", b"12x")])
    hdrs = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 206 Partial Content\r\n"
            b"x-amz-request-id: 4442587FB7D0A2F9\r\nContent-Length: 65536\r\n"
            b'ETag: "0123abcd"\r\nLast-Modified: Sun, 29 Nov 2026 18:50:00 GMT\r\n'
            b"Content-Range: bytes 65536-131071/10485760\r\nContent-Type: binary/octet-stream"
            b"\r\n\r\n")
    yield "headers_206", u8(1) + u64(CHUNK) + u16(CHUNK - 1) + hdrs
    yield "headers_200_weak", u8(1) + u64(0) + u16(99) + \
        b"HTTP/2 200\r\ncontent-length: 100\r\netag: W/\"abc\"\r\n\r\n"
    yield "headers_bad", u8(1) + u64(0) + u16(9) + \
        b"HTTP/1.1 206\r\nContent-Length: -5\r\nContent-Range: bytes 5-1/2\r\nETag: \"a b\"\r\n"
    err = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchKey</Code><Message>The '
           b"specified key does not exist.</Message><Key>data/x</Key><RequestId>4442587FB7D0A2F9"
           b"</RequestId></Error>")
    yield "body_404", u8(2) + u16(404) + u8(0) + u16(0) + u8(3) + err
    yield "body_403_token", u8(2) + u16(400) + u8(0) + u16(0) + u8(9) + \
        b"<Error><Code>ExpiredToken</Code><Message>a &lt;b&gt;</Message></Error>"
    yield "body_listing_grow", u8(2) + u16(200) + u8(1) + u16(0) + u8(5) + page(items)
    yield "body_range_fixed", u8(2) + u16(206) + u8(0) + u16(100) + u8(1) + bytes(range(100))
    yield "body_range_overflow", u8(2) + u16(206) + u8(0) + u16(50) + u8(1) + bytes(range(100))
    yield "xml_text", u8(3) + u8(1) + b"a &amp; b &#x41;&#66; &lt;tag&gt; &quot;q&quot; &apos;"
    yield "xml_bad_refs", u8(3) + u8(2) + b"&#0; &#xD800; &#x110000; &bogus; &#; &#x;"
    yield "url_text", u8(4) + u8(1) + b"a%20b+c%2Bd%e2%82%ac"
    yield "url_bad", u8(4) + u8(2) + b"%4t%%zz%"


# ---- fuzz_registry ----

def esc(b):
    out = b""
    for c in b:
        if c in b"%|" or c < 0x20 or c == 0x7F:
            out += b"%%%02X" % c
        else:
            out += bytes([c])
    return out


def record(mid=b"3f2a9c0d11e24b7c8d9e0f1a2b3c4d5e", host=b"node-1", tcp=b"10.0.0.1:4000",
           iorpc=b"10.0.0.1:4001", rdma=(), weight=100, role=0, url=b"s3://bucket/prefix",
           bs=4 * MiB, used=123456, cap=2**64 - 1, beat=42, upd=1764442200000,
           started=1764442100000, extra=b""):
    slots = list(rdma) + [b""] * (4 - len(rdma))
    f = [b"m1", esc(mid), esc(host), esc(tcp), esc(iorpc), str(len(rdma)).encode()]
    f += [esc(s) for s in slots]
    f += [str(weight).encode(), str(role).encode(), esc(url), str(bs).encode(), str(used).encode(),
          str(cap).encode(), str(beat).encode(), str(upd).encode(), str(started).encode()]
    return b"|".join(f) + extra


def resp_bulk(b):
    return b"$" + str(len(b)).encode() + b"\r\n" + b + b"\r\n"


def registry():
    r1 = record()
    r2 = record(mid=b"member-2", host=b"h|o%st\x01", rdma=(b"192.168.1.1:5000",), role=1,
                upd=-5, started=-(2**63))
    yield "decode_plain", u8(0) + r1
    yield "decode_escapes_rdma", u8(0) + r2
    yield "decode_extra_fields", u8(0) + record(extra=b"|future|fields")
    yield "decode_lowercase_escape", u8(0) + record(host=b"a").replace(b"|a|", b"|%7c|")
    yield "decode_bad_tag", u8(0) + b"m2" + r1[2:]
    yield "decode_nul_escape", u8(0) + record(host=b"a").replace(b"|a|", b"|%00|")
    yield "encode_fields", u8(1) + bytes(range(1, 200))

    def pair(mid, rec):
        return s8(mid) + u16(len(rec)) + rec
    yield "pairs", u8(2) + pair(b"3f2a9c0d11e24b7c8d9e0f1a2b3c4d5e", r1) + \
        pair(b"member-2", r2) + pair(b"wrong-id", r1) + pair(b"x", b"garbage")
    hashv = b"*6\r\n" + resp_bulk(b"3f2a9c0d11e24b7c8d9e0f1a2b3c4d5e") + resp_bulk(r1) + \
        resp_bulk(b"member-2") + resp_bulk(r2) + resp_bulk(b"n") + b":5\r\n"
    yield "redis_hash", u8(3) + hashv
    yield "redis_not_hash", u8(3) + b"*1\r\n+OK\r\n"
    yield "redis_error", u8(3) + b"-WRONGTYPE Operation against a key\r\n"
    yield "redis_nested", u8(3) + b"*2\r\n*1\r\n$1\r\na\r\n$-1\r\n"

    def row(flags, mid, rec):
        return u8(flags) + s8(mid) + u16(len(rec)) + rec
    yield "sqlite_rows", u8(4) + row(0, b"3f2a9c0d11e24b7c8d9e0f1a2b3c4d5e", r1) + \
        row(1, b"member-2", r2) + row(0, b"member-2", r2) + row(0x12, b"blob-id", r1) + \
        row(0x40, b"x", b"") + row(0x24, b"y", b"")


# ---- fuzz_cache_hdr ----

def cache_header(bid, length, crcs=None, version=1, magic=b"SHOALBLK"):
    n = (length + CHUNK - 1) // CHUNK
    crcs = crcs if crcs is not None else [(0x9E3779B9 * (i + 1)) & 0xFFFFFFFF for i in range(n)]
    hlen = (48 + 4 * n + 4095) // 4096 * 4096
    fixed = magic + u32(version) + u32(hlen) + bid + u32(length) + u32(CHUNK) + u32(n)
    table = b"".join(u32(c) for c in crcs)
    crc = w.crc32c(table, w.crc32c(fixed))
    h = fixed + u32(crc) + table
    return h + bytes(hlen - len(h))


def cache_hdr():
    bid = bytes(range(0x10, 0x20))
    h = cache_header(bid, 4 * MiB)
    # mode, expected length, id, flip position, flip mask, header
    yield "decode_4mib", u8(0) + u32(4 * MiB) + bid + u32(70) + u8(4) + h
    yield "decode_any_len", u8(0) + u32(0) + bid + u32(3) + u8(0x80) + cache_header(bid, 100000)
    yield "decode_own_id", u8(4) + u32(0) + bytes(16) + u32(44) + u8(1) + cache_header(bid, 1)
    yield "decode_fix_crc", u8(2 | 4) + u32(0) + bytes(16) + u32(0) + u8(1) + \
        cache_header(bid, CHUNK)[:44] + bytes(4) + cache_header(bid, CHUNK)[48:]
    yield "decode_wrong_len", u8(0) + u32(5) + bid + u32(0) + u8(1) + cache_header(bid, 6)
    yield "decode_truncated", u8(0) + u32(0) + bid + u32(0) + u8(1) + h[:4000]
    yield "decode_big", u8(0) + u32(0) + bid + u32(0) + u8(1) + cache_header(bid, 64 * MiB)
    # mode, data length - 1 (mod the maximum), id, flip position, mask, data seed
    yield "encode_two_chunks", u8(1) + u32(2 * CHUNK - 1) + bid + u32(9) + u8(1) + u64(7)
    yield "encode_short", u8(1) + u32(99) + bid + u32(47) + u8(0x10) + u64(1)


# ---- fuzz_cli: parser, parameter, text ----

def cli():
    for name, p, s in [
            ("u64", 0, b"65535"), ("u64_zero", 4, b"0"), ("u64_big", 3, b"18446744073709551615"),
            ("size_4m", 1, b"4M"), ("size_frac", 0, b"1.5GiB"), ("size_neg1", 4, b"-1"),
            ("size_plain_mib", 2, b"100"), ("size_hex", 0, b"0x10K"), ("size_exp", 0, b"1e3"),
            ("dur_hm", 0, b"1h30m"), ("dur_ms", 0, b"100ms"), ("dur_frac", 0, b"1.5s"),
            ("dur_days", 0, b"2d12h"), ("dur_plain", 0, b"30"),
            ("addr_v4", 0, b"127.0.0.1:9567"), ("addr_v6", 0, b"[::1]:80"), ("addr_any", 0, b":0"),
            ("redis_pw", 0, b":secret@localhost:6379/3"), ("redis_user", 0,
                                                             b"user:p%40ss@[::1]:6380/1"),
            ("redis_plain", 0, b"localhost"), ("redis_bad", 0, b":%4t@h/x?y=1"),
            ("s3_bucket", 0, b"bucket/prefix/"), ("s3_endpoint", 1,
                                                   b"bucket\nhttp://127.0.0.1:9000/"),
            ("s3_endpoint_host", 1, b"my.bucket\ns3.eu-west-1.amazonaws.com"),
            ("s3_endpoint_bad", 1, b"bucket\n//"), ("s3_bad_bucket", 0, b"b_"),
            ("volume_file", 6, b"file:///data/"), ("volume_root", 6, b"file:///"),
            ("volume_s3", 0, b"s3://bucket/prefix//"),
            ("level", 0, b"debug"), ("mode", 0, b"splice"),
            ("env_durations", 0, b"1s\n5s\n3s\n30s\n1m\n10s\n2s\n60s\n5\n1000"),
            ("env_bad", 7, b"x\n0\n\n1001"),
            ("env_secret", 0, b"\n\n\n\n\n\n\n\n\n\n0123456789abcdef0123")]:
        mode = {"u64": 0, "siz": 1, "dur": 2, "add": 3, "red": 4, "s3_": 5, "vol": 6,
                "env": 8}.get(name[:3], 7)
        yield name, u8(mode) + u8(p) + s


TARGETS = {
    "fuzz_frames": frames,
    "fuzz_answer": answers,
    "fuzz_http": http,
    "fuzz_s3": s3,
    "fuzz_registry": registry,
    "fuzz_cache_hdr": cache_hdr,
    "fuzz_cli": cli,
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus")
    total = 0
    for target, gen in TARGETS.items():
        out = os.path.join(root, target)
        os.makedirs(out, exist_ok=True)
        for name, data in gen():
            with open(os.path.join(out, "seed_" + name), "wb") as f:
                f.write(data)
            total += 1
    print("wrote %d seeds under %s" % (total, root))


if __name__ == "__main__":
    main()
