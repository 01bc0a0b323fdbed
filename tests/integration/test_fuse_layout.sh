#!/usr/bin/env bash
# The seed's fio benchmark on a writable mount [W1] (docs/writes.md): fio lays its files out
# through the mount (open O_TRUNC, fallocate, ftruncate to the size, then sequential writes, fsync)
# and reads them back; the store then holds its 4 files of 64 MiB, byte for byte what a second
# mount reads. ftruncate and fallocate that extend a file being written read as zeros; cutting
# one below what was written abandons it; a dd killed mid-file leaves no object; a rerun works.
. "$(dirname "$0")/lib.sh"
need_fuse
command -v fio >/dev/null || skip "no fio"

STORE=$T/store
mkdir -p "$STORE"
S="file://$STORE"
MNT=$T/mnt
PY=/usr/bin/python3
start_mount w "$S" "$MNT"

# The seed's command (RDMA document), smaller: --size=64M --runtime=5 --numjobs=4, --direct=1.
seed_fio() {
  timeout 300 fio --name=rdma_read_test --directory="$MNT" --rw=read --ioengine=libaio --bs=1M \
    --size=64M --direct=1 --thread --group_report --time_based --runtime=5 --numjobs=4 \
    --iodepth=1 >"$T/$1.out" 2>&1 || fail "fio ($1) failed: $(grep -m 3 -iE 'err|fio:' "$T/$1.out")"
  grep -q "err= 0" "$T/$1.out" || fail "fio ($1) reported an error"
  grep -E "READ:" "$T/$1.out" | sed 's/^ */  /'
}

echo "== the seed's fio command on a fresh writable mount"
seed_fio fio1
n=$(find "$STORE" -name 'rdma_read_test.*' -size $((64 << 20))c | wc -l)
[ "$n" -eq 4 ] || fail "the store holds $n files of 64 MiB, want 4: $(ls -l "$STORE")"
[ "$(find "$STORE" -type f | wc -l)" -eq 4 ] || fail "other files in the store: $(ls -la "$STORE")"
[ "$(stats_field "$MNT" fuse_write_files)" -eq 4 ] || fail "the mount did not commit 4 files"

echo "== a second mount reads the bytes back exact"
start_mount r "$S" "$T/mnt2" --read-only
for f in "$STORE"/rdma_read_test.*; do
  cmp "$f" "$T/mnt2/$(basename "$f")" || fail "$(basename "$f") differs through a second mount"
done
stop_mount r "$T/mnt2"

echo "== a rerun uses the files fio laid out"
seed_fio fio2
[ "$(stats_field "$MNT" fuse_write_files)" -eq 4 ] || fail "the rerun wrote files again"

echo "== extensions read as zeros; a cut below what was written abandons the file"
$PY - "$MNT" <<'PY' || fail "extending files being written failed"
import os, sys
M = sys.argv[1]
fd = os.open(M + "/ext.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
os.ftruncate(fd, 0)                  # truncate to 0 before the first write
os.ftruncate(fd, 3 << 20)            # extend: zeros
assert os.fstat(fd).st_size == 3 << 20, os.fstat(fd).st_size
os.write(fd, b"a" * 1000)            # at 0
os.pwrite(fd, b"b" * 10, 2 << 20)    # in the extension: the gap goes as zeros first
os.close(fd)
fd = os.open(M + "/falloc.bin", os.O_WRONLY | os.O_CREAT)
os.posix_fallocate(fd, 0, 100000)    # fallocate(mode 0): extends
os.close(fd)
fd = os.open(M + "/cut.bin", os.O_WRONLY | os.O_CREAT)
os.write(fd, b"c" * 5000)
try:
    os.ftruncate(fd, 100)
    sys.exit("a cut below what was written was accepted")
except PermissionError:
    pass
try:
    os.close(fd)
except OSError:
    pass
PY
$PY - "$STORE" <<'PY' || fail "the extended objects are wrong"
import sys
S = sys.argv[1]
d = open(S + "/ext.bin", "rb").read()
want = b"a" * 1000 + bytes((2 << 20) - 1000) + b"b" * 10 + bytes((1 << 20) - 10)
assert d == want, "ext.bin: %d bytes, not the written bytes and zeros" % len(d)
assert open(S + "/falloc.bin", "rb").read() == bytes(100000), "falloc.bin is not 100000 zeros"
PY
[ ! -e "$STORE/cut.bin" ] || fail "a file cut below what was written reached the store"
cmp "$STORE/ext.bin" "$MNT/ext.bin" || fail "ext.bin reads differently through the mount"

echo "== a dd killed mid-file leaves no object (not even 0 bytes); a rerun works"
dd if=/dev/zero of="$MNT/dd.bin" bs=1M count=100000 status=none 2>"$T/dd.err" &
track dd $! helper
into_file() { [ "$(stat -c %s "$MNT/dd.bin" 2>/dev/null || echo 0)" -ge $((8 << 20)) ]; }
wait_until 60 into_file || fail "dd did not get 8 MiB into the file"
kill9 dd
wait_log "$T/w.log" "dd.bin abandoned after [0-9]+ bytes: the writer was killed by signal 9"
[ ! -e "$STORE/dd.bin" ] || fail "a killed dd left an object"
dd if=/dev/zero of="$MNT/dd.bin" bs=1M count=2 status=none || fail "the rerun of dd failed"
[ "$(stat -c %s "$STORE/dd.bin")" -eq $((2 << 20)) ] || fail "the rerun of dd left the wrong size"
[ -z "$(find "$STORE" -name '.shoal-upload-*')" ] || fail "hidden upload files left in the store"
stop_mount w "$MNT"
echo "PASS test_fuse_layout"
