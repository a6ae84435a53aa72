"""The official MCP Python SDK (PyPI `mcp`) as the gateway's client, for the end-to-end tests.

Usage: mcp_client.py URL TOKEN MODE SCENARIO [ARGS...]
  MODE: legacy (2025-11-25) or 2026-07-28
  SCENARIOS (each prints one JSON object per line):
    list                       the tool names
    call NAME ARGS_JSON        one call's result (or the JSON-RPC error it raised)
    approve-on-elicit NAME ARGS_JSON API APPROVER_TOKEN VERB [REASON]
                               a call whose URL elicitation is answered by deciding the
                               approval through the gateway's HTTP API (VERB: approve | decline)
    bridge BIN NAME ARGS_JSON  list and one call through `BIN mcp stdio --url URL` (the
                               stdio bridge), the client speaking to the child process
    answer-form NAME ARGS_JSON ANSWER_JSON
                               a call that asks for input: each form elicitation is printed
                               and answered `accept` with ANSWER_JSON (or `"decline"`)
    sample NAME ARGS_JSON      a call during which the upstream asks the client's model:
                               each sampling request is printed and answered with a fixed text
    roots NAME ARGS_JSON       a call during which the upstream asks the client's roots: each
                               request is printed and answered with one fixed root
    answer-url NAME ARGS_JSON API TOKEN DATA_JSON
                               a call whose input is asked for by URL: the URL's call is
                               resumed through the gateway's HTTP API with DATA (as TOKEN)
    states NAME ARGS_JSON      input_required by hand: the state, then a tampered, a replayed
                               and another principal's use of it (ARGS[4]: another token)
    lists                      the resource URIs and prompt names listed
    roads URI PROMPT           the other roads to an upstream: read URI, get PROMPT, complete
                               its `code` argument, and (2025-11-25) subscribe to URI; one line
                               each, its result or its JSON-RPC error
    held-read URI API APPROVER_TOKEN VERB
                               a resource read held for approval, its URL decided through the
                               gateway's HTTP API (VERB: approve | decline): in 2026-07-28 the
                               SDK's own input_required loop, in 2025-11-25 the URL elicitation
                               error (-32042) then a retry; then the same read `again`, whose
                               first answer is printed as it is
"""

import asyncio
import json
import sys

import httpx2
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
import mcp_types as types


def dump(x):
    return x.model_dump(mode="json", by_alias=True, exclude_none=True)


def out(obj):
    print(json.dumps(obj), flush=True)


def client(url, token, mode, **kw):
    # A cookie as a browser-hosted agent would send: it must never reach an upstream.
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}", "cookie": "agent_session=stays-at-airlock"},
                              timeout=60)
    return Client(streamable_http_client(url, http_client=http), mode=mode, **kw)


async def call(c, name, args):
    try:
        out({"result": dump(await c.call_tool(name, args))})
    except MCPError as e:
        out({"error": {"code": e.error.code, "message": e.error.message, "data": e.error.data}})


async def main():
    url, token, mode, scenario, *rest = sys.argv[1:]
    if scenario == "list":
        async with client(url, token, mode) as c:
            tools = await c.list_tools()
            out({"tools": [t.name for t in tools.tools]})
    elif scenario == "call":
        async with client(url, token, mode) as c:
            await call(c, rest[0], json.loads(rest[1]))
    elif scenario == "bridge":
        from mcp.client.stdio import StdioServerParameters

        params = StdioServerParameters(command=rest[0], args=["mcp", "stdio", "--url", url, "--token", token])
        async with Client(params, mode=mode) as c:
            tools = await c.list_tools()
            out({"tools": [t.name for t in tools.tools]})
            await call(c, rest[1], json.loads(rest[2]))
    elif scenario == "approve-on-elicit":
        name, args, api, approver, verb = rest[:5]
        reason = rest[5] if len(rest) > 5 else "no"

        async def on_elicit(context, params):
            approval_id = params.url.rstrip("/").split("/")[-1]
            body = {"reason": reason} if verb == "decline" else {}
            async with httpx2.AsyncClient() as h:
                r = await h.post(f"{api}/v1/approvals/{approval_id}/{verb}", json=body,
                                 headers={"authorization": f"Bearer {approver}"})
            out({"elicited": {"mode": params.mode, "url": params.url, "decided": r.status_code}})
            return types.ElicitResult(action="accept")

        async with client(url, token, mode, elicitation_callback=on_elicit) as c:
            await call(c, name, json.loads(args))
    elif scenario == "answer-form":
        name, args, answer = rest[0], json.loads(rest[1]), json.loads(rest[2])

        async def on_elicit(context, params):
            out({"elicited": dump(params)})
            if answer == "decline":
                return types.ElicitResult(action="decline")
            return types.ElicitResult(action="accept", content=answer)

        async with client(url, token, mode, elicitation_callback=on_elicit) as c:
            await call(c, name, args)
    elif scenario == "lists":
        async with client(url, token, mode) as c:
            resources = await c.list_resources()
            prompts = await c.list_prompts()
            out({"resources": [str(r.uri) for r in resources.resources],
                 "prompts": [p.name for p in prompts.prompts]})
    elif scenario == "roads":
        uri, prompt = rest[0], rest[1]

        async def attempt(name, fn):
            try:
                out({"road": name, "result": dump(await fn())})
            except MCPError as e:
                out({"road": name, "error": {"code": e.error.code, "message": e.error.message, "data": e.error.data}})

        async with client(url, token, mode) as c:
            await attempt("read", lambda: c.read_resource(uri))
            await attempt("prompt", lambda: c.get_prompt(prompt, {"code": "x = 1"}))
            await attempt("complete", lambda: c.complete(
                types.PromptReference(type="ref/prompt", name=prompt), {"name": "code", "value": "x"}))
            if mode == "legacy":
                await attempt("subscribe", lambda: c.subscribe_resource(uri))
    elif scenario == "held-read":
        uri, api, approver, verb = rest[:4]

        async def decide(link):
            approval_id = link.rstrip("/").split("/")[-1]
            body = {"reason": "not this one"} if verb == "decline" else {}
            async with httpx2.AsyncClient() as h:
                r = await h.post(f"{api}/v1/approvals/{approval_id}/{verb}", json=body,
                                 headers={"authorization": f"Bearer {approver}"})
            return r.status_code

        async def on_elicit(context, params):
            out({"elicited": {"mode": params.mode, "url": params.url, "message": params.message,
                              "decided": await decide(params.url)}})
            return types.ElicitResult(action="accept")

        async def attempt(label, fn):
            try:
                out({"road": label, "result": dump(await fn())})
            except MCPError as e:
                out({"road": label, "error": {"code": e.error.code, "message": e.error.message, "data": e.error.data}})
                return e

        async with client(url, token, mode, elicitation_callback=on_elicit) as c:
            e = await attempt("first", lambda: c.read_resource(uri))
            if e is not None and e.error.code == -32042:
                link = e.error.data["elicitations"][0]["url"]
                out({"elicited": {"url": link, "decided": await decide(link)}})
                await attempt("retry", lambda: c.read_resource(uri))
            if mode == "legacy":
                await attempt("again", lambda: c.read_resource(uri))
            else:
                await attempt("again", lambda: c.session.read_resource(uri, allow_input_required=True))
    elif scenario == "sample":
        name, args = rest[0], json.loads(rest[1])

        async def on_sample(context, params):
            out({"sampled": dump(params)})
            return types.CreateMessageResult(
                role="assistant", model="scripted-model",
                content=types.TextContent(type="text", text="forty-two"))

        async with client(url, token, mode, sampling_callback=on_sample) as c:
            await call(c, name, args)
    elif scenario == "roots":
        name, args = rest[0], json.loads(rest[1])

        async def on_roots(context):
            out({"rooted": True})
            return types.ListRootsResult(roots=[types.Root(uri="file:///work/project", name="project")])

        async with client(url, token, mode, list_roots_callback=on_roots) as c:
            await call(c, name, args)
    elif scenario == "answer-url":
        name, args, api, who, data = rest[0], json.loads(rest[1]), rest[2], rest[3], json.loads(rest[4])

        async def on_elicit(context, params):
            call_id = params.url.rstrip("/").split("/")[-1]
            async with httpx2.AsyncClient() as h:
                r = await h.post(f"{api}/v1/calls/{call_id}/resume", json={"resume_data": data},
                                 headers={"authorization": f"Bearer {who}"})
            out({"elicited": dump(params), "resumed": r.status_code})
            return types.ElicitResult(action="accept")

        async with client(url, token, mode, elicitation_callback=on_elicit) as c:
            await call(c, name, args)
    elif scenario == "states":
        name, args, other = rest[0], json.loads(rest[1]), rest[2]

        async def never(context, params):
            return types.ElicitResult(action="accept")

        async with client(url, token, mode, elicitation_callback=never) as c:
            first = await c.session.call_tool(name, args, allow_input_required=True)
            out({"first": dump(first)})
            state = first.request_state
            for label, st, a in [
                ("tampered", state[:-2] + ("AA" if not state.endswith("AA") else "BB"), args),
                ("other_args", state, {**args, "extra": 1}),
                ("valid", state, args),
                ("replayed", state, args),
            ]:
                try:
                    r = await c.session.call_tool(name, a, request_state=st, allow_input_required=True)
                    out({label: {"result": dump(r)}})
                except MCPError as e:
                    out({label: {"error": {"code": e.error.code, "data": e.error.data}}})
        async with client(url, other, mode, elicitation_callback=never) as c:
            try:
                r = await c.session.call_tool(name, args, request_state=state, allow_input_required=True)
                out({"other_principal": {"result": dump(r)}})
            except MCPError as e:
                out({"other_principal": {"error": {"code": e.error.code, "data": e.error.data}}})
    else:
        raise SystemExit(f"unknown scenario {scenario}")


asyncio.run(main())
