// API keys: --api-key KEY and the environment variable TANDEM_API_KEY. Every /v1 request needs
// "Authorization: Bearer KEY", else 401 with an OpenAI error body; /health and /metrics stay open.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  startServer, client, collect, joinChunks, post, curl, curlJson, assertErrorBody, golden, OpenAI, MODEL,
} from "./server.mjs";

const FLAG_KEY = "sk-tandem-flag-7f3a", ENV_KEY = "sk-tandem-env-19c2";
const servers = [
  ["--api-key", FLAG_KEY, await startServer({ args: ["--api-key", FLAG_KEY] })],
  ["TANDEM_API_KEY", ENV_KEY, await startServer({ env: { TANDEM_API_KEY: ENV_KEY } })],
];
const g = golden().generation.find((c) => !c.chat);
const chatBody = { model: MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 2, temperature: 0 };

for (const [how, key, server] of servers) {
  test(`${how}: the openai client with the right key works (chat, completions, stream, models)`, async () => {
    const openai = client(server, { apiKey: key });
    const r = await openai.completions.create({ model: MODEL, prompt: g.prompt, max_tokens: g.greedy_ids.length, temperature: 0 });
    assert.equal(r.choices[0].text, g.greedy_text);
    const c = await openai.chat.completions.create(chatBody);
    assert.equal(c.usage.completion_tokens, 2);
    const s = joinChunks(await collect(await openai.completions.create({
      model: MODEL, prompt: g.prompt, max_tokens: g.greedy_ids.length, temperature: 0, stream: true,
    })));
    assert.equal(s.texts.get(0), g.greedy_text);
    const models = [];
    for await (const m of await openai.models.list()) models.push(m.id);
    assert.deepEqual(models, [MODEL]);
  });

  test(`${how}: a wrong key -> 401 AuthenticationError from the openai client`, async () => {
    for (const wrong of ["sk-wrong", key + "x", key.slice(0, -1)]) {
      const openai = client(server, { apiKey: wrong });
      await assert.rejects(openai.chat.completions.create(chatBody), (e) => {
        assert.ok(e instanceof OpenAI.AuthenticationError, `${e?.constructor?.name}: ${e?.message}`);
        assert.equal(e.status, 401);
        assert.equal(e.type, "invalid_request_error");
        assert.equal(e.code, "invalid_api_key");
        return true;
      });
      await assert.rejects(openai.completions.create({ model: MODEL, prompt: "hi", max_tokens: 1, stream: true }),
        (e) => e instanceof OpenAI.AuthenticationError);
      await assert.rejects(openai.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
    }
  });

  test(`${how}: missing or malformed Authorization -> 401 with an error body (curl and fetch)`, async () => {
    for (const [pathname, body] of [["/v1/chat/completions", chatBody], ["/v1/completions", { prompt: "hi", max_tokens: 1 }]]) {
      const none = await curlJson(server, pathname, body);
      assert.equal(none.status, 401, none.body);
      assertErrorBody(assert, JSON.parse(none.body), { code: "invalid_api_key" }, `curl ${pathname} without a key`);
      for (const header of [`Authorization: ${key}`, `Authorization: Basic ${key}`, "Authorization: Bearer ",
        `X-Api-Key: ${key}`]) {
        const r = await curlJson(server, pathname, body, ["-H", header]);
        assert.equal(r.status, 401, `${header}: ${r.body}`);
        assertErrorBody(assert, JSON.parse(r.body), {}, header);
      }
      const good = await curlJson(server, pathname, body, ["-H", `Authorization: Bearer ${key}`]);
      assert.equal(good.status, 200, good.body);
    }
    const models = await curl([`${server.url}/v1/models`]);
    assert.equal(models.status, 401);
    assertErrorBody(assert, JSON.parse(models.body), {}, "GET /v1/models");
    // Authentication comes before parsing: a malformed body without a key is still a 401.
    const bad = await post(server, "/v1/chat/completions", "{not json");
    assert.equal(bad.status, 401, bad.text);
    assertErrorBody(assert, bad.json, {}, "malformed without key");
  });

  test(`${how}: /health and /metrics need no key`, async () => {
    const h = await curl([`${server.url}/health`]);
    assert.equal(h.status, 200, h.body);
    const m = await curl([`${server.url}/metrics`]);
    assert.equal(m.status, 200);
    assert.match(m.body, /^tandem_kv_blocks_total \d+/m);
    assert.match(m.body, /tandem_requests_total\{[^}]*status="401"[^}]*\} [1-9]/, "401s are counted");
  });
}
