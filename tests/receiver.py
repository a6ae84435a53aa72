"""A webhook receiver for end-to-end tests: a real HTTP server that verifies every delivery
with the reference Standard Webhooks library and logs it as one JSON line.

usage: receiver.py SECRET MODE LOG
MODE: ok | fail:K (first K answers 503) | retry_after:K:S (first K answers 429, Retry-After S)
      | gone:K (first K answers 410) | approve | decline
Prints `listening PORT` once ready.
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook

secret, mode, log_path = sys.argv[1], sys.argv[2], sys.argv[3]
webhook = Webhook(secret)
lock = threading.Lock()
count = {"n": 0}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            webhook.verify(body, headers)
            valid = True
        except Exception as e:  # noqa: BLE001 - any failure is recorded
            valid = str(e) or type(e).__name__
        with lock:
            count["n"] += 1
            n = count["n"]
            record = {"n": n, "at": time.time(), "id": headers.get("webhook-id"), "valid": valid,
                      "body": json.loads(body or b"null")}
            with open(log_path, "a") as f:
                f.write(json.dumps(record) + "\n")
        kind, _, arg = mode.partition(":")
        status, reply, extra = 200, {}, {}
        if kind == "fail" and n <= int(arg):
            status = 503
        elif kind == "retry_after":
            k, s = arg.split(":")
            if n <= int(k):
                status, extra = 429, {"Retry-After": s}
        elif kind == "gone" and n <= int(arg):
            status = 410
        elif kind == "approve":
            reply = {"decision": "approve", "reason": "approved by the test receiver"}
        elif kind == "decline":
            reply = {"decision": "decline", "reason": "declined by the test receiver"}
        data = json.dumps(reply).encode()
        self.send_response(status)
        for k, v in extra.items():
            self.send_header(k, v)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("listening", server.server_address[1], flush=True)
server.serve_forever()
