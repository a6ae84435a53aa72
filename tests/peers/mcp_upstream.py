"""An MCP server for the gateway's tests, built on the official Python SDK (PyPI `mcp`).

Usage: mcp_upstream.py http PORT | stdio

Tools: `echo` (returns its arguments, counting calls), `count` (how many calls reached
this process, and how many `wait`s were cancelled), `crash` (exits the process mid-call),
`slow` (sleeps), `wait` (sleeps without blocking; counts a cancel), `deploy` (asks its client
"which environment?" by form elicitation mid-call, and deploys there), `ask_model` (asks its
client's model to answer a prompt: sampling), `grow` (adds a tool named NAME and says the
tool list changed), `weather` (a typed result, so it declares an `outputSchema`), `read_file`
(an input schema that forbids extra keys), `headers` (the HTTP headers its call arrived
with). Two resources (`test://greeting`,
`test://secrets/api-key`), a prompt (`review`) and completions exercise the other roads a
policy judges; each one reached is noted in `count`'s `roads`.
"""

import json
import os

import anyio
import sys
import time

from pydantic import BaseModel, ConfigDict

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("airlock-test-upstream")
calls = {"n": 0, "log": [], "cancelled": 0, "roads": []}


@server.tool()
def echo(text: str = "", n: int = 0) -> dict:
    """Echo the arguments back."""
    calls["n"] += 1
    calls["log"].append({"text": text, "n": n})
    return {"text": text, "n": n, "calls": calls["n"]}


class Weather(BaseModel):
    city: str
    celsius: float


@server.tool()
def weather(city: str) -> Weather:
    """A typed result: the tool declares an outputSchema its answers follow."""
    return Weather(city=city, celsius=21.5)


class ReadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str


@server.tool()
def read_file(req: ReadRequest) -> dict:
    """A strict input schema: `req` takes `path` and nothing else (additionalProperties
    false), so an injected extra parameter is refused before it gets here."""
    calls["n"] += 1
    calls["log"].append({"read": req.path})
    return {"path": req.path}


@server.tool()
def headers(ctx: Context) -> dict:
    """The HTTP headers this call arrived with (authorization and cookies included): what the
    tests read to prove that an agent's own credentials never reach an upstream."""
    seen = ctx.headers or {}
    return {"headers": {k.lower(): v for k, v in seen.items()}}


@server.tool()
def count() -> dict:
    """How many echo calls reached this server, and their arguments."""
    return {"calls": calls["n"], "log": calls["log"], "cancelled": calls["cancelled"], "roads": calls["roads"]}


@server.tool()
def crash() -> str:
    """Exit the process in the middle of the call."""
    os._exit(3)


@server.tool()
async def wait(ms: int = 10000) -> str:
    """Wait without blocking; a cancelled wait is counted."""
    try:
        await anyio.sleep(ms / 1000)
    except anyio.get_cancelled_exc_class():
        calls["cancelled"] += 1
        raise
    return "waited"


@server.tool()
def slow(ms: int = 1000) -> str:
    """Sleep, then answer."""
    time.sleep(ms / 1000)
    return "done"


class Environment(BaseModel):
    environment: str


@server.tool()
async def deploy(service: str, ctx: Context) -> dict:
    """Deploy a service; asks which environment mid-call."""
    calls["n"] += 1
    calls["log"].append({"deploy": service})
    if ctx.protocol_version == "2026-07-28":
        # In 2026 a tool asks by `input_required` and is called again with the answer.
        import mcp_types as types

        got = (ctx.input_responses or {}).get("env")
        got = got.model_dump(mode="json", by_alias=True) if hasattr(got, "model_dump") else got
        if not isinstance(got, dict) or ctx.request_state != f"asked:{service}":
            return types.InputRequiredResult.model_validate({
                "resultType": "input_required",
                "inputRequests": {"env": {"method": "elicitation/create", "params": {
                    "mode": "form", "message": "which environment?",
                    "requestedSchema": Environment.model_json_schema()}}},
                "requestState": f"asked:{service}",
            })
        if got.get("action") != "accept":
            return {"deployed": False, "action": got.get("action")}
        return {"deployed": True, "service": service, "environment": (got.get("content") or {}).get("environment")}
    answer = await ctx.elicit("which environment?", schema=Environment)
    if answer.action != "accept":
        return {"deployed": False, "action": answer.action}
    return {"deployed": True, "service": service, "environment": answer.data.environment}


@server.tool()
async def ask_model(prompt: str, ctx: Context) -> dict:
    """Ask the client's model (sampling) and return what it said."""
    import mcp_types as types

    try:
        r = await ctx.session.create_message(
            messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))],
            max_tokens=50, related_request_id=ctx.request_id)
    except Exception as e:  # the client cannot sample: say so in the result
        return {"sampled": False, "error": str(e)}
    return {"sampled": True, "model": r.model, "text": getattr(r.content, "text", None)}


@server.tool()
async def list_roots(ctx: Context) -> dict:
    """Ask the client for its roots (`roots/list`) and return them."""
    import mcp_types as types
    from mcp.shared.message import ServerMessageMetadata

    try:
        # On the call's own stream (as `ask_model`'s sampling): a 2025 HTTP client hears
        # nothing on a standalone stream airlock does not open.
        r = await ctx.session.send_request(
            types.ListRootsRequest(), types.ListRootsResult,
            metadata=ServerMessageMetadata(related_request_id=ctx.request_id))
    except Exception as e:  # the client has no roots: say so in the result
        return {"listed": False, "error": str(e)}
    return {"listed": True, "roots": [str(root.uri) for root in r.roots]}


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a tool called `name` and tell the client the tool list changed."""
    import mcp_types as types

    def grown() -> str:
        return f"{name} is here"

    server.add_tool(grown, name=name, description="A tool added at run time")
    await ctx.session.send_notification(types.ToolListChangedNotification(), related_request_id=ctx.request_id)
    return "grown"


@server.resource("test://greeting")
def greeting() -> str:
    """A fixed text."""
    calls["roads"].append("read test://greeting")
    return "hello from the upstream"


@server.resource("test://secrets/api-key")
def api_key() -> str:
    """What a policy should keep from agents."""
    calls["roads"].append("read test://secrets/api-key")
    return "sk-live-do-not-leak"


@server.prompt()
def review(code: str) -> str:
    """Ask for a review."""
    calls["roads"].append("prompt review")
    return f"Please review: {code}"


@server.completion()
async def complete(ref, argument, context):
    import mcp_types as types

    calls["roads"].append(f"complete {argument.name}")
    return types.Completion(values=[argument.value + "-done"], total=1, has_more=False)


if __name__ == "__main__":
    if sys.argv[1] == "http":
        server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]), json_response=False)
    else:
        server.run(transport="stdio")
