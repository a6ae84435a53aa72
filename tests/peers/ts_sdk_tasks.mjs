// The official TypeScript SDK 1.x's experimental tasks client (2025-11-25) against `/mcp`: it
// lists the tools (learning which take tasks), calls one with `callToolStream`, which asks
// for a task when the server offers one, polls `tasks/get` and takes the result from
// `tasks/result`; then it lists its tasks.
//
//   node ts_sdk_tasks.mjs URL TOKEN TOOL ARGS_JSON [TOOL ARGS_JSON]...
// Prints one JSON line per stream message ({"type": "taskCreated" | "taskStatus" | "result" |
// "error", …}), then {"type": "listed", "tasks": […]}.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, token, ...pairs] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { authorization: `Bearer ${token}` } },
});
const client = new Client({ name: 'airlock-ts-tasks', version: '1.0.0' }, { defaultTaskPollInterval: 200 });
await client.connect(transport);
await client.listTools();
const print = (m) => console.log(JSON.stringify(m));
for (let i = 0; i + 1 < pairs.length; i += 2) {
  const stream = client.experimental.tasks.callToolStream({ name: pairs[i], arguments: JSON.parse(pairs[i + 1]) });
  for await (const m of stream) {
    if (m.type === 'error') print({ type: 'error', error: { code: m.error.code ?? null, message: String(m.error.message) } });
    else print(m);
  }
}
const listed = await client.experimental.tasks.listTasks();
print({ type: 'listed', tasks: listed.tasks });
await client.close();
