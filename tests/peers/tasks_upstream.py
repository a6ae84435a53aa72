"""A 2026-07-28 MCP server that runs tasks of its own (SEP-2663, the
`io.modelcontextprotocol/tasks` extension): the tools the conformance suite's `tasks-*`
scenarios call, so that those scenarios can run against it alone and through the gateway,
which passes its tasks through. Written by hand on the standard library (no SDK has a tasks
server for this revision yet): the point is the wire.

Usage: tasks_upstream.py PORT
Tools: greet (sync), slow_compute, failing_job (task required), protocol_error_job,
confirm_delete and multi_input (ask for input inside the task), test_tool_with_task (asks
by MRTR first, then becomes a task; task required).
"""

import json
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

EXT = "io.modelcontextprotocol/tasks"
TTL_MS = 600_000
POLL_MS = 100
OBJ = {"type": "object"}
TOOLS = [
    ("greet", "Says hello (sync)", {"type": "object", "properties": {"name": {"type": "string"}}}),
    ("slow_compute", "Sleeps `seconds`, then answers (a task)",
     {"type": "object", "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}}}),
    ("failing_job", "Fails as a tool after about a second (a task, required)", OBJ),
    ("protocol_error_job", "Ends in a protocol error (a task)", OBJ),
    ("confirm_delete", "Asks for confirmation inside its task", OBJ),
    ("multi_input", "Asks two things at once inside its task", OBJ),
    ("test_tool_with_task", "Asks a name by MRTR, then runs as a task (required)", OBJ),
]
tasks = {}
lock = threading.Lock()


def now():
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def text(t, error=False):
    return {"content": [{"type": "text", "text": t}], "isError": error}


def form(message, prop):
    return {"method": "elicitation/create", "params": {
        "mode": "form", "message": message,
        "requestedSchema": {"type": "object", "properties": {prop: {"type": "string"}}, "required": [prop]}}}


def envelope(t):
    out = {k: t[k] for k in ("taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs")}
    if t["status"] == "input_required":
        out["inputRequests"] = dict(t["inputRequests"])
    if t["status"] == "completed":
        out["result"] = t["result"]
    if t["status"] == "failed":
        out["error"] = t["error"]
        out["statusMessage"] = t["error"]["message"]
    return out


def update(t, **changes):
    with lock:
        if t["status"] in ("completed", "failed", "cancelled"):
            return
        t.update(changes)
        t["lastUpdatedAt"] = now()


def create(work, **state):
    t = {"taskId": str(uuid.uuid4()), "status": "working", "createdAt": now(), "lastUpdatedAt": now(),
         "ttlMs": TTL_MS, "pollIntervalMs": POLL_MS, "inputRequests": {}, "answers": {},
         "wake": threading.Event(), **state}
    with lock:
        tasks[t["taskId"]] = t
    threading.Thread(target=work, args=(t,), daemon=True).start()
    created = {k: v for k, v in envelope(t).items() if k not in ("inputRequests", "result", "error")}
    return {"resultType": "task", **created}


def ask(t, requests):
    """Parks the task on `requests` until every one is answered; returns the answers."""
    update(t, status="input_required", inputRequests=dict(requests))
    while True:
        with lock:
            pending = {k: v for k, v in t["inputRequests"].items() if k not in t["answers"]}
            t["inputRequests"] = pending
            if t["status"] == "cancelled":
                return None
            if not pending:
                t["status"] = "working"
                return {k: t["answers"][k] for k in requests}
        t["wake"].wait(0.05)
        t["wake"].clear()


def slow(seconds, label):
    def work(t):
        end = time.time() + seconds
        while time.time() < end:
            if t["status"] == "cancelled":
                return
            time.sleep(0.02)
        update(t, status="completed", result=text(f"computed {label} after {seconds}s"))
    return work


def failing(t):
    time.sleep(1)
    update(t, status="completed", result=text("the job failed", error=True))


def protocol_error(t):
    time.sleep(0.2)
    update(t, status="failed", error={"code": -32603, "message": "the job crashed"})


def confirm(t):
    got = ask(t, {"confirm-" + t["taskId"][:8]: form("Delete the file?", "confirm")})
    if got is not None:
        answer = list(got.values())[0]
        update(t, status="completed", result=text(f"delete: {answer.get('action')}"))


def multi(t):
    got = ask(t, {"first-" + t["taskId"][:8]: form("First?", "first"),
                  "second-" + t["taskId"][:8]: form("Second?", "second")})
    if got is not None:
        update(t, status="completed", result=text(f"answered {len(got)}"))


def named(user):
    def work(t):
        time.sleep(0.2)
        update(t, status="completed", result=text(f"Hello, {user}! (from the task)"))
    return work


def declared(params):
    caps = (params.get("_meta") or {}).get("io.modelcontextprotocol/clientCapabilities") or {}
    return isinstance((caps.get("extensions") or {}).get(EXT), dict)


def result(rid, value):
    value.setdefault("resultType", "complete")
    return 200, {"jsonrpc": "2.0", "id": rid, "result": value}


def error(rid, code, message, status=200, data=None):
    e = {"code": code, "message": message}
    if data is not None:
        e["data"] = data
    return status, {"jsonrpc": "2.0", "id": rid, "error": e}


def missing(rid):
    return error(rid, -32021, "Missing required client capability", 400,
                 {"requiredCapabilities": {"extensions": {EXT: {}}}})


def call(rid, params):
    name, args = params.get("name"), params.get("arguments") or {}
    ext = declared(params)
    if name == "greet":
        return result(rid, text(f"Hello, {args.get('name', 'World')}!"))
    if name in ("failing_job", "test_tool_with_task") and not ext:
        return missing(rid)
    if name == "slow_compute":
        seconds, label = float(args.get("seconds", 0)), args.get("label", "")
        if not ext:
            time.sleep(seconds)
            return result(rid, text(f"computed {label} after {seconds}s"))
        return result(rid, create(slow(seconds, label)))
    if not ext:
        return missing(rid)
    if name == "failing_job":
        return result(rid, create(failing))
    if name == "protocol_error_job":
        return result(rid, create(protocol_error))
    if name == "confirm_delete":
        return result(rid, create(confirm))
    if name == "multi_input":
        return result(rid, create(multi))
    if name == "test_tool_with_task":
        answer = (params.get("inputResponses") or {}).get("user_name")
        if not isinstance(answer, dict) or params.get("requestState") != "asked-name":
            return result(rid, {"resultType": "input_required",
                                "inputRequests": {"user_name": form("What is your name?", "user_name")},
                                "requestState": "asked-name"})
        content = answer.get("content") or {}
        user = content.get("user_name") or content.get("name") or "?"
        return result(rid, create(named(user)))
    return error(rid, -32602, f"no tool {name}", 400)


def task_method(rid, method, params):
    if method in ("tasks/result", "tasks/list"):
        return error(rid, -32601, f"{method} does not exist in 2026-07-28", 404)
    if not declared(params):
        return missing(rid)
    with lock:
        t = tasks.get(params.get("taskId"))
    if t is None:
        return error(rid, -32602, "Failed to retrieve task: Task not found")
    if method == "tasks/get":
        with lock:
            return result(rid, envelope(t))
    if method == "tasks/cancel":
        update(t, status="cancelled")
        t["wake"].set()
        return result(rid, {})
    if method == "tasks/update":
        responses = params.get("inputResponses")
        if not isinstance(responses, dict):
            return error(rid, -32602, "inputResponses must be an object", 400)
        with lock:
            for k, v in responses.items():
                if k in t["inputRequests"]:
                    t["answers"][k] = v
                    # Answered: no longer asked, from the next tasks/get on.
                    del t["inputRequests"][k]
        t["wake"].set()
        return result(rid, {})
    return error(rid, -32601, f"no method {method}", 404)


def handle(msg, headers):
    rid, method, params = msg.get("id"), msg.get("method"), msg.get("params") or {}
    if headers.get("mcp-method") != method:
        return error(rid, -32020, "Mcp-Method does not match the body", 400)
    key = {"tools/call": "name", "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}.get(method)
    if key and headers.get("mcp-name") != params.get(key):
        return error(rid, -32020, f"Mcp-Name does not match params.{key}", 400)
    if method == "server/discover":
        return result(rid, {"supportedVersions": ["2026-07-28"],
                            "capabilities": {"tools": {}, "extensions": {EXT: {}}},
                            "ttlMs": 0, "cacheScope": "private",
                            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "tasks-upstream", "version": "1"}}})
    if method == "tools/list":
        return result(rid, {"tools": [{"name": n, "description": d, "inputSchema": s} for n, d, s in TOOLS],
                            "ttlMs": 0, "cacheScope": "private"})
    if method == "tools/call":
        return call(rid, params)
    if method and method.startswith("tasks/"):
        return task_method(rid, method, params)
    return error(rid, -32601, f"no method {method}", 404)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        msg = json.loads(body or b"{}")
        if "id" not in msg:
            self.send_response(202)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, reply = handle(msg, headers)
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.send_response(405)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
