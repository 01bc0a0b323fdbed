#!/usr/bin/env python3
"""A fault-injecting HTTP front for an S3 server (s3rver in the tests), and an uploader.

  s3fault.py proxy --port-file F --upstream PORT --log LOG --mode-file M [--secret S]
      Listens on a free loopback port (written to F) and forwards every request to
      127.0.0.1:PORT. Before forwarding, it checks the request's SigV4 signature itself when
      --secret is given (s3rver does not check V4 signatures): a request that does not verify is
      answered 403 SignatureDoesNotMatch and logged as SIGFAIL with its canonical request.
      The fault mode is read from M before each request, so a test switches modes without a
      restart. Modes apply to object GETs (a GET with a Range header); other requests pass:
        pass          forward unchanged
        503pct:N      N% of GETs answered 503 SlowDown (seeded, reproducible)
        503all        every GET answered 503 SlowDown
        short         every GET: full headers, half the body, then the connection is closed
        shortonce     like short, for the first GET of each (path, range) only
        shortcl       every GET: a consistent but short answer (Content-Length says so)
        shortclonce   like shortcl, for the first GET of each (path, range) only
        403           every GET answered 403 AccessDenied
        hang          every GET held without an answer for 60 s
      One line per request goes to LOG: "METHOD PATH RANGE -> STATUS [fault]".

  s3fault.py put --endpoint URL --bucket B --dir DIR --key K --secret S [--region R]
      Uploads every file under DIR as an object named by its path relative to DIR, signed with
      SigV4, over one keep-alive connection.
"""
import argparse
import datetime
import hashlib
import hmac
import http.client
import http.server
import os
import random
import socket
import sys
import threading
import time
import urllib.parse

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

    def forward(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k.lower(): v for k, v in self.headers.items()}
        rng = headers.get("range", "-")
        line = "%s %s %s" % (self.command, self.path, rng)

        if self.server.secret:
            why = verify(self.server.secret, self.command, self.path, headers)
            if why:
                self.log(line + " -> 403 SIGFAIL " + why.replace("\n", "\\n"))
                self.send_plain(403, s3_error("SignatureDoesNotMatch", "s3fault: " +
                                              why.split(";")[0]))
                return

        mode = self.mode()
        fault = None
        is_get = self.command == "GET" and "range" in headers
        if is_get and mode != "pass":
            with self.server.lock:
                if mode.startswith("503pct:"):
                    if self.server.rand.random() * 100 < float(mode.split(":")[1]):
                        fault = "503"
                elif mode in ("shortonce", "shortclonce"):
                    k = (self.path, rng)
                    if k not in self.server.seen:
                        self.server.seen.add(k)
                        fault = mode[:-4]
                else:
                    fault = mode
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

        up = http.client.HTTPConnection("127.0.0.1", self.server.upstream, timeout=60)
        up.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for k, v in self.headers.items():
            if k.lower() not in ("connection", "keep-alive", "proxy-connection"):
                up.putheader(k, v)
        up.endheaders(body)
        resp = up.getresponse()
        data = resp.read()
        up.close()
        status = resp.status
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
    a = ap.parse_args()
    {"proxy": cmd_proxy, "put": cmd_put}[a.cmd](a)


if __name__ == "__main__":
    main()
