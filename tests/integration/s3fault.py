#!/usr/bin/env python3
"""A fault-injecting HTTP front for an S3 server (s3rver in the tests), and an uploader.

  s3fault.py proxy --port-file F --upstream PORT --log LOG --mode-file M [--secret S]
      Listens on a free loopback port (written to F) and forwards every request to
      127.0.0.1:PORT. Before forwarding, it checks the request's SigV4 signature itself when
      --secret is given (s3rver does not check V4 signatures): a request that does not verify is
      answered 403 SignatureDoesNotMatch and logged as SIGFAIL with its canonical request.
      The fault mode is read from M before each request, so a test switches modes without a
      restart. It checks each body against its x-amz-content-sha256 (400
      XAmzContentSHA256Mismatch otherwise), and it plays the parts of S3 that s3rver 3.7 lacks
      for uploads: AbortMultipartUpload (answered 204 and logged "abort recorded"),
      ListMultipartUploads (GET /BUCKET?uploads, from the uploads it saw begin and not end),
      NoSuchUpload for an upload that ended, and If-None-Match: * on PUT and
      CompleteMultipartUpload (412 when the object exists).
      Read modes apply to object GETs (a GET with a Range header); other requests pass:
        pass          forward unchanged
        503pct:N      N% of GETs answered 503 SlowDown (seeded, reproducible)
        503all        every GET answered 503 SlowDown
        short         every GET: full headers, half the body, then the connection is closed
        shortonce     like short, for the first GET of each (path, range) only
        shortcl       every GET: a consistent but short answer (Content-Length says so)
        shortclonce   like shortcl, for the first GET of each (path, range) only
        403           every GET answered 403 AccessDenied
        hang          every GET held without an answer for 60 s
      Write modes apply to uploads:
        part503pct:N  N% of UploadPart requests answered 503 SlowDown (seeded)
        part503once   the first try of each part answered 503 SlowDown
        partcutonce   the first try of each part: half its body read, then the connection cut
        putfail       every PUT (whole object or part) answered 503 SlowDown
        completelostonce  the first CompleteMultipartUpload of each upload is done upstream, but
                      the connection is cut before the answer
        completelostraced  like completelostonce, and before the cut the front itself PUTs an
                      object of the same size and other bytes under the same key upstream (another
                      writer's, landing between the lost answer and the retry)
      One line per request goes to LOG: "METHOD PATH RANGE -> STATUS [fault]".

  s3fault.py put --endpoint URL --bucket B --dir DIR --key K --secret S [--region R]
      Uploads every file under DIR as an object named by its path relative to DIR, signed with
      SigV4, over one keep-alive connection.

  s3fault.py get --endpoint URL --bucket B --key KEY --out FILE --access K --secret S
      Downloads object KEY into FILE (signed) and prints its ETag; exit 3 when there is none.
"""
import argparse
import datetime
import hashlib
import hmac
import http.client
import http.server
import os
import random
import re
import socket
import sys
import threading
import time
import urllib.parse
import xml.sax.saxutils

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def enc(s, safe):
    return urllib.parse.quote(s, safe=safe)


def canonical_request(method, raw_path, raw_query, headers, signed, payload_hash):
    # S3 encodes each path segment once: decode what was sent, encode it by the rules.
    path = enc(urllib.parse.unquote(raw_path), "/~")
    pairs = []
    for part in raw_query.split("&") if raw_query else []:
        k, _, v = part.partition("=")
        pairs.append((enc(urllib.parse.unquote(k), "~"), enc(urllib.parse.unquote(v), "~")))
    pairs.sort()
    cq = "&".join("%s=%s" % kv for kv in pairs)
    ch = "".join("%s:%s\n" % (h, " ".join(headers.get(h, "").strip().split())) for h in signed)
    return "\n".join([method, path, cq, ch, ";".join(signed), payload_hash])


def signing_key(secret, date, region, service):
    k = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


def signature(secret, amz_date, scope, creq):
    date, region, service, _ = scope.split("/")
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                     hashlib.sha256(creq.encode()).hexdigest()])
    return hmac.new(signing_key(secret, date, region, service), sts.encode(),
                    hashlib.sha256).hexdigest()


def verify(secret, method, target, headers):
    """Returns None when the request's SigV4 signature holds, else a reason."""
    auth = headers.get("authorization")
    if not auth:
        return None  # anonymous: the server decides
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "not SigV4"
    fields = {}
    for f in auth[len("AWS4-HMAC-SHA256 "):].split(","):
        k, _, v = f.strip().partition("=")
        fields[k] = v
    try:
        access, scope = fields["Credential"].split("/", 1)
        signed = fields["SignedHeaders"].split(";")
        got = fields["Signature"]
    except (KeyError, ValueError):
        return "malformed Authorization"
    if "host" not in signed:
        return "host not signed"
    for h in headers:
        if h.startswith("x-amz-") and h not in signed:
            return "%s sent but not signed" % h
    amz_date = headers.get("x-amz-date", "")
    try:
        t = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ")
    except ValueError:
        return "bad x-amz-date"
    skew = abs((datetime.datetime.utcnow() - t).total_seconds())
    if skew > 900:
        return "x-amz-date is %d s off" % skew
    if not scope.startswith(amz_date[:8] + "/") or not scope.endswith("/s3/aws4_request"):
        return "bad scope " + scope
    payload = headers.get("x-amz-content-sha256")
    if not payload:
        return "no x-amz-content-sha256"
    path, _, query = target.partition("?")
    creq = canonical_request(method, path, query, headers, signed, payload)
    if not hmac.compare_digest(signature(secret, amz_date, scope, creq), got):
        return "signature mismatch; canonical request:\n" + creq
    return None


def s3_error(code, msg):
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message>'
            "<RequestId>s3fault</RequestId></Error>" % (code, msg)).encode()


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "s3fault"

    def log_message(self, fmt, *args):
        pass

    def log(self, line):
        with self.server.lock:
            self.server.logf.write(line + "\n")
            self.server.logf.flush()

    def mode(self):
        try:
            with open(self.server.mode_file) as f:
                return f.read().strip() or "pass"
        except OSError:
            return "pass"

    def send_plain(self, status, body, extra=()):
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def upstream(self, method, path, headers, body):
        up = http.client.HTTPConnection("127.0.0.1", self.server.upstream, timeout=120)
        up.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for k, v in headers:
            if k.lower() not in ("connection", "keep-alive", "proxy-connection", "expect"):
                up.putheader(k, v)
        up.endheaders(body)
        resp = up.getresponse()
        data = resp.read()
        up.close()
        return resp, data

    def race_put(self, path):
        """Another writer: an object of the same size as the one at PATH, other bytes."""
        key, secret = os.environ.get("AWS_ACCESS_KEY_ID", "S3RVER"), self.server.secret or ""
        region = os.environ.get("AWS_REGION", "us-east-1")
        host = "127.0.0.1:%d" % self.server.upstream
        h = sign_headers("HEAD", host, path, "", EMPTY_SHA256, key, secret, region)
        r, _ = self.upstream("HEAD", path, h.items(), None)
        size = int(r.getheader("Content-Length") or 0)
        data = os.urandom(size)
        h = sign_headers("PUT", host, path, "", hashlib.sha256(data).hexdigest(), key, secret,
                         region)
        h["content-length"] = str(size)
        r, _ = self.upstream("PUT", path, h.items(), data)
        self.log("PUT %s - -> %d raced (%d bytes, another writer)" % (path, r.status, size))

    def cut(self, line, why):
        self.log(line + " -> cut " + why)
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def classify(self, headers):
        """What an upload request is: part, put, complete, initiate, abort, listuploads, or
        None; and its upload id."""
        u = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        uid = q.get("uploadId", [None])[0]
        c = self.command
        if c == "PUT" and uid and "partNumber" in q:
            return "part", uid, q["partNumber"][0]
        if c == "PUT" and not u.query and "x-amz-copy-source" not in headers:
            return "put", None, None
        if c == "POST" and uid:
            return "complete", uid, None
        if c == "POST" and "uploads" in q:
            return "initiate", None, None
        if c == "DELETE" and uid:
            return "abort", uid, None
        if c == "GET" and "uploads" in q:
            return "listuploads", None, None
        return None, uid, None

    def write_fault(self, mode, kind, uid, part):
        if kind not in ("part", "put", "complete"):
            return None
        with self.server.lock:
            if mode == "putfail" and kind in ("part", "put"):
                return "503"
            if (kind == "part") != mode.startswith("part") or \
                    (kind == "complete") != mode.startswith("completelost"):
                return None
            if mode.startswith("part503pct:"):
                if self.server.rand.random() * 100 < float(mode.split(":")[1]):
                    return "503"
                return None
            k = (mode, uid, part)
            if mode in ("part503once", "partcutonce", "completelostonce",
                        "completelostraced") and k not in self.server.seen:
                self.server.seen.add(k)
                return {"part503once": "503", "partcutonce": "cut",
                        "completelostonce": "lost", "completelostraced": "lost"}[mode]
        return None

    def list_uploads(self, bucket):
        with self.server.lock:
            items = sorted(self.server.pending.items())
        body = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListMultipartUploadsResult>',
                "<Bucket>%s</Bucket>" % bucket]
        for uid, key in items:
            if key.startswith(bucket + "/"):
                body.append("<Upload><Key>%s</Key><UploadId>%s</UploadId></Upload>" %
                            (xml.sax.saxutils.escape(key[len(bucket) + 1:]), uid))
        body.append("<IsTruncated>false</IsTruncated></ListMultipartUploadsResult>")
        return "".join(body).encode()

    def forward(self):
        length = int(self.headers.get("Content-Length") or 0)
        headers = {k.lower(): v for k, v in self.headers.items()}
        rng = headers.get("range", "-")
        line = "%s %s %s" % (self.command, self.path, rng)

        if self.server.secret:
            why = verify(self.server.secret, self.command, self.path, headers)
            if why:
                if length:
                    self.rfile.read(length)
                self.log(line + " -> 403 SIGFAIL " + why.replace("\n", "\\n"))
                self.send_plain(403, s3_error("SignatureDoesNotMatch", "s3fault: " +
                                              why.split(";")[0]))
                return

        mode = self.mode()
        kind, uid, part = self.classify(headers)
        wfault = self.write_fault(mode, kind, uid, part)
        if wfault == "cut":
            self.rfile.read(length // 2)
            self.cut(line, "partcut fault")
            return
        body = self.rfile.read(length) if length else None
        want = headers.get("x-amz-content-sha256", "")
        if len(want) == 64 and hashlib.sha256(body or b"").hexdigest() != want.lower():
            self.log(line + " -> 400 payload hash mismatch")
            self.send_plain(400, s3_error("XAmzContentSHA256Mismatch",
                                          "The provided 'x-amz-content-sha256' header does not "
                                          "match what was computed."))
            return
        if wfault == "503":
            self.log(line + " -> 503 fault")
            self.send_plain(503, s3_error("SlowDown", "Please reduce your request rate."))
            return

        path = urllib.parse.urlsplit(self.path).path
        if kind == "listuploads":
            self.log(line + " -> 200 uploads listed")
            self.send_plain(200, self.list_uploads(path.strip("/").split("/")[0]))
            return
        if kind in ("part", "complete", "abort"):
            with self.server.lock:
                ended = uid in self.server.ended
                if kind == "abort" and not ended:
                    self.server.pending.pop(uid, None)
                    self.server.ended.add(uid)
                    self.server.aborted.append(uid)
            if ended:
                self.log(line + " -> 404 NoSuchUpload")
                self.send_plain(404, s3_error("NoSuchUpload", "The specified upload does not "
                                              "exist."))
                return
            if kind == "abort":
                # s3rver 3.7 has no AbortMultipartUpload: the front answers it and remembers.
                self.log(line + " -> 204 abort recorded")
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        if kind in ("put", "complete") and headers.get("if-none-match") == "*":
            # Without the condition itself: s3rver would answer it with 304.
            r, _ = self.upstream("HEAD", path, [(k, v) for k, v in self.headers.items()
                                                if k.lower() not in ("content-length",
                                                                     "content-type",
                                                                     "if-none-match")],
                                 None)
            if r.status == 200:
                self.log(line + " -> 412 exists")
                self.send_plain(412, s3_error("PreconditionFailed", "At least one of the "
                                              "pre-conditions you specified did not hold"))
                return

        mode_read = mode if kind is None else "pass"
        fault = None
        is_get = self.command == "GET" and "range" in headers
        if is_get and mode_read != "pass":
            with self.server.lock:
                if mode_read.startswith("503pct:"):
                    if self.server.rand.random() * 100 < float(mode_read.split(":")[1]):
                        fault = "503"
                elif mode_read in ("shortonce", "shortclonce"):
                    k = (self.path, rng)
                    if k not in self.server.seen:
                        self.server.seen.add(k)
                        fault = mode_read[:-4]
                elif not mode_read.startswith("part") and mode_read not in (
                        "putfail", "completelostonce", "completelostraced"):
                    fault = mode_read
        if fault in ("503", "503all"):
            self.log(line + " -> 503 fault")
            self.send_plain(503, s3_error("SlowDown", "Please reduce your request rate."))
            return
        if fault == "403":
            self.log(line + " -> 403 fault")
            self.send_plain(403, s3_error("AccessDenied", "Access Denied"))
            return
        if fault == "hang":
            self.log(line + " -> hang fault")
            time.sleep(60)
            self.close_connection = True
            return

        # The signature covered the path and headers as sent: they go upstream unchanged.
        resp, data = self.upstream(self.command, self.path, self.headers.items(), body)
        status = resp.status
        if kind == "initiate" and status == 200:
            m = re.search(rb"<UploadId>([^<]+)</UploadId>", data)
            if m:
                with self.server.lock:
                    self.server.pending[m.group(1).decode()] = urllib.parse.unquote(path[1:])
        if kind == "complete" and status == 200:
            with self.server.lock:
                self.server.pending.pop(uid, None)
                self.server.ended.add(uid)
        if wfault == "lost":
            if mode == "completelostraced" and status == 200:
                self.race_put(path)
            self.cut(line, "completelost fault (done upstream: %d)" % status)
            return
        cut = None
        if fault in ("short", "shortcl") and status in (200, 206) and len(data) > 1:
            cut = len(data) // 2
        self.log(line + " -> %d%s" % (status, " " + fault + " fault" if cut is not None else ""))
        self.send_response(status)
        for k, v in resp.getheaders():
            kl = k.lower()
            if kl in ("connection", "keep-alive", "transfer-encoding", "content-length", "date",
                      "server"):
                continue
            self.send_header(k, v)
        if fault == "shortcl" and cut is not None:
            self.send_header("Content-Length", str(cut))
            self.end_headers()
            self.wfile.write(data[:cut])
            return
        if self.command == "HEAD":
            cl = resp.getheader("Content-Length")
            self.send_header("Content-Length", cl if cl is not None else "0")
            self.end_headers()
            return
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if cut is not None:
            self.wfile.write(data[:cut])
            self.wfile.flush()
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        self.wfile.write(data)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = forward


def cmd_proxy(a):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    srv.daemon_threads = True
    srv.upstream = a.upstream
    srv.mode_file = a.mode_file
    srv.secret = a.secret
    srv.lock = threading.Lock()
    srv.logf = open(a.log, "a")
    srv.rand = random.Random(1234)
    srv.seen = set()
    srv.pending = {}  # upload id -> "bucket/key" of multipart uploads begun and not ended
    srv.ended = set()  # upload ids completed or aborted
    srv.aborted = []
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, a.port_file)
    srv.serve_forever()


def sign_headers(method, host, path, query, payload_hash, key, secret, region):
    now = datetime.datetime.utcnow()
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    scope = "%s/%s/s3/aws4_request" % (amz_date[:8], region)
    h = {"host": host, "x-amz-content-sha256": payload_hash, "x-amz-date": amz_date}
    signed = sorted(h)
    creq = canonical_request(method, path, query, h, signed, payload_hash)
    sig = signature(secret, amz_date, scope, creq)
    h["authorization"] = ("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s" %
                          (key, scope, ";".join(signed), sig))
    return h


def cmd_put(a):
    u = urllib.parse.urlsplit(a.endpoint)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    n = 0
    for root, _, files in os.walk(a.dir):
        for name in sorted(files):
            p = os.path.join(root, name)
            key = os.path.relpath(p, a.dir)
            with open(p, "rb") as f:
                data = f.read()
            path = "/%s/%s" % (a.bucket, enc(key, "/~"))
            h = sign_headers("PUT", u.netloc, path, "", hashlib.sha256(data).hexdigest(), a.key,
                             a.secret, a.region)
            conn.request("PUT", path, body=data, headers=h)
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                sys.exit("put %s: HTTP %d" % (key, r.status))
            n += 1
    print("uploaded %d objects" % n)


def cmd_get(a):
    """Downloads one object to a file, signed; exit 3 when it does not exist."""
    u = urllib.parse.urlsplit(a.endpoint)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
    path = "/%s/%s" % (a.bucket, enc(a.key, "/~"))
    h = sign_headers("GET", u.netloc, path, "", EMPTY_SHA256, a.access, a.secret, a.region)
    conn.request("GET", path, headers=h)
    r = conn.getresponse()
    if r.status == 404:
        r.read()
        sys.exit(3)
    if r.status != 200:
        sys.exit("get %s: HTTP %d %s" % (a.key, r.status, r.read()[:200]))
    with open(a.out, "wb") as f:
        while True:
            b = r.read(1 << 20)
            if not b:
                break
            f.write(b)
    print(r.getheader("ETag", "").strip('"'))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("proxy")
    p.add_argument("--port-file", required=True)
    p.add_argument("--upstream", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--mode-file", required=True)
    p.add_argument("--secret")
    p = sub.add_parser("put")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--bucket", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--secret", required=True)
    p.add_argument("--region", default="us-east-1")
    p = sub.add_parser("get")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--bucket", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--access", required=True)
    p.add_argument("--secret", required=True)
    p.add_argument("--region", default="us-east-1")
    a = ap.parse_args()
    {"proxy": cmd_proxy, "put": cmd_put, "get": cmd_get}[a.cmd](a)


if __name__ == "__main__":
    main()
