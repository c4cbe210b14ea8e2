// Tool calls and reasoning through the official openai client against `tandem run` on the bundled
// tiny Qwen3 (random weights: only the grammar of tool_choice required / named makes its calls
// valid). An agent loop: tools -> an enforced call -> the tool's result as a role "tool" message ->
// a final answer, non-streamed and streamed through the client's own ChatCompletionStream
// accumulation (finalChatCompletion), which must equal the non-streamed message field by field;
// the client's runTools helper runs a named function; ajv checks the arguments against the tool's
// schema; no <think> tag reaches content; bad tool parameters are 400s and the server keeps serving.
import { test } from "node:test";
import assert from "node:assert/strict";
import Ajv2020 from "../tools/node_modules/ajv/dist/2020.js";
import { startServer, client, MODEL, OpenAI } from "./server.mjs";

const server = await startServer();
const openai = client(server);

const weatherParams = {
  type: "object",
  properties: { city: { type: "string", maxLength: 16 }, unit: { enum: ["celsius", "fahrenheit"] } },
  required: ["city", "unit"],
  additionalProperties: false,
};
const tools = [
  { type: "function", function: { name: "get_weather", description: "Current weather of a city", parameters: weatherParams } },
  { type: "function", function: { name: "get_time", description: "Local time of a city",
                                   parameters: { type: "object", properties: { city: { type: "string", maxLength: 16 } },
                                                 required: ["city"], additionalProperties: false } } },
];
const ajv = new (Ajv2020.default ?? Ajv2020)({ strict: false });
const validators = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
const question = [{ role: "user", content: "What is the weather in Paris?" }];

function checkCall(call, names) {
  assert.equal(call.type, "function");
  assert.match(call.id, /^call_[0-9a-f]{24}$/);
  assert.ok(names.includes(call.function.name), call.function.name);
  const args = JSON.parse(call.function.arguments);
  assert.ok(validators[call.function.name](args), `${call.function.arguments}: ${ajv.errorsText(validators[call.function.name].errors)}`);
}

// A message without the call ids (they differ between two requests) and with reasoning_content
// null when absent (ChatCompletionStream copies it only when a delta carries it).
function comparable(message) {
  const m = { role: message.role, content: message.content ?? null,
              reasoning_content: message.reasoning_content ?? null };
  if (message.tool_calls?.length)
    m.tool_calls = message.tool_calls.map((c) => ({ type: c.type, function: { name: c.function.name, arguments: c.function.arguments } }));
  return m;
}

async function both(params) {
  const whole = await openai.chat.completions.create(params);
  const stream = openai.chat.completions.stream(params);
  const streamed = await stream.finalChatCompletion();
  assert.deepEqual(comparable(streamed.choices[0].message), comparable(whole.choices[0].message));
  assert.equal(streamed.choices[0].finish_reason, whole.choices[0].finish_reason);
  return whole;
}

for (const [name, tool_choice] of [["named", { type: "function", function: { name: "get_weather" } }],
                                   ["required", "required"]]) {
  test(`agent loop with tool_choice ${name}: enforced call -> tool result -> final answer, streamed == non-streamed`, async () => {
    const messages = [...question];
    const params = { model: MODEL, messages, tools, tool_choice, parallel_tool_calls: false,
                     temperature: 0, max_tokens: 120 };
    const first = await both(params);
    const choice = first.choices[0];
    assert.equal(choice.finish_reason, "tool_calls", JSON.stringify(choice.message));
    assert.equal(choice.message.tool_calls.length, 1);
    checkCall(choice.message.tool_calls[0], name === "named" ? ["get_weather"] : ["get_weather", "get_time"]);
    assert.ok(!String(choice.message.content ?? "").includes("<think>"));
    assert.ok(first.usage.completion_tokens_details.reasoning_tokens >= 0);

    messages.push(choice.message);
    messages.push({ role: "tool", tool_call_id: choice.message.tool_calls[0].id, content: '{"temperature": 18, "sky": "clear"}' });
    const final = await both({ model: MODEL, messages, tools, temperature: 0, max_tokens: 24 });
    const answer = final.choices[0];
    assert.ok(["stop", "length", "tool_calls"].includes(answer.finish_reason), answer.finish_reason);
    if (answer.finish_reason !== "tool_calls") {
      assert.equal(typeof answer.message.content, "string");
      assert.ok(answer.message.content.length > 0);
    }
    assert.ok(!String(answer.message.content ?? "").includes("<think>"), answer.message.content);
    assert.ok(final.usage.prompt_tokens > first.usage.prompt_tokens, "the tool result is in the prompt");
  });
}

test("required with parallel calls allowed, at temperature 1 with seeds: every call valid", async () => {
  let called = 0;
  for (let seed = 1; seed <= 4; seed++) {
    const r = await openai.chat.completions.create({ model: MODEL, messages: question, tools, tool_choice: "required",
                                                     temperature: 1, seed, max_tokens: 200 });
    const c = r.choices[0];
    if (c.finish_reason === "length") continue;  // cut inside a call: returned as content
    assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c.message));
    assert.ok(c.message.tool_calls.length >= 1);
    for (const call of c.message.tool_calls) checkCall(call, ["get_weather", "get_time"]);
    called++;
  }
  assert.ok(called >= 2, `only ${called} of 4 seeds ended with calls`);
});

test("the client's runTools helper calls the named function with parsed arguments", async () => {
  const calls = [];
  const runner = openai.chat.completions.runTools({
    model: MODEL, messages: question, temperature: 0, max_tokens: 120,
    tool_choice: { type: "function", function: { name: "get_weather" } },
    tools: [{ type: "function", function: { name: "get_weather", parameters: weatherParams, parse: JSON.parse,
                                            function: (args) => { calls.push(args); return { temperature: 18 }; } } }],
  });
  await runner.done();
  assert.equal(calls.length, 1);
  assert.ok(validators.get_weather(calls[0]), JSON.stringify(calls[0]));
  const toolMessages = runner.messages.filter((m) => m.role === "tool");
  assert.equal(toolMessages.length, 1);
  assert.equal(toolMessages[0].content, '{"temperature":18}');
});

test("reasoning: the tiny model's empty think block never reaches content; tool_choice none parses nothing", async () => {
  const r = await openai.chat.completions.create({ model: MODEL, messages: question, temperature: 0, max_tokens: 16 });
  assert.ok(!r.choices[0].message.content.includes("<think>"), r.choices[0].message.content);
  assert.ok(!r.choices[0].message.content.includes("</think>"));
  assert.equal(r.choices[0].message.reasoning_content, null);
  assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 1);  // "\n\n" between <think> and </think>
  const off = await openai.chat.completions.create({ model: MODEL, messages: question, temperature: 0, max_tokens: 16,
                                                     chat_template_kwargs: { enable_thinking: false } });
  assert.ok(!off.choices[0].message.content.includes("<think>"));
  const none = await openai.chat.completions.create({ model: MODEL, messages: question, tools, tool_choice: "none",
                                                      temperature: 0, max_tokens: 16 });
  assert.equal(none.choices[0].message.tool_calls, undefined);
});

test("n > 1 and logprobs with an enforced call", async () => {
  const r = await openai.chat.completions.create({ model: MODEL, messages: question, tools, n: 3, temperature: 1, seed: 7,
                                                   tool_choice: { type: "function", function: { name: "get_time" } },
                                                   logprobs: true, max_tokens: 120 });
  assert.equal(r.choices.length, 3);
  for (const c of r.choices) {
    assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c.message));
    checkCall(c.message.tool_calls[0], ["get_time"]);
    assert.ok(c.logprobs.content.length > 0);
  }
});

test("bad tool parameters are 400s naming the parameter, and the server keeps serving", async () => {
  const many = Array.from({ length: 10000 }, (_, i) => ({ type: "function", function: { name: `f${i}` } }));
  const bad = [
    [{ tools: { type: "function" } }, "tools"],
    [{ tools: [{ type: "function", function: { description: "no name" } }] }, "tools[0].function.name"],
    [{ tools: [{ type: "function", function: { name: "f", parameters: "not a schema" } }] }, "tools[0].function.parameters"],
    [{ tools, tool_choice: { type: "function", function: { name: "unknown_fn" } } }, "tool_choice"],
    [{ tools: many }, "tools"],
  ];
  for (const [extra, param] of bad) {
    await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: question, max_tokens: 4, ...extra }),
      (e) => { assert.ok(e instanceof OpenAI.BadRequestError, String(e)); assert.equal(e.param, param); return true; });
  }
  const ok = await openai.chat.completions.create({ model: MODEL, messages: question, max_tokens: 4 });
  assert.equal(ok.choices.length, 1);
});

test("disaggregated (prefill on a prefill worker): the same enforced call and answer as aggregated at temperature 0", async () => {
  const disagg = await startServer({ mode: "disagg", args: ["--max-local-prefill-tokens", "1"] });
  const remote = client(disagg);
  const params = { model: MODEL, messages: question, tools, temperature: 0, max_tokens: 120,
                   tool_choice: { type: "function", function: { name: "get_weather" } } };
  const agg = await openai.chat.completions.create(params);
  const whole = await remote.chat.completions.create(params);
  const streamed = await remote.chat.completions.stream(params).finalChatCompletion();
  assert.equal(whole.choices[0].finish_reason, "tool_calls");
  checkCall(whole.choices[0].message.tool_calls[0], ["get_weather"]);
  assert.deepEqual(comparable(whole.choices[0].message), comparable(agg.choices[0].message));
  assert.deepEqual(comparable(streamed.choices[0].message), comparable(whole.choices[0].message));
  await disagg.stop();
});

test("--tool-call-parser qwen3_coder: the forced call is Qwen3-Coder's XML form and parses back typed", async () => {
  const coder = await startServer({ args: ["--tool-call-parser", "qwen3_coder"] });
  const r = await client(coder).chat.completions.create({
    model: MODEL, messages: question, tools, temperature: 0, max_tokens: 160,
    tool_choice: { type: "function", function: { name: "get_weather" } },
  });
  assert.equal(r.choices[0].finish_reason, "tool_calls", JSON.stringify(r.choices[0].message));
  checkCall(r.choices[0].message.tool_calls[0], ["get_weather"]);
  await coder.stop();
});
