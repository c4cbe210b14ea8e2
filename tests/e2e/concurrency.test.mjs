// Many clients at once: 64 concurrent streams each equal to its result alone; clients that
// disconnect mid-request have their KV blocks returned; a full waiting queue answers 503.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import {
  startServer, client, collect, joinChunks, post, parseSse, metrics, assertErrorBody, golden, goldenMessages,
  hfTokenizer, sleep, NO_THINKING, MODEL, tokenCounts,
} from "./server.mjs";

const server = await startServer();
const openai = client(server);
const g = golden();

// Distinct prompts: the golden ones (chat cases as chat) and a few more, chat and raw.
const prompts = [
  ...g.generation.map((c) => (c.chat ? { messages: goldenMessages(c) } : { prompt: c.prompt })),
  { prompt: "The weather in the mountains" }, { prompt: "She opened the letter and" },
  { prompt: "In 1961 the committee" }, { prompt: "The old man walked to" },
  { messages: [{ role: "user", content: "Describe the river." }] },
  { messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Who won?" }] },
  { messages: [{ role: "user", content: "日本語のテキスト" }] }, { prompt: "emoji 😀🎉 and" },
];

function create(p, extra = {}, options = {}) {
  const common = { model: MODEL, temperature: 0, max_tokens: 24, ...extra };
  return p.messages
    ? openai.chat.completions.create({ ...common, messages: p.messages, chat_template_kwargs: NO_THINKING }, options)
    : openai.completions.create({ ...common, prompt: p.prompt }, options);
}

async function streamOne(p) {
  const r = joinChunks(await collect(await create(p, { stream: true, stream_options: { include_usage: true } })));
  return { text: r.texts.get(0) ?? "", finish: r.finish.get(0), usage: r.usage };
}

async function gauges(s = server) {
  const m = await metrics(s);
  return {
    used: m.get("tandem_kv_blocks_used"), running: m.get("tandem_num_requests_running"),
    waiting: m.get("tandem_num_requests_waiting"),
  };
}

// Polls /metrics until no KV block is used and no request runs or waits (bounded).
async function waitIdle(s = server, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    last = await gauges(s);
    if (last.used === 0 && last.running === 0 && last.waiting === 0) return last;
    await sleep(100);
  }
  assert.fail(`not back to baseline within ${timeoutMs} ms: ${JSON.stringify(last)}`);
}

test("64 concurrent streaming clients each get the text they get alone", async () => {
  const alone = [];
  for (const p of prompts) alone.push(await streamOne(p));
  for (const a of alone) assert.ok(a.text.length > 0 && a.usage, JSON.stringify(a));
  // The golden ones equal the golden text cut at 24 tokens (a check on the reference itself).
  for (const [i, c] of g.generation.entries()) {
    const ids = c.greedy_ids.slice(0, 24);
    assert.equal(alone[i].text, ids.length < c.greedy_ids.length ? hfTokenizer().decode(ids) : c.greedy_text, `golden ${i}`);
    assert.equal(alone[i].usage.completion_tokens, ids.length, `golden ${i}`);
  }
  const before = await metrics(server);
  const N = 64;
  const started = Date.now();
  const results = await Promise.all(Array.from({ length: N }, (_, i) => streamOne(prompts[i % prompts.length])));
  const seconds = (Date.now() - started) / 1000;
  for (let i = 0; i < N; ++i) {
    const a = alone[i % prompts.length];
    assert.equal(results[i].text, a.text, `client ${i}`);
    assert.equal(results[i].finish, a.finish, `client ${i}`);
    assert.deepEqual(tokenCounts(results[i].usage), tokenCounts(a.usage), `client ${i}`);
  }
  const after = await metrics(server);
  const generated = after.get("tandem_generation_tokens_total") - before.get("tandem_generation_tokens_total");
  const expected = results.reduce((s, r) => s + r.usage.completion_tokens, 0);
  assert.equal(generated, expected, "tandem_generation_tokens_total counts the 64 requests");
  console.log(`# 64 concurrent streams: ${seconds.toFixed(1)} s, ${(expected / seconds).toFixed(0)} tok/s`);
  const h = await fetch(`${server.url}/health`);
  assert.equal(h.status, 200);
  await waitIdle();
});

test("a streaming client that aborts (AbortController) frees its KV blocks", async () => {
  assert.deepEqual(await waitIdle(), { used: 0, running: 0, waiting: 0 });
  const controller = new AbortController();
  const stream = await create({ prompt: "Once upon a time" }, { stream: true, ignore_eos: true, max_tokens: 2000 },
    { signal: controller.signal });
  let chunks = 0;
  // The openai client's stream ends quietly (no exception) once its signal is aborted.
  for await (const c of stream) {
    assert.ok(c.choices.length <= 1);
    if (++chunks === 5) {
      const busy = await gauges();
      assert.ok(busy.used > 0 && busy.running === 1, `while streaming: ${JSON.stringify(busy)}`);
      controller.abort();
    }
    assert.ok(chunks < 50, "the stream goes on after the abort");
  }
  assert.ok(controller.signal.aborted && chunks >= 5, `${chunks} chunks`);
  await waitIdle();
  const m = await metrics(server);
  assert.ok([...m.keys()].some((k) => k.startsWith("tandem_requests_total") && k.includes('status="499"')),
    "the disconnect is counted as status 499");
});

// A raw HTTP client that reads a few SSE events and destroys its socket.
function streamAndDestroy(body, events) {
  return new Promise((resolve, reject) => {
    const req = http.request(`${server.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" } }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`status ${res.statusCode}`));
      let seen = 0;
      res.on("data", async (d) => {
        seen += (d.toString().match(/^data: /gm) ?? []).length;
        if (seen >= events && !req.destroyed) {
          const busy = await gauges();
          req.destroy();
          resolve(busy);
        }
      });
      res.on("error", () => {});
    });
    req.on("error", (e) => { if (!req.destroyed) reject(e); });
    req.setTimeout(60_000, () => { req.destroy(); reject(new Error("timeout")); });
    req.end(JSON.stringify(body));
  });
}

test("a streaming client that destroys its socket frees its KV blocks; n=4 too", async () => {
  await waitIdle();
  for (const n of [1, 4]) {
    const busy = await streamAndDestroy({ model: MODEL, prompt: "He looked at her and", max_tokens: 2000, ignore_eos: true, stream: true, n }, 4 * n);
    assert.ok(busy.used > 0, JSON.stringify(busy));
    await waitIdle();
  }
});

test("a non-streaming client that goes away frees its KV blocks", async () => {
  await waitIdle();
  const controller = new AbortController();
  const pending = fetch(`${server.url}/v1/completions`, {
    method: "POST", headers: { "content-type": "application/json" }, signal: controller.signal,
    body: JSON.stringify({ model: MODEL, prompt: "The jury said", max_tokens: 2000, ignore_eos: true }),
  });
  const deadline = Date.now() + 10_000;
  while ((await gauges()).running === 0 && Date.now() < deadline) await sleep(50);
  assert.equal((await gauges()).running, 1, "the request runs");
  await sleep(500);
  controller.abort();
  await assert.rejects(pending);
  // 2000 tokens would take far longer than 10 s: only a cancellation gets back to baseline.
  await waitIdle();
});

test("after the disconnects the server still serves the golden text", async () => {
  const c = g.generation[0];
  const r = await openai.completions.create({ model: MODEL, prompt: c.prompt, max_tokens: c.greedy_ids.length, temperature: 0 });
  assert.equal(r.choices[0].text, c.greedy_text);
  await waitIdle();
});

test("--max-num-seqs 1 --max-waiting-requests 1: a full queue answers 503, the others finish", async () => {
  const small = await startServer({ args: ["--max-num-seqs", "1", "--max-waiting-requests", "1"] });
  const N = 8, tokens = 48;
  const results = await Promise.all(Array.from({ length: N }, (_, i) => post(small, "/v1/completions", {
    model: MODEL, prompt: "The president of the United States", max_tokens: tokens, ignore_eos: true, temperature: 0,
    stream: i % 2 === 1, ...(i % 2 === 1 ? { stream_options: { include_usage: true } } : {}),
  })));
  const rejected = results.filter((r) => r.status === 503);
  const served = results.filter((r) => r.status === 200);
  assert.ok(rejected.length >= 1, `statuses ${results.map((r) => r.status)}`);
  assert.equal(rejected.length + served.length, N, `statuses ${results.map((r) => r.status)}`);
  assert.ok(served.length >= 2, `statuses ${results.map((r) => r.status)}`);
  for (const r of rejected) assertErrorBody(assert, r.json, { type: "server_error" }, "503");
  const texts = new Set();
  for (const r of served) {
    if (r.json) {
      assert.equal(r.json.usage.completion_tokens, tokens);
      texts.add(r.json.choices[0].text);
    } else {
      const { events, done } = parseSse(r.text);
      assert.ok(done, r.text.slice(-200));
      const j = joinChunks(events);
      assert.equal(j.usage.completion_tokens, tokens);
      texts.add(j.texts.get(0));
    }
  }
  assert.equal(texts.size, 1, "greedy: every served request has the same text");
  await waitIdle(small);
  const ok = await post(small, "/v1/completions", { model: MODEL, prompt: "hi", max_tokens: 2 });
  assert.equal(ok.status, 200, ok.text);

  // A waiting request whose client goes away leaves the queue; then the running one is cancelled.
  const long = { model: MODEL, prompt: "Once upon a time", max_tokens: 2000, ignore_eos: true, stream: true };
  const running = new AbortController(), waiting = new AbortController();
  const start = (c) => fetch(`${small.url}/v1/completions`, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(long), signal: c.signal,
  }).then((r) => r.body.getReader().read().then(() => r.status)).catch((e) => e.name);
  const a = start(running);
  const deadline = Date.now() + 10_000;
  while ((await gauges(small)).running === 0 && Date.now() < deadline) await sleep(50);
  const b = start(waiting);
  while ((await gauges(small)).waiting === 0 && Date.now() < deadline) await sleep(50);
  const both = await gauges(small);
  assert.ok(both.running === 1 && both.waiting === 1, JSON.stringify(both));
  waiting.abort();
  await b;
  const queueDeadline = Date.now() + 10_000;
  let g2 = await gauges(small);
  while (g2.waiting !== 0 && Date.now() < queueDeadline) { await sleep(100); g2 = await gauges(small); }
  assert.equal(g2.waiting, 0, "the abandoned waiting request left the queue");
  assert.equal(g2.running, 1, "the first request still runs");
  running.abort();
  await a;
  await waitIdle(small);
});
