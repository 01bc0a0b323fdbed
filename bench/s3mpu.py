#!/usr/bin/env python3
"""A direct multipart upload of one file to an S3 endpoint: the peer that bench/write.sh puts
shoal's mount against. Parts of --part-size, --inflight of them at once (threads, one keep-alive
connection each), each signed with SigV4 over its SHA-256 as shoal signs them; a file smaller than
one part goes up in one PUT.

  s3mpu.py --endpoint URL --bucket B --key K --file F [--part-size 16M] [--inflight 4]
"""
import argparse
import hashlib
import http.client
import os
import queue
import re
import sys
import threading
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import s3fault  # noqa: E402  (its SigV4 signer)


def size_arg(s):
    m = re.fullmatch(r"(\d+)([KMG]?)", s)
    if not m:
        raise argparse.ArgumentTypeError("expected a size like 16M")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


class Client:
    def __init__(self, a):
        self.a = a
        self.u = urllib.parse.urlsplit(a.endpoint)
        self.conn = http.client.HTTPConnection(self.u.hostname, self.u.port, timeout=300)

    def request(self, method, key, query, body=b""):
        path = "/%s/%s" % (self.a.bucket, s3fault.enc(key, "/~"))
        h = s3fault.sign_headers(method, self.u.netloc, path, query,
                                 hashlib.sha256(body).hexdigest(), self.a.access, self.a.secret,
                                 self.a.region)
        self.conn.request(method, path + ("?" + query if query else ""), body=body, headers=h)
        r = self.conn.getresponse()
        data = r.read()
        if r.status != 200:
            sys.exit("%s %s?%s: HTTP %d %s" % (method, key, query, r.status, data[:200]))
        return r, data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--file", required=True)
    ap.add_argument("--part-size", type=size_arg, default=16 << 20)
    ap.add_argument("--inflight", type=int, default=4)
    ap.add_argument("--access", default=os.environ.get("AWS_ACCESS_KEY_ID", ""))
    ap.add_argument("--secret", default=os.environ.get("AWS_SECRET_ACCESS_KEY", ""))
    ap.add_argument("--region", default=os.environ.get("AWS_REGION", "us-east-1"))
    a = ap.parse_args()
    size = os.path.getsize(a.file)
    main_client = Client(a)
    f = open(a.file, "rb")
    if size < a.part_size:
        main_client.request("PUT", a.key, "", f.read())
        return
    _, data = main_client.request("POST", a.key, "uploads=")
    uid = re.search(rb"<UploadId>([^<]+)</UploadId>", data).group(1).decode()
    nparts = (size + a.part_size - 1) // a.part_size
    etags = [None] * nparts
    work = queue.Queue(maxsize=a.inflight)  # the reader waits while the senders are busy

    def sender():
        c = Client(a)
        while True:
            item = work.get()
            if item is None:
                return
            num, body = item
            q = "partNumber=%d&uploadId=%s" % (num, urllib.parse.quote(uid, safe="~"))
            r, _ = c.request("PUT", a.key, q, body)
            etags[num - 1] = r.getheader("ETag")

    threads = [threading.Thread(target=sender) for _ in range(a.inflight)]
    for t in threads:
        t.start()
    for num in range(1, nparts + 1):
        work.put((num, f.read(a.part_size)))
    for _ in threads:
        work.put(None)
    for t in threads:
        t.join()
    xml = "<CompleteMultipartUpload>%s</CompleteMultipartUpload>" % "".join(
        "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>" % (i + 1, e)
        for i, e in enumerate(etags))
    # A fresh connection: the first sat idle past the server's keep-alive while parts went up.
    Client(a).request("POST", a.key, "uploadId=" + urllib.parse.quote(uid, safe="~"),
                      xml.encode())


if __name__ == "__main__":
    main()
