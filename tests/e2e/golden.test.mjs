// Golden greedy outputs (Hugging Face transformers, tests/golden/tiny-qwen3.json) through the
// official openai client and curl: chat cases via /v1/chat/completions, raw prompts via
// /v1/completions; streamed and not, with usage.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  startServer, client, collect, joinChunks, curlJson, parseSse, golden, goldenMessages,
  NO_THINKING, MODEL, EOS_CUTOFF, tokenCounts,
} from "./server.mjs";

const server = await startServer();
const openai = client(server);
const cases = golden().generation;

function expectedFinish(c) {
  return c.greedy_ids.length < EOS_CUTOFF ? "stop" : "length";
}

function request(c, extra = {}) {
  const common = { model: MODEL, temperature: 0, max_tokens: c.greedy_ids.length, ...extra };
  return c.chat
    ? { ...common, messages: goldenMessages(c), chat_template_kwargs: NO_THINKING }
    : { ...common, prompt: c.prompt };
}

function create(c, params) {
  return c.chat ? openai.chat.completions.create(params) : openai.completions.create(params);
}

const textOf = (c, choice) => (c.chat ? choice.message.content : choice.text);
const label = (c) => `${c.chat ? "chat" : "completion"} ${JSON.stringify(c.prompt ?? c.messages)}`;

test("golden cases are present", () => {
  assert.ok(cases.some((c) => c.chat), "no chat case");
  assert.ok(cases.some((c) => !c.chat), "no raw prompt case");
});

// Non-streamed results, kept for the streamed comparisons below.
const nonStreamed = new Map();

for (const [i, c] of cases.entries()) {
  test(`golden ${i}: ${label(c)} non-streamed`, async () => {
    const r = await create(c, request(c));
    assert.equal(r.object, c.chat ? "chat.completion" : "text_completion");
    assert.match(r.id, c.chat ? /^chatcmpl-/ : /^cmpl-/);
    assert.equal(r.model, MODEL);
    assert.equal(r.choices.length, 1);
    const choice = r.choices[0];
    assert.equal(choice.index, 0);
    if (c.chat) assert.equal(choice.message.role, "assistant");
    assert.equal(textOf(c, choice), c.greedy_text);
    assert.equal(choice.finish_reason, expectedFinish(c));
    assert.equal(r.usage.completion_tokens, c.greedy_ids.length);
    assert.equal(r.usage.prompt_tokens, c.prompt_ids.length);
    assert.equal(r.usage.total_tokens, c.prompt_ids.length + c.greedy_ids.length);
    nonStreamed.set(i, r);
  });

  test(`golden ${i}: ${label(c)} streamed, include_usage`, async () => {
    const chunks = await collect(await create(c, request(c, {
      stream: true, stream_options: { include_usage: true },
    })));
    assert.ok(chunks.length >= 2, "too few chunks");
    const { texts, finish, usage } = joinChunks(chunks);
    assert.deepEqual([...texts.keys()], [0]);
    assert.equal(texts.get(0), c.greedy_text);
    assert.equal(finish.get(0), expectedFinish(c));
    const ids = new Set(chunks.map((ch) => ch.id));
    assert.equal(ids.size, 1, "one id across the chunks");
    for (const ch of chunks) assert.equal(ch.object, c.chat ? "chat.completion.chunk" : "text_completion");
    // The usage chunk is the last one, with no choices; every other chunk has usage null.
    const last = chunks.at(-1);
    assert.deepEqual(last.choices, []);
    for (const ch of chunks.slice(0, -1)) assert.equal(ch.usage, null);
    const ns = nonStreamed.get(i);
    assert.ok(ns, "the non-streamed test ran first");
    assert.deepEqual(tokenCounts(usage), tokenCounts(ns.usage));
    assert.equal(texts.get(0), textOf(c, ns.choices[0]), "stream == non-stream byte for byte");
  });

  test(`golden ${i}: ${label(c)} streamed without usage`, async () => {
    const chunks = await collect(await create(c, request(c, { stream: true })));
    const { texts, finish, usage } = joinChunks(chunks);
    assert.equal(texts.get(0), c.greedy_text);
    assert.equal(finish.get(0), expectedFinish(c));
    assert.equal(usage, null);
    for (const ch of chunks) assert.ok(!("usage" in ch) || ch.usage == null, JSON.stringify(ch));
  });
}

// curl: one chat and one completion case, streamed and not.
const chatCase = cases.find((c) => c.chat);
const rawCase = cases.find((c) => !c.chat);

for (const c of [chatCase, rawCase]) {
  const endpoint = c.chat ? "/v1/chat/completions" : "/v1/completions";
  test(`curl ${endpoint} non-streamed: ${label(c)}`, async () => {
    const { status, body } = await curlJson(server, endpoint, request(c));
    assert.equal(status, 200, body);
    const r = JSON.parse(body);
    assert.equal(textOf(c, r.choices[0]), c.greedy_text);
    assert.equal(r.choices[0].finish_reason, expectedFinish(c));
    assert.equal(r.usage.completion_tokens, c.greedy_ids.length);
    assert.equal(r.usage.prompt_tokens, c.prompt_ids.length);
  });

  test(`curl ${endpoint} streamed: ${label(c)}`, async () => {
    const { status, body } = await curlJson(server, endpoint,
      request(c, { stream: true, stream_options: { include_usage: true } }), ["-i"]);
    assert.equal(status, 200, body);
    const headerEnd = body.indexOf("\r\n\r\n");
    const headers = body.slice(0, headerEnd).toLowerCase();
    assert.match(headers, /content-type: text\/event-stream/);
    assert.match(headers, /x-request-id: (chatcmpl|cmpl)-[0-9a-f]+/);
    const { events, done } = parseSse(body.slice(headerEnd + 4));
    assert.ok(done, "stream ends with data: [DONE]");
    const { texts, finish, usage } = joinChunks(events);
    assert.equal(texts.get(0), c.greedy_text);
    assert.equal(finish.get(0), expectedFinish(c));
    assert.deepEqual(tokenCounts(usage), {
      prompt_tokens: c.prompt_ids.length, completion_tokens: c.greedy_ids.length,
      total_tokens: c.prompt_ids.length + c.greedy_ids.length,
    });
    const requestId = /x-request-id: (\S+)/.exec(headers)[1];
    for (const e of events) assert.equal(e.id, requestId, "x-request-id equals the body id");
  });
}

test("GET /v1/models lists the served model", async () => {
  const list = await openai.models.list();
  const ids = [];
  for await (const m of list) ids.push(m.id);
  assert.deepEqual(ids, [MODEL]);
});
