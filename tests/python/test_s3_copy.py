"""Copies of objects larger than one CopyObject takes (issue 28): shoal_copy above the
single-copy limit makes a multipart upload whose parts the store copies itself (UploadPartCopy),
so the bytes never pass through the client. The limit is lowered to 5 MiB here
(SHOAL_S3_COPY_MAX_MIB) so that a 12 MiB object takes three parts, against two real S3 servers:
s3rver 3.7.1, which answers UploadPartCopy with 501 NotImplemented (the copy then goes through
the client, GET and PUT, and no upload is left behind), and the maintained fork of s3rver on npm
(@20minutes/s3rver), which implements it."""
import os
import random
import shutil
import subprocess

import pytest

# Read once per process by the library, before the first client: this file is its own process.
os.environ["SHOAL_S3_COPY_MAX_MIB"] = "5"

import shoal  # noqa: E402
from conftest import SRC, free_port, s3rver_ready  # noqa: E402

FORK = "@20minutes/s3rver@5.0.0"
MIB = 1 << 20


@pytest.fixture
def s3rver_fork(harness):
    """The fork of s3rver that has UploadPartCopy (installed from npm into .deps on first use,
    as tests/integration/lib.sh installs s3rver); yields (endpoint, bucket)."""
    prefix = os.path.join(SRC, ".deps", "s3rver-fork")
    mod = os.path.join(prefix, "node_modules", "@20minutes", "s3rver")
    if not shutil.which("node"):
        pytest.fail("node is not installed (scripts/setup.sh installs it)")
    if not os.path.exists(os.path.join(mod, "package.json")):
        r = subprocess.run(["npm", "install", "--prefix", prefix, "--no-audit", "--no-fund",
                            FORK], capture_output=True, text=True)
        if r.returncode:
            pytest.fail("npm install %s: %s" % (FORK, r.stderr[-600:]))
    bucket = "shoal-copy"
    port = free_port()
    data = os.path.join(harness.tmp, "fork.data")
    os.makedirs(data)
    script = os.path.join(harness.tmp, "fork.js")
    with open(script, "w") as f:
        f.write("const S3rver = require(%r);\n"
                "new S3rver({port: %d, address: '127.0.0.1', directory: %r, silent: true,\n"
                "  configureBuckets: [{name: %r}]}).run();\n" % (mod, port, data, bucket))
    harness.start("s3rver-fork", ["node", "--openssl-legacy-provider", script], check_exit=False)
    endpoint = s3rver_ready("s3rver fork", port, bucket)
    yield endpoint, bucket


def _copy_and_check(c, data, gets_expected):
    """Copies big.bin to copy.bin; the GETs the copy made must be GETS_EXPECTED (0 or more)."""
    with c.open("big.bin", "wb") as f:
        f.write(data)
    gets = shoal.counter("object_get_requests")
    c.copy("big.bin", "copy.bin")
    made = shoal.counter("object_get_requests") - gets
    assert gets_expected(made), "the copy made %d GETs" % made
    st = c.stat("copy.bin")
    assert st.size == len(data)
    assert c.read("copy.bin") == data
    # Replacing an existing copy needs overwrite, in parts as in one request.
    with pytest.raises(FileExistsError):
        c.copy("big.bin", "copy.bin")
    c.copy("big.bin", "copy.bin", overwrite=True)
    assert c.read("copy.bin") == data


def test_large_copy_is_made_by_the_store_in_parts(harness, s3rver_fork):
    """12 MiB + 3 bytes over a 5 MiB limit: three parts copied by the store (UploadPartCopy,
    the last one short), no GET by the client; a small object still goes in one CopyObject."""
    endpoint, bucket = s3rver_fork
    data = random.Random(28).randbytes(12 * MIB + 3)
    log = os.path.join(harness.tmp, "client.log")
    with shoal.Client("s3://" + bucket, endpoint=endpoint, cache_size=0, log_file=log,
                      log_level="info") as c:
        _copy_and_check(c, data, lambda n: n == 0)
        with open(log) as f:
            assert "copied big.bin to copy.bin in 3 parts of 5 MiB" in f.read()
        small = random.Random(29).randbytes(MIB)
        with c.open("small.bin", "wb") as f:
            f.write(small)
        gets = shoal.counter("object_get_requests")
        c.copy("small.bin", "small2.bin")
        assert shoal.counter("object_get_requests") == gets
        assert c.read("small2.bin") == small


def test_large_copy_where_the_store_has_no_part_copy(harness, s3rver):
    """s3rver 3.7.1 answers UploadPartCopy with 501: the multipart upload is aborted (s3rver
    3.7.1 has no AbortMultipartUpload either: that is logged) and the bytes are copied through
    the client instead (GETs), with the same result."""
    endpoint, bucket, _ = s3rver
    data = random.Random(30).randbytes(12 * MIB + 3)
    with shoal.Client("s3://" + bucket, endpoint=endpoint, cache_size=0) as c:
        _copy_and_check(c, data, lambda n: n > 0)
        # The aborted upload left no object and no listing entry behind.
        assert sorted(e.key for e in c.list("")) == ["big.bin", "copy.bin"]
