// A Mastra agent (npm @mastra/core with @mastra/mcp's MCPClient) whose tools come from the
// gateway's /mcp, driven by a scripted model (MockLanguageModelV3 from `ai/test`: no network).
// The model calls TOOL with ARGS once, then answers with the text of the tool's result.
// Usage: node mastra_agent.mjs URL TOKEN TOOL ARGS_JSON
// Prints one JSON line: {"tools": [...], "toolResults": [...], "text": "..."}.
import { Agent } from '@mastra/core/agent';
import { MCPClient } from '@mastra/mcp';
import { MockLanguageModelV3 } from 'ai/test';
import { simulateReadableStream } from 'ai';

const [url, token, wanted, argsJson] = process.argv.slice(2);

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

let step = 0;

// What the scripted model says at each step: the tool call, then the result in words.
function turn(options) {
  step += 1;
  if (step === 1) {
    // Mastra names MCP tools `<server>_<tool>` with dots made underscores.
    const suffix = wanted.replace(/[^A-Za-z0-9_-]/g, '_');
    const name = (options.tools ?? []).map((t) => t.name).find((n) => n.endsWith(suffix));
    if (!name) throw new Error(`no tool ending in ${wanted}: ${(options.tools ?? []).map((t) => t.name)}`);
    return { call: { toolCallId: 'call-1', toolName: name, input: argsJson } };
  }
  const last = JSON.stringify(options.prompt[options.prompt.length - 1]?.content ?? '');
  return { text: `tool said: ${last}` };
}

const model = new MockLanguageModelV3({
  doGenerate: async (options) => {
    const t = turn(options);
    return t.call
      ? {
          content: [{ type: 'tool-call', ...t.call }],
          finishReason: { unified: 'tool-calls', raw: undefined },
          usage,
          warnings: [],
        }
      : {
          content: [{ type: 'text', text: t.text }],
          finishReason: { unified: 'stop', raw: undefined },
          usage,
          warnings: [],
        };
  },
  doStream: async (options) => {
    const t = turn(options);
    const chunks = t.call
      ? [
          { type: 'stream-start', warnings: [] },
          { type: 'tool-call', ...t.call },
          { type: 'finish', finishReason: { unified: 'tool-calls', raw: undefined }, usage },
        ]
      : [
          { type: 'stream-start', warnings: [] },
          { type: 'text-start', id: 't1' },
          { type: 'text-delta', id: 't1', delta: t.text },
          { type: 'text-end', id: 't1' },
          { type: 'finish', finishReason: { unified: 'stop', raw: undefined }, usage },
        ];
    return { stream: simulateReadableStream({ chunks }) };
  },
});

const mcp = new MCPClient({
  servers: {
    airlock: {
      url: new URL(url),
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
      timeout: 60000,
    },
  },
});

try {
  const tools = await mcp.listTools();
  const agent = new Agent({
    id: 'airlock-test-agent',
    name: 'airlock test agent',
    instructions: 'Call the tool you are asked to call.',
    model,
    tools,
  });
  const result = await agent.generate(`Please call ${wanted}.`, { maxSteps: 3 });
  const toolResults = (result.toolResults ?? []).map((r) => r.payload?.result ?? r.result ?? r);
  console.log(JSON.stringify({ tools: Object.keys(tools), toolResults, text: result.text }));
} finally {
  await mcp.disconnect();
}
