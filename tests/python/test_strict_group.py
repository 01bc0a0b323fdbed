"""A cache group that cannot share (issue 27): a library client of a registry that does not exist,
or of a group with no live member that shares, opens with one warning in its log and reads from
the store; with strict_group=True the open fails with that reason instead."""
import pytest

import shoal


def test_a_group_that_cannot_share_warns_or_fails(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "k").write_bytes(b"hello")
    storage = "file://%s" % store
    meta = "sqlite3://%s/meta.db" % tmp_path
    log = tmp_path / "lib.log"
    with shoal.Client(storage, meta=meta, cache_group="nosuch", log_file=str(log)) as c:
        assert c.read("k") == b"hello"
    text = log.read_text()
    assert "<WARNING>: group: cache group nosuch: the registry %s did not exist" % meta in text, text
    with shoal.Client(storage, meta=meta, cache_group="nosuch", log_file=str(log)) as c:
        assert c.read("k") == b"hello"
    assert "cache group nosuch: no live member that shares its cache" in log.read_text()
    with pytest.raises(OSError) as e:
        shoal.Client(storage, meta=meta, cache_group="nosuch", strict_group=True)
    assert "no live member that shares its cache" in str(e.value), e.value
    assert "strict-group" in str(e.value), e.value
    with pytest.raises(ValueError):
        shoal.Client(storage, meta=meta, cache_group="nosuch", strict_group="maybe")
