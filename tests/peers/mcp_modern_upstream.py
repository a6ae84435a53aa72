"""A 2026-07-28-only MCP server for the gateway's tests: it refuses `initialize`, answers
`server/discover`, and its one tool asks for input the stateless way (an `input_required`
result with a form elicitation and a `requestState`), finishing on the retry that carries
the answer. Written by hand on the standard library: the point is the wire, not an SDK.

Usage: mcp_modern_upstream.py PORT
Tools: `deploy` (asks which environment, then deploys there), `count` (the calls it saw).
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCHEMA = {
    "type": "object",
    "properties": {"environment": {"type": "string", "enum": ["staging", "production"]}},
    "required": ["environment"],
}
seen = []


def result(rid, value):
    return {"jsonrpc": "2.0", "id": rid, "result": value}


def handle(msg):
    rid, method, params = msg.get("id"), msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        return 400, {"jsonrpc": "2.0", "id": rid, "error": {"code": -32600, "message": "2026-07-28 only"}}
    if method == "server/discover":
        return 200, result(rid, {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                                 "serverInfo": {"name": "modern-only", "version": "1"}, "resultType": "complete"})
    if method == "tools/list":
        return 200, result(rid, {"tools": [
            {"name": "deploy", "description": "Deploys; asks which environment",
             "inputSchema": {"type": "object", "properties": {"service": {"type": "string"}}}},
            {"name": "count", "description": "Calls seen", "inputSchema": {"type": "object"}},
        ], "resultType": "complete"})
    if method == "tools/call":
        name, args = params.get("name"), params.get("arguments") or {}
        if name == "count":
            return 200, result(rid, {"content": [{"type": "text", "text": json.dumps(seen)}],
                                     "structuredContent": {"seen": seen}, "resultType": "complete"})
        seen.append({"arguments": args, "inputResponses": params.get("inputResponses"),
                     "requestState": params.get("requestState")})
        answer = (params.get("inputResponses") or {}).get("env")
        state = params.get("requestState")
        if answer is None or state != f"asked:{args.get('service')}":
            return 200, result(rid, {
                "resultType": "input_required",
                "inputRequests": {"env": {"method": "elicitation/create", "params": {
                    "mode": "form", "message": "which environment?", "requestedSchema": SCHEMA}}},
                "requestState": f"asked:{args.get('service')}",
            })
        env = (answer.get("content") or {}).get("environment")
        done = {"deployed": answer.get("action") == "accept", "service": args.get("service"), "environment": env}
        return 200, result(rid, {"content": [{"type": "text", "text": json.dumps(done)}],
                                 "structuredContent": done, "resultType": "complete"})
    if "id" not in msg:
        return 202, None
    return 200, {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no {method}"}}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        status, answer = handle(json.loads(body))
        data = json.dumps(answer).encode() if answer is not None else b""
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
