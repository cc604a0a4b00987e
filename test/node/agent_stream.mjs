// An external agent for `env.kind: agent` written with the official OpenAI
// Node SDK that streams (stream: true, stream_options.include_usage) and
// offers a function tool: the ledger task, answered through an
// `answer(balance)` tool call when the model makes one, else by its text.
// Every tool call is echoed back and answered with a tool message, so the
// next prompt renders both. It checks the stream's shape itself (one
// [DONE]-terminated stream per call, a usage chunk, finish_reason
// "tool_calls" exactly when there are calls) and fails loudly otherwise.
// env/agentenv.TestOpenAINodeSDKStreamingToolAgent runs it (needs `npm ci` here).
import OpenAI from "openai";

const client = new OpenAI({ maxRetries: 0 });
const task = JSON.parse(process.env.LONGHAUL_TASK);
const { start, deltas } = task.params;
const sign = (d) => (d >= 0 ? "+" : "") + d;
const tools = [{ type: "function", function: {
  name: "answer", description: "Give the balance mod 10.",
  parameters: { type: "object", properties: { balance: { type: "integer" } }, required: ["balance"] } } }];
const messages = [{ role: "user", content: `start ${start} ${sign(deltas[0])}` }];
let balance = start;
let correct = 0;
let toolCalls = 0;
for (let i = 0; i < deltas.length; i++) {
  balance = (((balance + deltas[i]) % 10) + 10) % 10;
  let stream;
  try {
    stream = await client.chat.completions.create({ model: "policy", messages, tools, stream: true,
      stream_options: { include_usage: true } });
  } catch (e) {
    if (e instanceof OpenAI.BadRequestError) break; // a rollout limit: stop
    throw e;
  }
  let content = "", finish = null, usage = null;
  const calls = [];
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      content += ch.delta?.content ?? "";
      for (const tc of ch.delta?.tool_calls ?? []) {
        calls[tc.index] ??= { id: "", type: "function", function: { name: "", arguments: "" } };
        const c = calls[tc.index];
        if (tc.id) c.id = tc.id;
        c.function.name += tc.function?.name ?? "";
        c.function.arguments += tc.function?.arguments ?? "";
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  if (!usage || usage.total_tokens !== usage.prompt_tokens + usage.completion_tokens) {
    throw new Error(`stream without a usage chunk: ${JSON.stringify(usage)}`);
  }
  if ((finish === "tool_calls") !== (calls.length > 0)) {
    throw new Error(`finish_reason ${finish} with ${calls.length} tool calls`);
  }
  let answer = content.trim();
  const reply = { role: "assistant", content: content === "" && calls.length ? null : content };
  const results = [];
  for (const c of calls) {
    answer = String(JSON.parse(c.function.arguments).balance);
    toolCalls++;
    results.push({ role: "tool", tool_call_id: c.id, name: c.function.name, content: "noted" });
  }
  if (calls.length) reply.tool_calls = calls;
  if (answer === String(balance)) correct++;
  messages.push(reply, ...results);
  if (i + 1 < deltas.length) messages.push({ role: "user", content: sign(deltas[i + 1]) });
}
const res = await fetch(process.env.LONGHAUL_REWARD_URL, {
  method: "POST",
  headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ reward: correct / deltas.length, success: correct === deltas.length }),
});
if (!res.ok) throw new Error(`reward: HTTP ${res.status}`);
process.stderr.write(`tool calls ${toolCalls}, correct ${correct}\n`);
