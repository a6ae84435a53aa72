"""An MCP server for the gateway's tests, built on the official Python SDK (PyPI `mcp`).

Usage: mcp_upstream.py http PORT | stdio

Tools: `echo` (returns its arguments, counting calls), `count` (how many calls reached
this process), `crash` (exits the process mid-call), `slow` (sleeps). A resource and a prompt
exercise the pass-through methods.
"""

import json
import os
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("airlock-test-upstream")
calls = {"n": 0, "log": []}


@server.tool()
def echo(text: str = "", n: int = 0) -> dict:
    """Echo the arguments back."""
    calls["n"] += 1
    calls["log"].append({"text": text, "n": n})
    return {"text": text, "n": n, "calls": calls["n"]}


@server.tool()
def count() -> dict:
    """How many echo calls reached this server, and their arguments."""
    return {"calls": calls["n"], "log": calls["log"]}


@server.tool()
def crash() -> str:
    """Exit the process in the middle of the call."""
    os._exit(3)


@server.tool()
def slow(ms: int = 1000) -> str:
    """Sleep, then answer."""
    time.sleep(ms / 1000)
    return "done"


@server.resource("test://greeting")
def greeting() -> str:
    """A fixed text."""
    return "hello from the upstream"


@server.prompt()
def review(code: str) -> str:
    """Ask for a review."""
    return f"Please review: {code}"


if __name__ == "__main__":
    if sys.argv[1] == "http":
        server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]), json_response=False)
    else:
        server.run(transport="stdio")
