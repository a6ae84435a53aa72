"""The official MCP Python SDK finding its own way in (DESIGN §16): given only the `/mcp` URL
and a client id and secret, its OAuth support (`ClientCredentialsOAuthProvider`) reads the
gateway's 401, the protected resource metadata it names (RFC 9728), the authorization
server's metadata, gets a token for the resource (RFC 8707) and calls.

Usage: mcp_oauth_client.py URL ISSUER CLIENT_ID CLIENT_SECRET SCOPE MODE TOOL ARGS_JSON
Prints one JSON line: the tools listed, the call's result, and each request the client sent
(method and URL, never a token).
"""

import asyncio
import json
import sys

import httpx2
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client


class Memory:
    def __init__(self):
        self.tokens = None
        self.client_info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info):
        self.client_info = client_info


async def main():
    url, issuer, client_id, secret, scope, mode, tool, args = sys.argv[1:]
    sent = []

    async def log(request):
        sent.append(f"{request.method} {request.url}")

    auth = ClientCredentialsOAuthProvider(
        server_url=url,
        storage=Memory(),
        client_id=client_id,
        client_secret=secret,
        scope=scope,
        issuer=issuer,
    )
    http = httpx2.AsyncClient(auth=auth, timeout=60, event_hooks={"request": [log]})
    async with Client(streamable_http_client(url, http_client=http), mode=mode) as c:
        tools = await c.list_tools()
        result = await c.call_tool(tool, json.loads(args))
        print(json.dumps({
            "tools": [t.name for t in tools.tools],
            "result": result.model_dump(mode="json", by_alias=True, exclude_none=True),
            "sent": sent,
        }), flush=True)


asyncio.run(main())
