// Drives a running `longhaul serve --fake-backend` with the official OpenAI
// Node SDK and checks response shapes and the fake generator's values.
// Environment: LONGHAUL_URL (base URL, no /v1), LONGHAUL_API_KEY.
import assert from "node:assert/strict";
import OpenAI from "openai";

const base = process.env.LONGHAUL_URL;
const apiKey = process.env.LONGHAUL_API_KEY;
assert.ok(base, "LONGHAUL_URL is not set");
const MODEL = "longhaul-fake";
const END = 263; // tokenizer.End

// Wait for the server (bounded: 100 × 100 ms).
for (let i = 0; ; i++) {
  try {
    const r = await fetch(`${base}/health`);
    if (r.ok) break;
  } catch {}
  if (i >= 100) throw new Error("server did not come up");
  await new Promise((r) => setTimeout(r, 100));
}

const client = new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 10_000 });

// The fake's logprob of token t at step i, in float32 like the server.
const fakeLogprob = (t, i) =>
  t === END ? Math.fround(-0.5 - i / 1024) : Math.fround(-(1 + (t - 97)) / 32 - i / 1024);

let checks = 0;
const check = (name, fn) => fn().then(() => { checks++; console.log(`ok - ${name}`); });

await check("models", async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].id, MODEL);
  assert.equal(models.data[0].object, "model");
});

await check("completions with logprobs, n and seed", async () => {
  const params = { model: MODEL, prompt: "Hello", max_tokens: 8, logprobs: 0, n: 3, seed: 11, return_token_ids: true };
  const { data, response } = await client.completions.create(params).withResponse();
  assert.equal(response.headers.get("x-longhaul-weight-version"), "0");
  assert.equal(data.object, "text_completion");
  assert.equal(data.model, MODEL);
  assert.equal(data.weight_version, 0);
  assert.equal(data.choices.length, 3);
  assert.deepEqual(data.prompt_token_ids, [256, ...Buffer.from("Hello")]);
  for (const [i, ch] of data.choices.entries()) {
    assert.equal(ch.index, i);
    assert.equal(ch.finish_reason, "length");
    assert.equal(ch.token_ids.length, 8);
    const lp = ch.logprobs;
    assert.equal(lp.tokens.length, 8);
    assert.equal(lp.token_logprobs.length, 8);
    assert.equal(lp.text_offset.length, 8);
    assert.equal(lp.tokens.join(""), ch.text);
    ch.token_ids.forEach((t, k) => {
      assert.equal(String.fromCharCode(t), lp.tokens[k]);
      assert.equal(Math.fround(lp.token_logprobs[k]), fakeLogprob(t, k));
      assert.equal(lp.text_offset[k], k);
    });
  }
  assert.equal(data.usage.prompt_tokens, 6);
  assert.equal(data.usage.completion_tokens, 24);
  assert.equal(data.usage.total_tokens, 30);
  const again = await client.completions.create(params);
  assert.deepEqual(again.choices.map((c) => c.text), data.choices.map((c) => c.text));
  assert.notEqual(data.choices[0].text, data.choices[1].text);
});

await check("completions from token ids with stop", async () => {
  const full = await client.completions.create({ model: MODEL, prompt: [256, 72, 105], max_tokens: 30, seed: 5 });
  const text = full.choices[0].text;
  const stop = text.slice(4, 6);
  const cut = await client.completions.create({ model: MODEL, prompt: [256, 72, 105], max_tokens: 30, seed: 5, stop: [stop] });
  assert.equal(cut.choices[0].text, text.slice(0, text.indexOf(stop)));
  assert.equal(cut.choices[0].finish_reason, "stop");
});

await check("chat completions with logprobs", async () => {
  const res = await client.chat.completions.create({
    model: MODEL,
    messages: [{ role: "system", content: "be brief" }, { role: "user", content: "hi" }],
    logprobs: true, top_logprobs: 0, max_tokens: 64, n: 4, seed: 2, return_token_ids: true,
  });
  assert.equal(res.object, "chat.completion");
  assert.equal(res.choices.length, 4);
  let stopped = 0;
  for (const ch of res.choices) {
    assert.equal(ch.message.role, "assistant");
    assert.equal(typeof ch.message.content, "string");
    const content = ch.logprobs.content;
    assert.equal(content.length, ch.token_ids.length);
    content.forEach((e, k) => {
      const t = ch.token_ids[k];
      assert.equal(Math.fround(e.logprob), fakeLogprob(t, k));
      assert.deepEqual(e.top_logprobs, []);
      if (t === END) {
        assert.equal(e.token, "<|end|>");
        assert.equal(e.bytes, null);
      } else {
        assert.deepEqual(e.bytes, [t]);
        assert.equal(e.token, String.fromCharCode(t));
      }
    });
    const text = content.filter((e) => e.bytes).map((e) => e.token).join("");
    assert.equal(ch.message.content, text);
    if (ch.finish_reason === "stop") {
      stopped++;
      assert.equal(ch.token_ids.at(-1), END);
    } else {
      assert.equal(ch.finish_reason, "length");
    }
  }
  assert.ok(stopped > 0, "no choice ended its turn");
  assert.equal(res.usage.prompt_tokens, res.prompt_token_ids.length);
});

await check("errors are the SDK's typed errors", async () => {
  const bad = new OpenAI({ baseURL: `${base}/v1`, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  await assert.rejects(client.completions.create({ model: "gpt-9", prompt: "x" }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === "model_not_found");
  await assert.rejects(client.completions.create({ model: MODEL, prompt: "x", n: 0 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "n" && e.type === "invalid_request_error");
});

await check("weight reload bumps the version", async () => {
  const r = await fetch(`${base}/update_weights_from_disk`, {
    method: "POST", headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model_path: "/tmp/none" }),
  });
  const body = await r.json();
  assert.equal(r.status, 200);
  assert.deepEqual([body.success, body.version], [true, 1]);
  const res = await client.completions.create({ model: MODEL, prompt: "x", max_tokens: 1 });
  assert.equal(res.weight_version, 1);
});

console.log(`# ${checks} checks passed`);
