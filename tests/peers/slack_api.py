"""A stand-in for Slack, both ways, for the Slack tests (there is no Slack emulator).

As Slack's Web API (under /api/), it answers the four methods airlock calls as Slack documents
them: `chat.postMessage`, `chat.update`, `chat.postEphemeral` and `views.open`. A request needs
`Authorization: Bearer <SLACK_BOT_TOKEN>` (else `not_authed` / `invalid_auth`) and a JSON body;
failures are HTTP 200 with `{"ok": false, "error": …}` (`channel_not_found`, `not_in_channel`,
`message_not_found`, `user_not_in_channel`, `invalid_blocks`, `no_text`, `expired_trigger_id`,
`invalid_trigger_id`, `view_invalid`), rate limiting is HTTP 429 with `Retry-After`, and an
outage is HTTP 503. Every message's Block Kit is parsed and validated with `slack_sdk`'s block
models (and must survive their round trip unchanged), every view with its view model.

As Slack's Interactivity, it clicks the buttons of the messages it holds and submits the
modals it opened, sending what Slack sends: a form-encoded `payload` signed with
SLACK_SIGNING_SECRET as Slack signs it, the signature checked first with `slack_sdk`'s own
`SignatureVerifier`, to INTERACTIONS_URL. A trigger id is valid for 3 s, as Slack's.

Test controls (JSON, under /_test/): GET messages (each with its versions), GET ephemeral,
GET views, POST mode {"down": bool, "ratelimit": n, "not_in_channel": [..]}, POST click
{"user", "channel", "ts", "action_id", "version"?, "times"?, "resend"?, "also_to"?,
"tamper"?, "timestamp_offset"?}, POST submit {"user", "view_id", "reason"}, GET calls (every Web API call).

Usage: slack_api.py PORT; env SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET, INTERACTIONS_URL,
SLACK_CHANNELS (comma-separated ids the workspace has), SLACK_MEMBERS (user ids in every
channel). Prints `listening` when it accepts connections.
"""

import hashlib
import hmac
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from slack_sdk.models.blocks import Block
from slack_sdk.models.views import View
from slack_sdk.signature import SignatureVerifier

PORT = int(sys.argv[1])
TOKEN = os.environ["SLACK_BOT_TOKEN"]
SECRET = os.environ["SLACK_SIGNING_SECRET"]
INTERACTIONS = os.environ["INTERACTIONS_URL"]
CHANNELS = set(filter(None, os.environ.get("SLACK_CHANNELS", "").split(",")))
MEMBERS = set(filter(None, os.environ.get("SLACK_MEMBERS", "").split(",")))
TEAM = "T0AIRLOCK"

lock = threading.Lock()
state = {
    "messages": {},  # (channel, ts) -> {"channel", "ts", "versions": [{"text", "blocks"}]}
    "ephemeral": [],
    "views": {},  # view id -> {"view", "user", "opened_at"}
    "triggers": {},  # trigger id -> (user, issued at)
    "calls": [],
    "mode": {"down": False, "ratelimit": 0, "not_in_channel": []},
    "seq": 0,
}


def next_id():
    state["seq"] += 1
    return state["seq"]


def check_blocks(blocks):
    """Slack's models must parse every block and give back exactly what was sent."""
    if not isinstance(blocks, list) or len(blocks) > 50:
        return "invalid_blocks"
    for raw in blocks:
        parsed = Block.parse(raw)
        if parsed is None:
            return "invalid_blocks"
        # Slack takes only plain text in a header, which the model does not check.
        if raw.get("type") == "header" and raw.get("text", {}).get("type") != "plain_text":
            return "invalid_blocks"
        try:
            # `to_dict` validates every element inside the block, as `validate_json` does not.
            parsed.validate_json()
            back = parsed.to_dict()
        except Exception as e:  # slack_sdk raises SlackObjectFormationError
            sys.stderr.write(f"invalid block: {e}: {raw}\n")
            return "invalid_blocks"
        if back != raw:
            sys.stderr.write(f"block changed by the round trip:\n{raw}\n{back}\n")
            return "invalid_blocks"
    return None


def web_api(method, body):
    mode = state["mode"]
    if method == "chat.postMessage" or method == "chat.update":
        channel = body.get("channel")
        if channel not in CHANNELS:
            return {"ok": False, "error": "channel_not_found"}
        if channel in mode["not_in_channel"]:
            return {"ok": False, "error": "not_in_channel"}
        if not body.get("text") and not body.get("blocks"):
            return {"ok": False, "error": "no_text"}
        if len(body.get("text") or "") > 40000:
            return {"ok": False, "error": "msg_too_long"}
        if "blocks" in body:
            bad = check_blocks(body["blocks"])
            if bad:
                return {"ok": False, "error": bad}
        version = {"text": body.get("text"), "blocks": body.get("blocks")}
        if method == "chat.postMessage":
            ts = f"{int(time.time())}.{next_id():06d}"
            state["messages"][(channel, ts)] = {"channel": channel, "ts": ts, "versions": [version]}
            return {"ok": True, "channel": channel, "ts": ts, "message": version}
        key = (channel, body.get("ts"))
        if key not in state["messages"]:
            return {"ok": False, "error": "message_not_found"}
        state["messages"][key]["versions"].append(version)
        return {"ok": True, "channel": channel, "ts": body["ts"], "text": body.get("text")}
    if method == "chat.postEphemeral":
        channel, user = body.get("channel"), body.get("user")
        if channel not in CHANNELS:
            return {"ok": False, "error": "channel_not_found"}
        if user not in MEMBERS:
            return {"ok": False, "error": "user_not_in_channel"}
        if not body.get("text") and not body.get("blocks"):
            return {"ok": False, "error": "no_text"}
        state["ephemeral"].append({"channel": channel, "user": user, "text": body.get("text")})
        return {"ok": True, "message_ts": f"{int(time.time())}.{next_id():06d}"}
    if method == "views.open":
        trigger = state["triggers"].pop(body.get("trigger_id"), None)
        if trigger is None:
            return {"ok": False, "error": "invalid_trigger_id"}
        user, issued = trigger
        if time.time() - issued > 3:
            return {"ok": False, "error": "expired_trigger_id"}
        raw = body.get("view")
        try:
            view = View(**raw)
            view.validate_json()
        except Exception as e:
            sys.stderr.write(f"invalid view: {e}: {raw}\n")
            return {"ok": False, "error": "view_invalid"}
        bad = check_blocks(raw.get("blocks", []))
        if bad:
            return {"ok": False, "error": "view_invalid"}
        view_id = f"V{next_id():08d}"
        state["views"][view_id] = {"id": view_id, "view": raw, "user": user, "opened_at": time.time()}
        return {"ok": True, "view": dict(raw, id=view_id)}
    return {"ok": False, "error": "unknown_method"}


def sign_and_send(payload, tamper=None, timestamp_offset=0, resend=0, also_to=()):
    """Sends `payload` as Slack does (then the same bytes `resend` times more, and once to each
    URL of `also_to`, as a replay would); returns each attempt's status, body and time."""
    body = urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()
    ts = str(int(time.time()) + timestamp_offset)
    base = b"v0:" + ts.encode() + b":" + body
    signature = "v0=" + hmac.new(SECRET.encode(), base, hashlib.sha256).hexdigest()
    # Slack's own verifier must accept what this stand-in signs (its clock set to the
    # request's time, so an old timestamp is still a valid signature of it).
    verifier = SignatureVerifier(SECRET, clock=type("C", (), {"now": lambda self: float(ts)})())
    assert verifier.is_valid(body=body, timestamp=ts, signature=signature)
    if tamper == "signature":
        signature = "v0=" + ("0" * 64)
    elif tamper == "body":
        body = body.replace(b"airlock", b"airlocK", 1)
    out = []
    for url in [INTERACTIONS] * (1 + resend) + list(also_to):
        req = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "X-Slack-Request-Timestamp": ts,
                "X-Slack-Signature": signature,
                "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
            },
        )
        started = time.time()
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                out.append({"status": r.status, "body": r.read().decode(), "seconds": time.time() - started})
        except urllib.error.HTTPError as e:
            out.append({"status": e.code, "body": e.read().decode(), "seconds": time.time() - started})
    return out


def click(req):
    with lock:
        message = state["messages"].get((req["channel"], req["ts"]))
        if message is None:
            return 404, {"error": "no such message"}
        version = message["versions"][req.get("version", -1)]
        button = None
        for block in version["blocks"] or []:
            if block.get("type") == "actions":
                for element in block["elements"]:
                    if element.get("action_id") == req["action_id"]:
                        button, block_id = element, block.get("block_id")
        if button is None:
            return 409, {"error": "no such button on that version of the message"}
    results = []
    threads = []

    def one(n):
        trigger = f"{next_id()}.{int(time.time())}.{os.urandom(8).hex()}"
        with lock:
            state["triggers"][trigger] = (req["user"], time.time())
        action = {
            "action_id": button["action_id"],
            "block_id": block_id,
            "text": button["text"],
            "type": "button",
            "action_ts": f"{time.time():.6f}",
        }
        if "value" in button:
            action["value"] = button["value"]
        if "style" in button:
            action["style"] = button["style"]
        payload = {
            "type": "block_actions",
            "user": {"id": req["user"], "username": req["user"].lower(), "name": req["user"].lower(), "team_id": TEAM},
            "api_app_id": "A0AIRLOCK",
            "token": "verification-token-not-used",
            "container": {"type": "message", "message_ts": req["ts"], "channel_id": req["channel"], "is_ephemeral": False},
            "trigger_id": trigger,
            "team": {"id": TEAM, "domain": "airlock-tests"},
            "enterprise": None,
            "is_enterprise_install": False,
            "channel": {"id": req["channel"], "name": "approvals"},
            "message": {"type": "message", "ts": req["ts"], "text": version["text"], "blocks": version["blocks"]},
            "state": {"values": {}},
            "response_url": f"http://127.0.0.1:{PORT}/_test/response_url",
            "actions": [action],
        }
        results.append(
            sign_and_send(
                payload,
                tamper=req.get("tamper"),
                timestamp_offset=req.get("timestamp_offset", 0),
                resend=req.get("resend", 0),
                also_to=req.get("also_to", []),
            )
        )

    for n in range(req.get("times", 1)):
        t = threading.Thread(target=one, args=(n,))
        threads.append(t)
        t.start()
    for t in threads:
        t.join()
    return 200, {"results": results}


def submit(req):
    with lock:
        opened = state["views"].get(req["view_id"])
        if opened is None:
            return 404, {"error": "no such view"}
    view = opened["view"]
    payload = {
        "type": "view_submission",
        "team": {"id": TEAM, "domain": "airlock-tests"},
        "user": {"id": req["user"], "username": req["user"].lower(), "name": req["user"].lower(), "team_id": TEAM},
        "api_app_id": "A0AIRLOCK",
        "token": "verification-token-not-used",
        "trigger_id": f"{next_id()}.{int(time.time())}.{os.urandom(8).hex()}",
        "view": {
            "id": req["view_id"],
            "team_id": TEAM,
            "type": "modal",
            "callback_id": view.get("callback_id"),
            "private_metadata": view.get("private_metadata", ""),
            "blocks": view.get("blocks"),
            "state": {"values": {"reason": {"reason": {"type": "plain_text_input", "value": req.get("reason")}}}},
            "hash": "156772938.1827394",
        },
        "response_urls": [],
        "is_enterprise_install": False,
    }
    return 200, {"results": [sign_and_send(payload)]}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n)

    def do_GET(self):
        with lock:
            if self.path == "/_test/messages":
                return self.reply(200, list(state["messages"].values()))
            if self.path == "/_test/ephemeral":
                return self.reply(200, state["ephemeral"])
            if self.path == "/_test/views":
                return self.reply(200, list(state["views"].values()))
            if self.path == "/_test/calls":
                return self.reply(200, state["calls"])
        self.reply(404, {"error": "not found"})

    def do_POST(self):
        raw = self.body()
        if self.path.startswith("/_test/"):
            req = json.loads(raw or b"{}")
            if self.path == "/_test/mode":
                with lock:
                    state["mode"].update(req)
                return self.reply(200, state["mode"])
            if self.path == "/_test/click":
                return self.reply(*click(req))
            if self.path == "/_test/submit":
                return self.reply(*submit(req))
            return self.reply(404, {"error": "not found"})
        if not self.path.startswith("/api/"):
            return self.reply(404, {"ok": False, "error": "unknown_method"})
        method = self.path[len("/api/"):]
        with lock:
            mode = state["mode"]
            entry = {"method": method, "answer": None}
            state["calls"].append(entry)
            if mode["down"]:
                entry["answer"] = 503
                return self.reply(503, {"ok": False, "error": "service_unavailable"})
            if mode["ratelimit"] > 0:
                mode["ratelimit"] -= 1
                entry["answer"] = 429
                return self.reply(429, {"ok": False, "error": "ratelimited"}, [("Retry-After", "1")])
            auth = self.headers.get("Authorization", "")
            if not auth:
                entry["answer"] = "not_authed"
                return self.reply(200, {"ok": False, "error": "not_authed"})
            if auth != f"Bearer {TOKEN}":
                entry["answer"] = "invalid_auth"
                return self.reply(200, {"ok": False, "error": "invalid_auth"})
            if not self.headers.get("Content-Type", "").startswith("application/json"):
                entry["answer"] = "invalid_arguments"
                return self.reply(200, {"ok": False, "error": "invalid_arguments"})
            try:
                body = json.loads(raw)
            except ValueError:
                entry["answer"] = "invalid_json"
                return self.reply(200, {"ok": False, "error": "invalid_json"})
            answer = web_api(method, body)
            if "charset" not in self.headers.get("Content-Type", ""):
                answer.setdefault("response_metadata", {})["warnings"] = ["missing_charset"]
            entry["answer"] = answer.get("error", "ok")
            return self.reply(200, answer)


server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
print("listening", flush=True)
server.serve_forever()
