"""A round-robin HTTP load balancer for the end-to-end tests: each request goes to the next
of the given backends, in turn, with no affinity of any kind, and its answer (read whole) is
relayed back. Logs `PORT METHOD PATH STATUS RPC` a line per request to LOG, RPC being the
JSON-RPC method of the body (`-` when there is none) and `+state` when it carries a request
state.

usage: round_robin.py LOG PORT [PORT ...]
Prints `listening PORT` once ready.
"""
import http.client
import json
import itertools
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log_path, ports = sys.argv[1], [int(p) for p in sys.argv[2:]]
turn = itertools.cycle(ports)
lock = threading.Lock()
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def relay(self):
        with lock:
            port = next(turn)
        body = self.rfile.read(int(self.headers.get("content-length", "0") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        rpc = "-"
        try:
            msg = json.loads(body or b"null")
            if isinstance(msg, dict) and "method" in msg:
                rpc = msg["method"] + ("+state" if "requestState" in msg.get("params", {}) else "")
        except ValueError:
            pass
        with lock, open(log_path, "a") as f:
            f.write(f"{port} {self.command} {self.path} {resp.status} {rpc}\n")
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        conn.close()

    do_GET = do_POST = do_DELETE = relay

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("listening", server.server_address[1], flush=True)
server.serve_forever()
