// Drives `longhaul serve --model DIR` with the official OpenAI Node SDK: a
// tiny Qwen3 with the real Qwen3 tokenizer and chat template, trained by
// `longhaul train --config examples/qwen3-guess-agent.yaml` to play guess
// through a guess(n) tool (testkit/crashtest TestHFAgentTools runs
// this after the training). Checked: chat with tools gives the model's
// tool call as OpenAI tool_calls (finish_reason tool_calls), the same
// through the SDK's stream helper (deltas reassembled) and a raw stream;
// the call's tokens are the hermes text the model wrote; a multi-turn chat
// with the call and its tool result; text completions, streamed and not;
// /tokenize in both forms and /detokenize. The model is greedy here
// (temperature 0), so what it writes is what it learned.
// Environment: LONGHAUL_HF_URL (base URL, no /v1), LONGHAUL_HF_MODEL.
import assert from "node:assert/strict";
import OpenAI from "openai";

const base = process.env.LONGHAUL_HF_URL;
const MODEL = process.env.LONGHAUL_HF_MODEL;
assert.ok(base && MODEL, "LONGHAUL_HF_URL and LONGHAUL_HF_MODEL must be set");

for (let i = 0; ; i++) {
  try {
    const r = await fetch(`${base}/health`);
    if (r.ok) break;
  } catch {}
  if (i >= 600) throw new Error("server did not come up");
  await new Promise((r) => setTimeout(r, 100));
}

const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "none", maxRetries: 0, timeout: 60_000 });
const post = async (path, body) => {
  const r = await fetch(`${base}${path}`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const j = await r.json();
  assert.equal(r.status, 200, `${path}: ${JSON.stringify(j)}`);
  return j;
};
let checks = 0;
const check = (name, fn) => fn().then(() => { checks++; console.log(`ok - ${name}`); });

const tools = [{ type: "function", function: {
  name: "guess", description: "Guess the secret number.",
  parameters: { type: "object", properties: { n: { type: "integer" } }, required: ["n"] } } }];
const first = [{ role: "user", content: "guess 0-7" }];
const chat = { model: MODEL, messages: first, tools, temperature: 0, max_tokens: 24 };

let call; // the model's first tool call, reused below
await check("chat with tools: the model's call as tool_calls", async () => {
  const res = await client.chat.completions.create({ ...chat, return_token_ids: true });
  const ch = res.choices[0];
  assert.equal(ch.finish_reason, "tool_calls", JSON.stringify(ch));
  assert.equal(ch.message.role, "assistant");
  assert.equal(ch.message.content, null, "a reply that only calls tools has content null");
  assert.equal(ch.message.tool_calls.length, 1);
  call = ch.message.tool_calls[0];
  assert.equal(call.type, "function");
  assert.equal(call.function.name, "guess");
  const n = JSON.parse(call.function.arguments).n;
  assert.ok(Number.isInteger(n) && n >= 0 && n <= 7, `n = ${n}`);
  assert.ok(call.id.length > 0);
  // The tokens are the model's own: the hermes text, then <|im_end|>.
  const text = (await post("/detokenize", { tokens: ch.token_ids })).prompt;
  assert.equal(text, `<tool_call>\n{"name": "guess", "arguments": ${call.function.arguments}}\n</tool_call><|im_end|>`);
  // The prompt is the template's render, as /tokenize renders it.
  const tk = await post("/tokenize", { messages: first, tools, add_generation_prompt: true });
  assert.deepEqual(tk.tokens, res.prompt_token_ids);
  assert.equal(res.usage.prompt_tokens, tk.count);
  assert.equal(res.usage.completion_tokens, ch.token_ids.length);
});

await check("stream helper: deltas reassemble to the same message", async () => {
  const stream = client.chat.completions.stream({ ...chat, stream_options: { include_usage: true } });
  let argDeltas = 0;
  stream.on("tool_calls.function.arguments.delta", () => argDeltas++);
  const done = await stream.finalChatCompletion();
  const ch = done.choices[0];
  assert.equal(ch.finish_reason, "tool_calls");
  assert.equal(ch.message.tool_calls.length, 1);
  const c = ch.message.tool_calls[0];
  assert.equal(c.function.name, call.function.name);
  assert.equal(c.function.arguments, call.function.arguments);
  assert.ok(argDeltas >= 2, `arguments came in ${argDeltas} deltas`);
  assert.ok(done.usage.completion_tokens > 0);
});

await check("raw stream: id, type and name first, then argument pieces", async () => {
  const stream = await client.chat.completions.create({ ...chat, stream: true });
  let header = null, args = "", finish = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    for (const ch of chunk.choices) {
      for (const tc of ch.delta.tool_calls ?? []) {
        assert.equal(tc.index, 0);
        if (header === null) {
          assert.ok(tc.id && tc.type === "function" && tc.function.name === "guess", JSON.stringify(tc));
          header = tc;
        } else {
          assert.equal(tc.id, undefined, "the id comes once");
          assert.equal(tc.function.name, undefined, "the name comes once");
        }
        args += tc.function.arguments ?? "";
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.ok(header && chunks > 3);
  assert.equal(args, call.function.arguments);
  assert.equal(finish, "tool_calls");
});

await check("multi-turn: the call and its result go back, the model calls again", async () => {
  const messages = [...first, { role: "assistant", content: null, tool_calls: [call] },
    { role: "tool", tool_call_id: call.id, content: "higher" }];
  const res = await client.chat.completions.create({ ...chat, messages });
  const ch = res.choices[0];
  assert.equal(ch.finish_reason, "tool_calls", JSON.stringify(ch.message));
  const n = JSON.parse(ch.message.tool_calls[0].function.arguments).n;
  assert.ok(Number.isInteger(n), `n = ${n}`);
  console.log(`  first guess ${JSON.parse(call.function.arguments).n}, after "higher": ${n}`);
  const tk = await post("/tokenize", { messages, tools });
  assert.ok(tk.count > 0);
});

await check("text completions, plain and streamed", async () => {
  const params = { model: MODEL, prompt: "guess 0-7", max_tokens: 12, seed: 5, logprobs: 1, return_token_ids: true, ignore_eos: true };
  const plain = await client.completions.create(params);
  const ch = plain.choices[0];
  assert.equal(ch.logprobs.tokens.length, 12);
  assert.equal(ch.token_ids.length, 12);
  assert.equal(ch.finish_reason, "length");
  const text = (await post("/detokenize", { tokens: ch.token_ids })).prompt;
  assert.equal(ch.text, text.replace(/<\|[a-z_]+\|>/g, ""), "text is the tokens' text, special tokens left out");
  const tk = await post("/tokenize", { prompt: "guess 0-7" });
  assert.deepEqual(plain.prompt_token_ids ?? ch.prompt_token_ids, tk.tokens);
  const stream = await client.completions.create({ ...params, stream: true });
  let streamed = "", lps = [];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      streamed += c.text;
      lps.push(...c.logprobs.token_logprobs);
    }
  }
  assert.equal(streamed, ch.text);
  assert.deepEqual(lps, ch.logprobs.token_logprobs);
});

await check("chat without tools: plain text, special tokens left out", async () => {
  const res = await client.chat.completions.create({ model: MODEL, messages: first, max_tokens: 24, temperature: 0 });
  const ch = res.choices[0];
  assert.equal(typeof ch.message.content, "string");
  assert.equal(ch.message.tool_calls, undefined);
  assert.ok(!ch.message.content.includes("<|im_end|>"));
});

await check("refusals name their field", async () => {
  for (const [extra, param] of [[{ tool_choice: "required" }, "tool_choice"], [{ frequency_penalty: 1 }, "frequency_penalty"],
    [{ tools: [{ type: "function" }] }, "tools[0]"]]) {
    await assert.rejects(client.chat.completions.create({ ...chat, ...extra }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, String(e));
      assert.equal(e.param, param);
      return true;
    });
  }
});

console.log(`${checks} checks passed`);
