"""The upstream behind the gateway when the official MCP conformance suite runs against it:
the tools, resources and prompts the suite's server scenarios call, written on the official
Python SDK's low-level server (PyPI `mcp`).

It serves them the way the suite's reference server does, path by path: what a 2026-07-28
request lists and calls is everything below; a 2025-11-25 session lists and calls only the
tools, prompts and resources that revision's scenarios use (`MODERN_ONLY` is left out of it,
and a call to one of those is the "not found" the reference server answers). A gateway that
lists only one path, or calls a tool on a path that does not serve it, fails here as it would
in front of the reference server.

Usage: conformance_upstream.py PORT
"""

import asyncio
import base64
import hashlib
import hmac
import json
import os
import sys

import mcp_types as types
import uvicorn
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from mcp.server.transport_security import TransportSecuritySettings

# A 1x1 PNG and a tiny WAV, made here.
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c63f8cfc0f01f0005000201"
        "5d0f2e9d0000000049454e44ae426082"
    )
).decode()
WAV = base64.b64encode(
    b"RIFF" + (36 + 4).to_bytes(4, "little") + b"WAVEfmt " + (16).to_bytes(4, "little")
    + (1).to_bytes(2, "little") + (1).to_bytes(2, "little") + (8000).to_bytes(4, "little")
    + (8000).to_bytes(4, "little") + (1).to_bytes(2, "little") + (8).to_bytes(2, "little")
    + b"data" + (4).to_bytes(4, "little") + bytes([128, 128, 128, 128])
).decode()

EMPTY = {"type": "object", "properties": {}}
TOOLS = [
    ("test_simple_text", "Returns simple text", EMPTY),
    ("test_image_content", "Returns an image", EMPTY),
    ("test_audio_content", "Returns audio", EMPTY),
    ("test_embedded_resource", "Returns an embedded resource", EMPTY),
    ("test_multiple_content_types", "Returns several content types", EMPTY),
    ("test_tool_with_logging", "Logs while it runs", EMPTY),
    ("test_logging_tool", "Logs while it runs (the 2026-07-28 scenarios' name for it)", EMPTY),
    ("test_tool_with_progress", "Reports progress while it runs", EMPTY),
    ("test_error_handling", "Always fails", EMPTY),
    ("test_sampling", "Asks the client's model", {"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}),
    ("test_elicitation", "Asks the user", {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}),
    ("test_elicitation_sep1034_defaults", "Asks the user, with defaults", EMPTY),
    ("test_elicitation_sep1330_enums", "Asks the user to pick from enums", EMPTY),
    # The 2026-07-28 multi-round-trip tools (SEP-2322): each asks by `input_required`.
    ("test_input_required_result_elicitation", "Asks a name by input_required", EMPTY),
    ("test_input_required_result_sampling", "Asks the client's model by input_required", EMPTY),
    ("test_input_required_result_list_roots", "Asks the client's roots by input_required", EMPTY),
    ("test_input_required_result_request_state", "Asks with a requestState it checks", EMPTY),
    ("test_input_required_result_multiple_inputs", "Asks three things at once", EMPTY),
    ("test_input_required_result_multi_round", "Asks twice, then answers", EMPTY),
    ("test_input_required_result_tampered_state", "Refuses a requestState that is not its own", EMPTY),
    ("test_input_required_result_capabilities", "Asks only what the client declared it answers", EMPTY),
    ("test_missing_capability", "Needs the client's sampling capability", EMPTY),
    ("test_streaming_elicitation", "Asks a name by input_required, never by a request on the stream", EMPTY),
    (
        "json_schema_2020_12_tool",
        "Tool with JSON Schema 2020-12 features",
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
            "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
            "additionalProperties": False,
        },
    ),
]

# What the reference server serves on its 2026-07-28 path only: the multi-round-trip tools and
# the 2026 scenarios' own tools, one prompt, one resource.
MODERN_ONLY = {
    "test_missing_capability",
    "test_input_required_result_elicitation",
    "test_input_required_result_sampling",
    "test_input_required_result_list_roots",
    "test_input_required_result_request_state",
    "test_input_required_result_multiple_inputs",
    "test_input_required_result_multi_round",
    "test_input_required_result_tampered_state",
    "test_input_required_result_capabilities",
    "test_streaming_elicitation",
    "test_logging_tool",
    "test_input_required_result_prompt",
    "test://stateless-static-text",
}


def modern(ctx):
    """Whether the request came on the 2026-07-28 path (stateless, `_meta`), not in a session."""
    return ctx.protocol_version == "2026-07-28"


def served(ctx, name):
    return modern(ctx) or name not in MODERN_ONLY


# The elicitations the suite's scenarios expect, by tool: message, schema, result label.
ELICITATIONS = {
    "test_elicitation": ("Please provide your information", {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }, "User response"),
    "test_elicitation_sep1034_defaults": ("Please review the defaults", {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
            "verified": {"type": "boolean", "default": True},
        },
    }, "Elicitation completed"),
    "test_elicitation_sep1330_enums": ("Please pick options", {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
            "titledSingle": {"type": "string", "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ]},
            "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                           "enumNames": ["Option One", "Option Two", "Option Three"]},
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
            "titledMulti": {"type": "array", "items": {"anyOf": [
                {"const": "value1", "title": "First Choice"},
                {"const": "value2", "title": "Second Choice"},
                {"const": "value3", "title": "Third Choice"},
            ]}},
        },
    }, "Elicitation completed"),
}


def text(t):
    return types.TextContent(type="text", text=t)


# The multi-round-trip tools' state: "<payload>.<hmac>", under a key made at start.
STATE_KEY = os.urandom(32)


def sign(payload):
    tag = hmac.new(STATE_KEY, payload.encode(), hashlib.sha256).hexdigest()
    return f"{payload}.{tag}"


def opened(state):
    """The payload of a state this server signed, else None."""
    if not isinstance(state, str) or "." not in state:
        return None
    payload, tag = state.rsplit(".", 1)
    return payload if hmac.compare_digest(sign(payload), state) else None


def form(message, prop, kind="string"):
    return {"method": "elicitation/create", "params": {"message": message, "requestedSchema": {
        "type": "object", "properties": {prop: {"type": kind}}, "required": [prop]}}}


SAMPLE = {"method": "sampling/createMessage", "params": {"messages": [
    {"role": "user", "content": {"type": "text", "text": "What is the capital of France?"}}], "maxTokens": 100}}
GREETING = {"method": "sampling/createMessage", "params": {"messages": [
    {"role": "user", "content": {"type": "text", "text": "Generate a greeting"}}], "maxTokens": 50}}
ROOTS = {"method": "roots/list", "params": {}}


def ask(requests, state=None):
    r = {"resultType": "input_required", "inputRequests": requests}
    if state is not None:
        r["requestState"] = state
    return types.InputRequiredResult.model_validate(r)


def responses(params):
    """The client's answers as plain JSON, by key."""
    given = getattr(params, "input_responses", None) or {}
    return {k: (v.model_dump(mode="json", by_alias=True, exclude_none=True) if hasattr(v, "model_dump") else v)
            for k, v in given.items()}


def accepted(answer, prop):
    if not isinstance(answer, dict) or answer.get("action") != "accept":
        return None
    return (answer.get("content") or {}).get(prop)


def client_capabilities(params):
    meta = params.model_dump(mode="json", by_alias=True).get("_meta") or {}
    return meta.get("io.modelcontextprotocol/clientCapabilities") or {}


def mrtr(name, params):
    """A multi-round-trip tool's next step: an InputRequiredResult, or the final content."""
    got = responses(params)
    caps = client_capabilities(params)
    if name == "test_input_required_result_capabilities":
        if got:
            return [text("Answered what this client could")]
        wanted = {}
        if "sampling" in caps:
            wanted["capital_question"] = SAMPLE
        if "elicitation" in caps:
            wanted["user_name"] = form("What is your name?", "name")
        if "roots" in caps:
            wanted["client_roots"] = ROOTS
        return ask(wanted) if wanted else [text("This client declared nothing to ask with")]
    state = getattr(params, "request_state", None)
    if name in ("test_input_required_result_elicitation", "test_streaming_elicitation"):
        who = accepted(got.get("user_name"), "name")
        return ask({"user_name": form("What is your name?", "name")}) if who is None else [text(f"Hello, {who}!")]
    if name == "test_input_required_result_sampling":
        said = got.get("capital_question")
        if not isinstance(said, dict) or "content" not in said:
            return ask({"capital_question": SAMPLE})
        return [text(f"The model said: {(said.get('content') or {}).get('text', '')}")]
    if name == "test_input_required_result_list_roots":
        roots = got.get("client_roots")
        if not isinstance(roots, dict) or not isinstance(roots.get("roots"), list):
            return ask({"client_roots": ROOTS})
        return [text("Roots: " + ", ".join(r.get("uri", "") for r in roots["roots"]))]
    if name in ("test_input_required_result_request_state", "test_input_required_result_tampered_state"):
        if state is not None and opened(state) is None:
            raise MCPError(-32602, "requestState failed its integrity check")
        if opened(state) == "confirm" and accepted(got.get("confirm"), "ok") is not None:
            return [text("state-ok: the requestState was this server's")]
        return ask({"confirm": form("Please confirm", "ok", "boolean")}, sign("confirm"))
    if name == "test_input_required_result_multiple_inputs":
        keys = {"user_name", "greeting", "client_roots"}
        if opened(state) == "multiple" and keys <= set(got):
            return [text(f"Got all three: {', '.join(sorted(keys))}")]
        return ask({"user_name": form("What is your name?", "name"), "greeting": GREETING, "client_roots": ROOTS},
                   sign("multiple"))
    if name == "test_input_required_result_multi_round":
        step = opened(state)
        if step == "round-1" and accepted(got.get("step1"), "name") is not None:
            return ask({"step2": form("Step 2: What is your favorite color?", "color")}, sign("round-2"))
        if step == "round-2" and accepted(got.get("step2"), "color") is not None:
            return [text("Both steps answered")]
        return ask({"step1": form("Step 1: What is your name?", "name")}, sign("round-1"))
    return None


async def list_tools(ctx, params):
    return types.ListToolsResult(
        tools=[types.Tool(name=n, description=d, input_schema=s) for n, d, s in TOOLS if served(ctx, n)]
    )


async def call_tool(ctx, params):
    name = params.name
    if not served(ctx, name):
        # The reference server's 2025 session has no such tool: its SDK answers a tool error.
        return types.CallToolResult(content=[text(f"MCP error -32602: Tool {name} not found")], is_error=True)
    if name == "test_missing_capability":
        # SEP-2575: a tool that needs sampling, called by a client that did not declare it.
        if "sampling" not in client_capabilities(params):
            raise MCPError(-32021, "this tool needs the client's sampling capability",
                           {"requiredCapabilities": {"sampling": {}}})
        said = responses(params).get("capital_question")
        if not isinstance(said, dict):
            return ask({"capital_question": SAMPLE})
        return types.CallToolResult(content=[text("sampled")])
    if name.startswith("test_input_required_result_") or name == "test_streaming_elicitation":
        step = mrtr(name, params)
        return step if isinstance(step, types.InputRequiredResult) else types.CallToolResult(content=step)
    if name == "test_simple_text":
        content = [text("This is a simple text response for testing.")]
    elif name == "test_image_content":
        content = [types.ImageContent(type="image", data=PNG, mime_type="image/png")]
    elif name == "test_audio_content":
        content = [types.AudioContent(type="audio", data=WAV, mime_type="audio/wav")]
    elif name == "test_embedded_resource":
        content = [types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
            uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."))]
    elif name == "test_multiple_content_types":
        content = [
            text("Multiple content types test:"),
            types.ImageContent(type="image", data=PNG, mime_type="image/png"),
            types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
                uri="test://mixed-content-resource", mime_type="application/json",
                text=json.dumps({"test": "data", "value": 123}))),
        ]
    elif name in ("test_tool_with_logging", "test_logging_tool"):
        for i, msg in enumerate(["Tool execution started", "Tool processing data", "Tool execution completed"]):
            if i:
                await asyncio.sleep(0.05)
            await ctx.session.send_log_message("info", msg, related_request_id=ctx.request_id)
        content = [text("Tool with logging executed successfully")]
    elif name == "test_tool_with_progress":
        meta = ctx.meta or {}
        token = meta.get("progress_token", meta.get("progressToken"))
        for i, p in enumerate([0, 50, 100]):
            if i:
                await asyncio.sleep(0.05)
            if token is not None:
                await ctx.session.send_progress_notification(token, p, 100, related_request_id=str(ctx.request_id))
        content = [text(str(token))]
    elif name == "test_error_handling":
        return types.CallToolResult(content=[text("This tool intentionally returns an error for testing")], is_error=True)
    elif name == "json_schema_2020_12_tool":
        content = [text(f"JSON Schema 2020-12 tool called with: {json.dumps(params.arguments or {})}")]
    elif name == "test_sampling":
        prompt = (params.arguments or {}).get("prompt", "")
        answer = await ctx.session.create_message(
            messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))],
            max_tokens=100, related_request_id=ctx.request_id)
        said = getattr(answer.content, "text", None) or json.dumps(answer.model_dump(mode="json", by_alias=True))
        content = [text(f"LLM response: {said}")]
    elif name in ELICITATIONS:
        message, schema, label = ELICITATIONS[name]
        message = (params.arguments or {}).get("message", message)
        answer = await ctx.session.elicit_form(message=message, requested_schema=schema, related_request_id=ctx.request_id)
        content = [text(f"{label}: action={answer.action}, content={json.dumps(answer.content)}")]
    else:
        return types.CallToolResult(content=[text(f"{name}: not supported behind this gateway")], is_error=True)
    return types.CallToolResult(content=content)


RESOURCES = [
    types.Resource(uri="test://static-text", name="static-text", description="A static text resource", mime_type="text/plain"),
    types.Resource(uri="test://static-binary", name="static-binary", description="A static binary resource", mime_type="image/png"),
    types.Resource(uri="test://watched-resource", name="watched-resource", description="A resource to subscribe to", mime_type="text/plain"),
]


STATELESS = types.Resource(uri="test://stateless-static-text", name="Stateless Static Text",
                           description="A static text resource served on the 2026-07-28 path", mime_type="text/plain")


async def list_resources(ctx, params):
    return types.ListResourcesResult(resources=RESOURCES + ([STATELESS] if modern(ctx) else []))


async def list_templates(ctx, params):
    return types.ListResourceTemplatesResult(resource_templates=[types.ResourceTemplate(
        uri_template="test://template/{id}/data", name="template", description="A template", mime_type="application/json")])


async def read_resource(ctx, params):
    uri = str(params.uri)
    if uri == "test://static-text":
        c = types.TextResourceContents(uri=uri, mime_type="text/plain", text="This is the content of the static text resource.")
    elif uri == "test://static-binary":
        c = types.BlobResourceContents(uri=uri, mime_type="image/png", blob=PNG)
    elif uri == "test://watched-resource":
        c = types.TextResourceContents(uri=uri, mime_type="text/plain", text="watched")
    elif uri == "test://stateless-static-text" and modern(ctx):
        c = types.TextResourceContents(uri=uri, mime_type="text/plain", text="Static text content from the 2026-07-28 path.")
    elif uri.startswith("test://template/") and uri.endswith("/data"):
        id_ = uri[len("test://template/"):-len("/data")]
        c = types.TextResourceContents(uri=uri, mime_type="application/json", text=json.dumps(
            {"id": id_, "templateTest": True, "data": f"Data for ID: {id_}"}))
    else:
        raise MCPError(-32602, "Resource not found", {"uri": uri})
    return types.ReadResourceResult(contents=[c])


async def subscribe(ctx, params):
    return types.EmptyResult()


PROMPTS = [
    types.Prompt(name="test_simple_prompt", description="A simple prompt"),
    types.Prompt(name="test_prompt_with_arguments", description="A prompt with arguments", arguments=[
        types.PromptArgument(name="arg1", description="First test argument", required=True),
        types.PromptArgument(name="arg2", description="Second test argument", required=True),
    ]),
    types.Prompt(name="test_prompt_with_embedded_resource", description="A prompt with a resource", arguments=[
        types.PromptArgument(name="resourceUri", description="The resource", required=True)]),
    types.Prompt(name="test_prompt_with_image", description="A prompt with an image"),
    types.Prompt(name="test_input_required_result_prompt", description="A prompt that asks for its context first"),
]


async def list_prompts(ctx, params):
    return types.ListPromptsResult(prompts=[p for p in PROMPTS if served(ctx, p.name)])


async def get_prompt(ctx, params):
    a = params.arguments or {}
    if not served(ctx, params.name):
        raise MCPError(-32602, f"Prompt {params.name} not found")
    if params.name == "test_simple_prompt":
        msgs = [types.PromptMessage(role="user", content=text("This is a simple prompt for testing."))]
    elif params.name == "test_prompt_with_arguments":
        msgs = [types.PromptMessage(role="user", content=text(f"Prompt with arguments: arg1='{a.get('arg1')}', arg2='{a.get('arg2')}'"))]
    elif params.name == "test_prompt_with_embedded_resource":
        msgs = [
            types.PromptMessage(role="user", content=types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
                uri=a.get("resourceUri", "test://example-resource"), mime_type="text/plain", text="Embedded resource content for testing."))),
            types.PromptMessage(role="user", content=text("Please process the embedded resource above.")),
        ]
    elif params.name == "test_input_required_result_prompt":
        context = accepted(responses(params).get("user_context"), "context")
        if context is None:
            return ask({"user_context": form("What context should the prompt use?", "context")})
        msgs = [types.PromptMessage(role="user", content=text(f"Use this context: {context}"))]
    elif params.name == "test_prompt_with_image":
        msgs = [
            types.PromptMessage(role="user", content=types.ImageContent(type="image", data=PNG, mime_type="image/png")),
            types.PromptMessage(role="user", content=text("Please analyze the image above.")),
        ]
    else:
        raise ValueError(f"no prompt {params.name}")
    return types.GetPromptResult(messages=msgs)


async def complete(ctx, params):
    return types.CompleteResult(completion=types.Completion(values=["test"], has_more=False))


async def set_level(ctx, params):
    return types.EmptyResult()


server = Server(
    "airlock-conformance-upstream",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_list_resources=list_resources,
    on_list_resource_templates=list_templates,
    on_read_resource=read_resource,
    on_subscribe_resource=subscribe,
    on_unsubscribe_resource=subscribe,
    on_list_prompts=list_prompts,
    on_get_prompt=get_prompt,
    on_completion=complete,
    on_set_logging_level=set_level,
)

if __name__ == "__main__":
    app = server.streamable_http_app(
        # DNS rebinding protection as a local server should have it (the suite checks it when
        # run against this fixture directly; behind the gateway, the gateway checks too).
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    )
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
