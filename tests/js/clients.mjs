// Official client libraries against a mesh-llm node: node clients.mjs BASE_URL CASE LLM EMB
// Prints one JSON line with what the case observed; exits 1 with the error on failure.
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";

const [base, kase, llm, emb] = process.argv.slice(2);
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60000 });
const anthropic = new Anthropic({ baseURL: base, apiKey: "unused", maxRetries: 0, timeout: 60000 });
const user = [{ role: "user", content: "Once upon a time" }];
const tools = [{
  type: "function",
  function: {
    name: "get_weather", description: "the weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];

const cases = {
  async chat() {
    const r = await openai.chat.completions.create({ model: llm, messages: user, max_tokens: 8, temperature: 0 });
    return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason, usage: r.usage };
  },
  async chat_stream() {
    const s = await openai.chat.completions.create({ model: llm, messages: user, max_tokens: 8, temperature: 0, stream: true });
    let text = "", chunks = 0, finish = null;
    for await (const c of s) {
      chunks++;
      if (c.choices[0]?.delta?.content) text += c.choices[0].delta.content;
      if (c.choices[0]?.finish_reason) finish = c.choices[0].finish_reason;
    }
    return { text, chunks, finish };
  },
  async tools() {
    // A function-calling exchange: the tools offered, the model's earlier call and its result in
    // the history (the client library checks the answer's shape).
    const messages = [
      { role: "user", content: "What is the weather in Paris?" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\":\"Paris\"}" } }] },
      { role: "tool", tool_call_id: "call_1", content: "sunny, 21 C" },
    ];
    const r = await openai.chat.completions.create({ model: llm, messages, tools, max_tokens: 8, temperature: 0 });
    const m = r.choices[0].message;
    return { role: m.role, text: m.content, tool_calls: m.tool_calls ?? [], finish: r.choices[0].finish_reason };
  },
  async tool_call() {
    // A call produced by the model: tool_choice "required" makes llama-server constrain the answer
    // with the grammar of the template's call format. llama.cpp's grammar lets free text come
    // before a call, and a story model never starts one by itself, so an assistant prefill opens
    // it; the model and the grammar write the rest (the arguments) and llama-server parses it.
    const messages = [
      { role: "user", content: "What is the weather in Paris?" },
      { role: "assistant", content: "{\"name\": \"get_weather\"" },
    ];
    const r = await openai.chat.completions.create({
      model: llm, messages, tools, tool_choice: "required", parallel_tool_calls: false, max_tokens: 128, temperature: 0,
    });
    const m = r.choices[0].message;
    const calls = (m.tool_calls ?? []).map((c) => ({ id: c.id, type: c.type, name: c.function.name, args: JSON.parse(c.function.arguments) }));
    return { finish: r.choices[0].finish_reason, calls };
  },
  async embeddings() {
    const r = await openai.embeddings.create({ model: emb, input: ["Once upon a time", "a cat"] });
    return { n: r.data.length, dim: r.data[0].embedding.length, model: r.model };
  },
  async responses() {
    const r = await openai.responses.create({ model: llm, input: "Once upon a time", max_output_tokens: 8, temperature: 0 });
    return { status: r.status, text: r.output_text, usage: r.usage };
  },
  async messages() {
    const r = await anthropic.messages.create({ model: llm, max_tokens: 8, messages: user, temperature: 0 });
    return { type: r.type, role: r.role, text: r.content.map((b) => b.text ?? "").join(""), stop: r.stop_reason, usage: r.usage };
  },
  async messages_stream() {
    const s = await anthropic.messages.create({ model: llm, max_tokens: 8, messages: user, temperature: 0, stream: true });
    let text = "", events = [];
    for await (const e of s) {
      events.push(e.type);
      if (e.type === "content_block_delta" && e.delta.type === "text_delta") text += e.delta.text;
    }
    return { text, first: events[0], last: events[events.length - 1], n: events.length };
  },
  async count_tokens() {
    const r = await anthropic.messages.countTokens({ model: llm, messages: user });
    return { input_tokens: r.input_tokens };
  },
  async messages_unknown_model() {
    try {
      await anthropic.messages.create({ model: "no-such-model", max_tokens: 8, messages: user });
      return { error: null };
    } catch (e) {
      return { status: e.status, type: e.error?.type, error_type: e.error?.error?.type, message: e.error?.error?.message };
    }
  },
};

try {
  const out = await cases[kase]();
  process.stdout.write(JSON.stringify(out) + "\n");
} catch (e) {
  process.stderr.write(`${kase}: ${e.stack || e}\n`);
  process.exit(1);
}
