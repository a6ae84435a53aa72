// The official TypeScript SDK 1.x (`@modelcontextprotocol/sdk`, the line most clients run) as a
// client of `/mcp`: it lists the tools, then calls one. `Client.callTool` checks a result's
// `structuredContent` against the tool's `outputSchema`, even on an error result, and throws
// when it does not match: the check airlock's refusals must survive (DESIGN §10).
//
//   node ts_sdk_client.mjs URL TOKEN TOOL ARGS_JSON...
// Prints one JSON line per call: {"result": …} or {"error": {"code", "message"}}.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, token, tool, ...calls] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { authorization: `Bearer ${token}` } },
});
const client = new Client({ name: 'airlock-ts-test', version: '1.0.0' });
await client.connect(transport);
await client.listTools();
for (const args of calls) {
  try {
    console.log(JSON.stringify({ result: await client.callTool({ name: tool, arguments: JSON.parse(args) }) }));
  } catch (e) {
    console.log(JSON.stringify({ error: { code: e.code ?? null, message: String(e.message ?? e) } }));
  }
}
await client.close();
