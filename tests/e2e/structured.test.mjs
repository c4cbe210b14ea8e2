// Structured outputs through the official openai client: zodResponseFormat with
// chat.completions.parse (the client's own zod parse is the oracle), response_format json_schema
// and json_object, vLLM's guided_regex / guided_choice / guided_json on completions, streamed ==
// non-streamed with a seed, n > 1, logprobs, and a bad schema as a 400 naming its parameter.
// The bundled tiny Qwen3 has random weights: the grammar alone makes its outputs parse.
import { test } from "node:test";
import assert from "node:assert/strict";
import { z } from "../tools/node_modules/zod/index.js";
import { zodResponseFormat } from "../tools/node_modules/openai/helpers/zod.mjs";
import { startServer, client, collect, joinChunks, NO_THINKING, MODEL, OpenAI } from "./server.mjs";

const server = await startServer();
const openai = client(server);
const messages = [{ role: "user", content: "Describe a person as JSON." }];

const Person = z.object({
  name: z.string().max(12),
  age: z.number().int().min(0).max(120),
  tags: z.array(z.enum(["admin", "dev", "ops"])).max(3),
  manager: z.boolean().nullable(),
});

test("zodResponseFormat round-trips through chat.completions.parse at temperature 1", async () => {
  for (let seed = 1; seed <= 5; seed++) {
    const r = await openai.chat.completions.parse({
      model: MODEL, messages, temperature: 1, seed, max_tokens: 300,
      chat_template_kwargs: NO_THINKING, response_format: zodResponseFormat(Person, "person"),
    });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, "stop", choice.message.content);
    assert.ok(choice.message.parsed, choice.message.content);
    Person.parse(choice.message.parsed);  // the client parsed it with zod already; again, to be sure
  }
});

test("response_format json_schema: streamed equals non-streamed with a seed, n > 1 all valid", async () => {
  const response_format = zodResponseFormat(Person, "person");
  const params = { model: MODEL, messages, temperature: 1, seed: 11, max_tokens: 300,
                   chat_template_kwargs: NO_THINKING, response_format };
  const whole = await openai.chat.completions.create(params);
  const streamed = joinChunks(await collect(await openai.chat.completions.create({ ...params, stream: true })));
  assert.equal(streamed.texts.get(0), whole.choices[0].message.content);
  Person.parse(JSON.parse(whole.choices[0].message.content));
  const many = await openai.chat.completions.create({ ...params, n: 4, logprobs: true, top_logprobs: 2 });
  assert.equal(many.choices.length, 4);
  for (const c of many.choices) {
    assert.equal(c.finish_reason, "stop");
    Person.parse(JSON.parse(c.message.content));
    assert.ok(c.logprobs.content.length > 0);
  }
});

test("json_object: a JSON object or, at max_tokens, a cut one that starts like one", async () => {
  const r = await openai.chat.completions.create({
    model: MODEL, messages, temperature: 0, max_tokens: 60, chat_template_kwargs: NO_THINKING,
    response_format: { type: "json_object" },
  });
  const text = r.choices[0].message.content;
  assert.ok(text.trimStart().startsWith("{"), text);
  if (r.choices[0].finish_reason === "stop") assert.equal(typeof JSON.parse(text), "object");
});

test("completions: guided_regex, guided_choice and guided_json (vLLM's extras)", async () => {
  const base = { model: MODEL, prompt: "Answer:", temperature: 1, max_tokens: 40 };
  for (let seed = 1; seed <= 4; seed++) {
    const re = await openai.completions.create({ ...base, seed, guided_regex: "[A-Z]{2}-\\d{3}" });
    assert.match(re.choices[0].text, /^[A-Z]{2}-\d{3}$/);
    assert.equal(re.choices[0].finish_reason, "stop");
    const ch = await openai.completions.create({ ...base, seed, guided_choice: ["left", "right", "up down"] });
    assert.ok(["left", "right", "up down"].includes(ch.choices[0].text), ch.choices[0].text);
    const js = await openai.completions.create({
      ...base, seed, max_tokens: 100, guided_json: { type: "array", items: { type: "integer", minimum: 0, maximum: 9 }, maxItems: 3 },
    });
    const v = JSON.parse(js.choices[0].text);
    assert.ok(Array.isArray(v) && v.length <= 3 && v.every((x) => Number.isInteger(x) && x >= 0 && x <= 9), js.choices[0].text);
  }
});

test("a schema tandem cannot enforce is a 400 naming its parameter, and the server keeps serving", async () => {
  await assert.rejects(
    openai.chat.completions.create({
      model: MODEL, messages, max_tokens: 5,
      response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "string", format: "hostname" } } },
    }),
    (e) => e instanceof OpenAI.APIError && e.status === 400 && e.param === "response_format.json_schema.schema" &&
      /hostname/.test(e.message),
  );
  await assert.rejects(
    openai.completions.create({ model: MODEL, prompt: "x", guided_regex: "(a" }),
    (e) => e instanceof OpenAI.APIError && e.status === 400 && e.param === "guided_regex",
  );
  const ok = await openai.completions.create({ model: MODEL, prompt: "x", max_tokens: 3, guided_choice: ["fine"] });
  assert.equal(ok.choices[0].text, "fine");
});
