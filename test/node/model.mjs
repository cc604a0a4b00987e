// Drives `longhaul serve` backed by the real embedded model (the byte
// tokenizer's model the example config initialises, sampled by the real
// KV-cache sampler) with the official OpenAI Node SDK: streaming with
// include_usage, top_logprobs, vLLM's prompt_logprobs and stop_reason,
// and the 400s for parameters the server does not implement.
// Environment: LONGHAUL_MODEL_URL (base URL, no /v1).
import assert from "node:assert/strict";
import OpenAI from "openai";

const base = process.env.LONGHAUL_MODEL_URL;
assert.ok(base, "LONGHAUL_MODEL_URL is not set");
const MODEL = "longhaul";

for (let i = 0; ; i++) {
  try {
    const r = await fetch(`${base}/health`);
    if (r.ok) break;
  } catch {}
  if (i >= 300) throw new Error("server did not come up");
  await new Promise((r) => setTimeout(r, 100));
}

const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "none", maxRetries: 0, timeout: 30_000 });
let checks = 0;
const check = (name, fn) => fn().then(() => { checks++; console.log(`ok - ${name}`); });
const close = (a, b) => Math.abs(a - b) <= 1e-4;

await check("completions stream equals the plain completion, usage last", async () => {
  const params = { model: MODEL, prompt: "The ledger", max_tokens: 24, n: 2, seed: 17, temperature: 1, logprobs: 2 };
  const plain = await client.completions.create(params);
  const stream = await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  const text = ["", ""], lps = [[], []], finish = [null, null];
  let usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, "text_completion");
    if (chunk.usage) {
      assert.equal(chunk.choices.length, 0, "usage chunk carries no choices");
      usage = chunk.usage;
      continue;
    }
    assert.equal(usage, null, "usage came before the last chunk");
    for (const ch of chunk.choices) {
      assert.equal(finish[ch.index], null, "chunk after finish");
      text[ch.index] += ch.text;
      lps[ch.index].push(...ch.logprobs.token_logprobs);
      if (ch.finish_reason) finish[ch.index] = ch.finish_reason;
    }
  }
  assert.ok(chunks > 4);
  assert.deepEqual(usage, plain.usage);
  for (const ch of plain.choices) {
    assert.equal(text[ch.index], ch.text);
    assert.deepEqual(lps[ch.index], ch.logprobs.token_logprobs);
    assert.equal(finish[ch.index], ch.finish_reason);
    // logprobs: 2 lists the sampled token and the two most likely.
    ch.logprobs.top_logprobs.forEach((top, k) => {
      const entries = Object.entries(top);
      assert.ok(entries.length >= 2 && entries.length <= 3, `top ${JSON.stringify(top)}`);
      assert.ok(close(top[ch.logprobs.tokens[k]], ch.logprobs.token_logprobs[k]));
      const best = Math.max(...entries.map(([, v]) => v));
      assert.ok(best >= ch.logprobs.token_logprobs[k] - 1e-6);
      assert.ok(entries.every(([, v]) => v <= 0));
    });
  }
});

await check("chat stream: role first, content deltas, finish, usage", async () => {
  const params = {
    model: MODEL, messages: [{ role: "user", content: "balance?" }], max_tokens: 30, seed: 3,
    logprobs: true, top_logprobs: 3,
  };
  const plain = await client.chat.completions.create(params);
  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  let content = "", role = null, finish = null, usage = null, first = true;
  const tops = [];
  for await (const chunk of stream) {
    assert.equal(chunk.object, "chat.completion.chunk");
    if (chunk.usage) { usage = chunk.usage; continue; }
    const ch = chunk.choices[0];
    if (first) { role = ch.delta.role; first = false; } else assert.equal(ch.delta.role, undefined);
    if (ch.delta.content) content += ch.delta.content;
    if (ch.logprobs) tops.push(...ch.logprobs.content);
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  assert.equal(role, "assistant");
  const want = plain.choices[0];
  assert.equal(content, want.message.content);
  assert.equal(finish, want.finish_reason);
  assert.deepEqual(usage, plain.usage);
  assert.deepEqual(tops, want.logprobs.content);
  for (const e of want.logprobs.content) {
    assert.equal(e.top_logprobs.length, 3);
    const v = e.top_logprobs.map((a) => a.logprob);
    assert.deepEqual([...v].sort((a, b) => b - a), v, "alternatives most likely first");
    assert.ok(e.logprob <= v[0] + 1e-6);
  }
});

await check("stream without include_usage has no usage", async () => {
  const stream = await client.chat.completions.create({
    model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 5, seed: 1, stream: true,
  });
  let n = 0;
  for await (const chunk of stream) {
    n++;
    assert.equal(chunk.usage, undefined);
  }
  assert.ok(n >= 2);
});

await check("prompt_logprobs and stop_reason (vLLM extensions)", async () => {
  const res = await client.completions.create({
    model: MODEL, prompt: "abc", max_tokens: 40, seed: 8, prompt_logprobs: 1, return_token_ids: true,
    ignore_eos: true,
  });
  const ch = res.choices[0];
  assert.equal(ch.prompt_logprobs.length, 4); // BOS a b c
  assert.equal(ch.prompt_logprobs[0], null);
  ch.prompt_logprobs.slice(1).forEach((d, i) => {
    const own = d[String(ch.prompt_token_ids[i + 1])];
    assert.ok(own && own.rank >= 1 && own.logprob <= 0, JSON.stringify(d));
    assert.ok(Object.values(d).some((e) => e.rank === 1));
  });
  assert.equal(ch.finish_reason, "length");
  assert.equal(ch.stop_reason, null);
  // A token the unstopped sample drew, as a stop token: stop_reason names it.
  const tok = ch.token_ids[6];
  const cut = await client.completions.create({
    model: MODEL, prompt: "abc", max_tokens: 40, seed: 8, stop_token_ids: [tok], ignore_eos: true,
  });
  assert.equal(cut.choices[0].finish_reason, "stop");
  assert.equal(cut.choices[0].stop_reason, tok);
});

await check("unsupported parameters are 400s naming the field", async () => {
  for (const [field, value] of [["frequency_penalty", 0.4], ["logit_bias", { 97: 3 }], ["best_of", 3], ["nonsense", 1]]) {
    await assert.rejects(
      client.completions.create({ model: MODEL, prompt: "x", max_tokens: 1, [field]: value }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === field,
    );
  }
  await assert.rejects(
    client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], tools: [{ type: "function", function: { name: "f" } }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "tools",
  );
});

console.log(`# ${checks} model checks passed`);
