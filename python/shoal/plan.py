"""Access plans (Client.plan): tell shoal the order in which the job will read.

    plan = client.plan((key, off, 1 << 20) for key, off in order)   # a generator is fine
    for key, off in order:
        record = plan.read(key, off, 1 << 20)        # already in memory, mostly
    plan.close()

While the job reads, libshoal fetches ahead in plan order within a window of its read buffers
(docs/python.md, "Access plans"). Items are taken from the iterable as the plan's queue drains
(at most 4096 ahead), so a plan of millions of records is never materialised.
"""

import ctypes
import errno
import os

from . import _lib
from ._lib import lib

__all__ = ["Plan"]

PLAN_TO_END = (1 << 64) - 1


class _PlanStats(ctypes.Structure):
    """struct shoal_plan_stats."""
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "hits", "misses", "offplan", "prefetched", "unused", "window_bytes", "window_max",
        "queued")] + [("reserved", ctypes.c_uint64 * 8)]


# The prototypes of the plan functions (include/shoal/shoal.h, "access plans"), kept here
# beside their only user.
_c = ctypes
for _name, (_res, _args) in {
    "shoal_plan_create": (_c.c_void_p, [_c.c_void_p, _c.c_uint64, _c.c_uint]),
    "shoal_plan_add": (_c.c_int, [_c.c_void_p, _c.c_char_p, _c.c_uint64, _c.c_uint64]),
    "shoal_plan_pread": (_c.c_ssize_t, [_c.c_void_p, _c.c_char_p, _c.c_void_p, _c.c_size_t,
                                        _c.c_uint64]),
    "shoal_plan_stats": (_c.c_int, [_c.c_void_p, _c.POINTER(_PlanStats)]),
    "shoal_plan_destroy": (None, [_c.c_void_p]),
}.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args


def _item(it):
    """(key bytes, offset, length) of one plan item: a key, or (key, offset, length)."""
    from . import _key
    if isinstance(it, (str, bytes)):
        return _key(it), 0, PLAN_TO_END
    try:
        key, off, length = it
    except (TypeError, ValueError):
        raise TypeError("a plan item is a key or (key, offset, length), not %r" % (it,)) from None
    if off < 0 or (length is not None and length <= 0):
        raise ValueError("plan item %r: offset must be >= 0 and length > 0 (or None)" % (it,))
    return _key(key), int(off), PLAN_TO_END if length is None else int(length)


class Plan:
    """A plan of CLIENT over ITEMS (an iterable of keys or (key, offset, length), in read
    order; length None: to the end of the object). window: buffer bytes for blocks fetched
    ahead (default half of the client's buffer_size); inflight: fetches at once (default 8).

    read()/readinto() of the next items are served from memory once their fetch landed; reads
    of anything else work as Client.read does. A key that does not exist raises
    FileNotFoundError at the read of its item, not before. A plan belongs to the process that
    made it: make it in the DataLoader worker (shoal.torch does). Use one thread per plan, or
    make the reads in (roughly) plan order from several."""

    def __init__(self, client, items, window=None, inflight=None):
        self._p = None
        self._client = client  # keeps the client alive
        p = lib.shoal_plan_create(client._handle(), int(window or 0), int(inflight or 0))
        if not p:
            raise _lib.null_error("settings")  # EINVAL (a window too large): ValueError
        self._p = p
        self._pid = os.getpid()
        self._items = iter(items)
        self._next = None
        self._fill()

    def _handle(self):
        if not self._p:
            raise ValueError("I/O operation on a closed shoal.Plan")
        return self._p

    def _fill(self):
        """Appends items until the plan's queue is full or the iterable ends."""
        if self._items is None:
            return
        p = self._handle()
        while True:
            if self._next is None:
                try:
                    self._next = _item(next(self._items))
                except StopIteration:
                    self._items = None
                    return
            rc = lib.shoal_plan_add(p, *self._next)
            if rc == -errno.EAGAIN:
                return
            if rc:
                raise _lib.error(rc)
            self._next = None

    def readinto(self, key, offset, buffer):
        """Reads KEY from OFFSET into BUFFER (any writable contiguous buffer); returns the bytes
        read, fewer than the buffer only at the end of the object."""
        from . import _key, _writable_view
        if offset < 0:
            raise ValueError("negative offset")
        addr, n, keep = _writable_view(buffer)
        got = lib.shoal_plan_pread(self._handle(), _key(key), addr, n, offset)
        del keep
        if got < 0:
            raise _lib.error(got)
        self._fill()
        return got

    def read(self, key, offset=0, length=None):
        """LENGTH bytes of KEY from OFFSET (to the end when None: one stat more) as bytes."""
        if offset < 0:
            raise ValueError("negative offset")
        if length is None:
            length = max(0, self._client.stat(key).size - offset)
        buf = bytearray(length)
        got = self.readinto(key, offset, buf) if length else 0
        del buf[got:]
        return bytes(buf)

    def stats(self):
        """What this plan did: hits, misses (reads before their fetch landed), offplan,
        prefetched and unused bytes, window_bytes (held now), window_max, queued items."""
        st = _PlanStats()
        rc = lib.shoal_plan_stats(self._handle(), ctypes.byref(st))
        if rc:
            raise _lib.error(rc)
        return {name: getattr(st, name) for name, _ in _PlanStats._fields_
                if name != "reserved"}

    def close(self):
        """Stops fetching and gives the window back."""
        p, self._p = self._p, None
        self._items = None
        if p and self._pid == os.getpid():
            lib.shoal_plan_destroy(p)

    @property
    def closed(self):
        return not self._p

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 — nothing can be raised from a finaliser
            pass

    def __reduce__(self):
        raise TypeError("a shoal.Plan cannot be pickled: make the plan in the process that "
                        "reads")
