// The official `ollama` client against a mesh-llm node: node ollama.mjs HOST LLM EMB
// Runs every case and prints one JSON line: {case: what it observed | {error: ...}}.
// node ollama.mjs HOST pull REF: pulls REF (streamed, then again not) and prints what it saw.
// node ollama.mjs HOST delete NAME: deletes NAME, then again, and prints what it saw.
// node ollama.mjs HOST tools MODEL: chats with a tool (whole, streamed, the result sent back, and
// without the tool) and prints what came back.
import { Ollama } from "ollama";

const [host, llm, emb] = process.argv.slice(2);
const ollama = new Ollama({ host });
const greedy = { temperature: 0, top_k: 1, seed: 1, num_predict: 8 };
const user = [{ role: "user", content: "Once upon a time" }];
// num_predict room for the grammar's whitespace: the constrained answer ends itself
const constrained = { ...greedy, num_predict: 200 };
const mood = { type: "object", properties: { mood: { type: "string", enum: ["happy", "sad"] } }, required: ["mood"] };
// a 1x1 PNG
const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

function last(parts) {
  return parts[parts.length - 1];
}

async function errorOf(p) {
  try {
    await p;
    return { error: "no error" };
  } catch (e) {
    return { status: e.status_code, message: e.error ?? e.message };
  }
}

const cases = {
  async version() {
    return await ollama.version();
  },
  async list() {
    const r = await ollama.list();
    return r.models.map((m) => ({ name: m.name, size: m.size, details: m.details }));
  },
  async show() {
    const r = await ollama.show({ model: llm });
    return { details: r.details, capabilities: r.capabilities, model_info: r.model_info };
  },
  async chat() {
    const r = await ollama.chat({ model: llm, messages: user, options: greedy });
    return { text: r.message.content, role: r.message.role, done: r.done, done_reason: r.done_reason, eval_count: r.eval_count, prompt_eval_count: r.prompt_eval_count };
  },
  async chat_stream() {
    const parts = [];
    for await (const p of await ollama.chat({ model: llm, messages: user, options: greedy, stream: true })) parts.push(p);
    return { text: parts.map((p) => p.message.content).join(""), n: parts.length, dones: parts.map((p) => p.done), done_reason: last(parts).done_reason, eval_count: last(parts).eval_count };
  },
  async generate() {
    const r = await ollama.generate({ model: llm, prompt: "Once upon a time", options: greedy });
    return { text: r.response, done: r.done, eval_count: r.eval_count };
  },
  async generate_stream() {
    const parts = [];
    for await (const p of await ollama.generate({ model: llm, prompt: "Once upon a time", options: greedy, stream: true })) parts.push(p);
    return { text: parts.map((p) => p.response).join(""), n: parts.length, done: last(parts).done, eval_count: last(parts).eval_count };
  },
  async chat_json() {
    const r = await ollama.chat({ model: llm, messages: user, format: "json", options: constrained });
    return { text: r.message.content, done_reason: r.done_reason };
  },
  async generate_schema_stream() {
    const parts = [];
    for await (const p of await ollama.generate({ model: llm, prompt: "Once upon a time", format: mood, options: constrained, stream: true })) parts.push(p);
    return { text: parts.map((p) => p.response).join(""), done: last(parts).done, schema: mood };
  },
  async embed() {
    const r = await ollama.embed({ model: emb, input: ["Once upon a time", "a cat"] });
    return { n: r.embeddings.length, dim: r.embeddings[0].length, prompt_eval_count: r.prompt_eval_count };
  },
  async embeddings() {
    const r = await ollama.embeddings({ model: emb, prompt: "Once upon a time" });
    return { dim: r.embedding.length };
  },
  async ps() {
    const r = await ollama.ps();
    return r.models.map((m) => m.name);
  },
  async unknown_model() {
    return await errorOf(ollama.chat({ model: "no-such-model", messages: user }));
  },
  async image_to_text_model() {
    return await errorOf(ollama.chat({ model: llm, messages: [{ role: "user", content: "what is this?", images: [png] }] }));
  },
};

if (llm === "pull") {
  const parts = [];
  for await (const p of await ollama.pull({ model: emb, stream: true })) parts.push(p);
  const again = await ollama.pull({ model: emb, stream: false });
  const tags = (await ollama.list()).models.map((m) => m.name);
  console.log(JSON.stringify({ parts, again, tags }));
  process.exit(0);
}

if (llm === "delete") {
  const first = await ollama.delete({ model: emb });
  const tags = (await ollama.list()).models.map((m) => m.name);
  const again = await errorOf(ollama.delete({ model: emb }));
  console.log(JSON.stringify({ first, tags, again }));
  process.exit(0);
}

if (llm === "tools") {
  const model = emb;
  const weather = { type: "function", function: { name: "weather", description: "The weather of a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } };
  const ask = [{ role: "user", content: "What is the weather in Paris?" }];
  const whole = await ollama.chat({ model, messages: ask, tools: [weather] });
  const parts = [];
  for await (const p of await ollama.chat({ model, messages: ask, tools: [weather], stream: true })) parts.push(p);
  // the call and its result sent back: the assistant's tool_calls (arguments an object) and a tool message
  const result = { role: "tool", content: "sunny, 21 C", tool_name: "weather" };
  const after = await ollama.chat({ model, messages: [...ask, whole.message, result], tools: [weather] });
  const plain = await ollama.chat({ model, messages: ask });
  const seen = (r) => ({ content: r.message.content, tool_calls: r.message.tool_calls ?? null, done_reason: r.done_reason, prompt_eval_count: r.prompt_eval_count });
  console.log(JSON.stringify({
    whole: seen(whole),
    stream: { tool_calls: parts.flatMap((p) => p.message.tool_calls ?? []), dones: parts.map((p) => p.done) },
    after: seen(after),
    plain: seen(plain),
  }));
  process.exit(0);
}

const out = {};
for (const [name, fn] of Object.entries(cases)) {
  try {
    out[name] = await fn();
  } catch (e) {
    out[name] = { error: String(e && e.stack ? e.stack : e) };
  }
}
console.log(JSON.stringify(out));
