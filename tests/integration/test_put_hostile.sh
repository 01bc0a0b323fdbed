#!/usr/bin/env bash
# Write-through's PUT_BLOCK attacked [W3, S2] (docs/iorpc-protocol.md §3.11): a member with a
# group secret takes one true put of a committed object's block and caches it; crafted puts — a
# payload one byte short or long, a flipped byte, a wrong chunk CRC, a version or size the store
# does not hold, a missing object, another block size, an index past the end — are each refused
# with their status (the stream stays in step: the connection answers a PING after), counted in
# remotecache_put_refused, and cache nothing; a payload_len past the largest block and a put
# without AUTH are closed unanswered; a flood of bad puts from 8 connections is refused whole,
# caches nothing, and the member still serves reads byte-exact.
. "$(dirname "$0")/lib.sh"
export SHOAL_GROUP_TIMEOUT=10s SHOAL_GROUP_HEARTBEAT=200ms
FRAMES="$SRC/tests/integration/frames.py"

STORE=$T/store
make_object "$STORE/good.bin" 100000
make_object "$STORE/bad.bin" 150000
S="file://$STORE"
META="sqlite3://$T/meta.db"
head -c 32 /dev/urandom | base64 >"$T/secret"

start_member m "$S" --meta "$META" --cache-group ph --group-ip 127.0.0.1 --block-size 64K \
  --group-secret-file "$T/secret" --metrics "127.0.0.1:$(free_port)"
wait_members "$META" ph 1
ADDR=127.0.0.1:$(member_port m iorpc)
AM=$(metrics_addr m)
blocks() { find "$T/m.cache" -type f -path '*/blocks/*' | wc -l; }

echo "== one true put, then crafted ones"
python3 "$FRAMES" put "$ADDR" "$T/secret" "$S" 65536 "$STORE" good.bin bad.bin ||
  fail "a crafted put was not refused as it should be"
[ "$(blocks)" -eq 1 ] || fail "the cache holds $(blocks) blocks; only the true put's one belongs"
[ "$(metric "$AM" remotecache_put_serve_blocks)" -eq 1 ] || fail "put_serve_blocks is not 1"
refused=$(metric "$AM" remotecache_put_refused)
[ "$refused" -eq 9 ] || fail "remotecache_put_refused is $refused, want 9"

echo "== the true put is what a reader gets: the block is served from the cache, no store read"
mark=$(log_mark m)
"$SHOAL" cat "$S" good.bin --meta "$META" --cache-group ph --no-sharing --cache-size 0 \
  --block-size 64K --group-secret-file "$T/secret" --log-level error --summary >"$T/good.out" \
  2>"$T/good.sum" || fail "reading good.bin failed"
cmp -s "$T/good.out" "$STORE/good.bin" || fail "good.bin read through the group differs"
# The member's log shows no store GET of block 0 also when the client read it from the store
# itself: the client's own summary says the member served both blocks.
[ "$(summary_field fallbacks "$T/good.sum")" -eq 0 ] || fail "the client fell back: $(cat "$T/good.sum")"
[ "$(summary_field "object store GETs" "$T/good.sum")" -eq 0 ] ||
  fail "the client read good.bin from the store: $(cat "$T/good.sum")"
gets=$(store_gets_since m "$mark" | grep -c '^good.bin 0$' || true)
[ "$gets" -eq 0 ] || fail "block 0 of good.bin was read from the store $gets times"

echo "== a flood of bad puts: all refused, nothing cached, the member still serves"
python3 "$FRAMES" put-flood "$ADDR" "$T/secret" "$S" 65536 "$STORE" bad.bin 8 25 >"$T/flood.out" ||
  fail "put flood: $(cat "$T/flood.out")"
cat "$T/flood.out"
after=$(metric "$AM" remotecache_put_refused)
[ "$after" -eq $((refused + 200)) ] || fail "remotecache_put_refused went $refused -> $after, want +200"
# good.bin's two blocks (the true put's and the one its read filled), nothing of the flood
[ "$(blocks)" -eq 2 ] || fail "the cache holds $(blocks) blocks after the flood, want 2"
"$SHOAL" cat "$S" bad.bin --meta "$META" --cache-group ph --no-sharing --cache-size 0 \
  --block-size 64K --group-secret-file "$T/secret" --log-level error >"$T/bad.out" ||
  fail "reading bad.bin after the flood failed"
cmp -s "$T/bad.out" "$STORE/bad.bin" || fail "bad.bin read through the group differs"
alive "$PID_m" || fail "the member died"
stop_proc m
echo "PASS test_put_hostile"
