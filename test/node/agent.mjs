// An external agent for `env.kind: agent` written with the official OpenAI
// Node SDK: the ledger task (as examples/agents/ledger_agent.py plays it),
// against the per-rollout endpoint longhaul serves at $OPENAI_BASE_URL.
// env/agentenv.TestOpenAINodeSDKAgent runs it (needs `npm ci` here).
import OpenAI from "openai";

const client = new OpenAI({ maxRetries: 0 }); // OPENAI_BASE_URL, OPENAI_API_KEY from the environment
const task = JSON.parse(process.env.LONGHAUL_TASK);
const { start, deltas } = task.params;
const sign = (d) => (d >= 0 ? "+" : "") + d;
const first = { role: "user", content: `start ${start} ${sign(deltas[0])}` };
const turns = [];
let balance = start;
let correct = 0;
for (let i = 0; i < deltas.length; i++) {
  balance = (((balance + deltas[i]) % 10) + 10) % 10;
  const messages = [first, ...turns.slice(-2).flat()];
  let text;
  try {
    const r = await client.chat.completions.create({ model: "policy", messages });
    text = r.choices[0].message.content ?? "";
  } catch (e) {
    if (e instanceof OpenAI.BadRequestError) break; // a rollout limit: stop
    throw e;
  }
  if (text.trim() === String(balance)) correct++;
  if (i + 1 < deltas.length) {
    turns.push([{ role: "assistant", content: text }, { role: "user", content: sign(deltas[i + 1]) }]);
  }
}
const res = await fetch(process.env.LONGHAUL_REWARD_URL, {
  method: "POST",
  headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ reward: correct / deltas.length, success: correct === deltas.length }),
});
if (!res.ok) throw new Error(`reward: HTTP ${res.status}`);
