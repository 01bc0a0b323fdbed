#!/usr/bin/env bash
# Writes through the mount into a full file:// store [W1] (docs/writes.md, "Failure behaviour"):
# a write is answered once the mount has taken its bytes, before they are in the store's file
# (issue 31), so the disk filling up under a `cp` reaches the application at a later write
# (ENOSPC) or at the close (EIO), never as a success: no object appears, no hidden file is left,
# the name goes, and the next file that fits is written whole.
. "$(dirname "$0")/lib.sh"
need_fuse
SMALL=$T/small
mkdir -p "$SMALL"
mount -t tmpfs -o size=8m tmpfs "$SMALL" || skip "cannot mount a tmpfs"
AT_EXIT+=("umount -l '$SMALL'")
MNT=$T/mnt
start_mount w "file://$SMALL" "$MNT" --cache-size 0

# write_file NAME MIB — NAME written through the mount in 1 MiB writes, then closed; prints OK or
# where it failed and the errno's name.
write_file() {
  /usr/bin/python3 - "$MNT/$1" "$2" <<'PY'
import errno, os, sys
chunk = os.urandom(1 << 20)
step = "open"
try:
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    for i in range(int(sys.argv[2])):
        step = "write"
        os.write(fd, chunk)
    step = "close"
    os.close(fd)
    print("OK")
except OSError as e:
    print(step, errno.errorcode.get(e.errno, str(e.errno)))
PY
}

echo "== 32 MiB into a store of 8 MiB"
got=$(write_file big 32)
echo "  $got"
case "$got" in
"write ENOSPC" | "close EIO") ;;
*) fail "a write into a full store ended with '$got' (want a write's ENOSPC or the close's EIO)" ;;
esac
[ ! -e "$SMALL/big" ] || fail "part of the file reached the store"
left=$(find "$SMALL" -name '.shoal-upload-*' | head -n 3)
[ -z "$left" ] || fail "hidden upload files left: $left"
[ ! -e "$MNT/big" ] || fail "the abandoned name still shows in the mount"
[ "$(stats_field "$MNT" fuse_write_errors)" -ge 1 ] || fail "the failed upload was not counted"

echo "== then a file that fits is written whole"
got=$(write_file small 2)
[ "$got" = OK ] || fail "writing 2 MiB after the failure: $got"
[ "$(stat -c %s "$SMALL/small")" -eq $((2 << 20)) ] || fail "the 2 MiB file is not whole in the store"
stop_mount w "$MNT"
echo "PASS test_write_full"
