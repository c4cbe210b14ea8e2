// Request parameters through the official openai client: n + seed, stop, logprobs, echo,
// ignore_eos, max_completion_tokens, chat_template_kwargs; multi-byte text and streamed ==
// non-streamed on many prompts.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  startServer, client, collect, joinChunks, golden, goldenMessages, hfTokenizer, NO_THINKING, MODEL,
  tokenCounts, metrics,
} from "./server.mjs";

const server = await startServer();
const openai = client(server);
const g = golden();
const hf = hfTokenizer();
const raw0 = g.generation.find((c) => c.prompt === "The jury said");
const chat0 = g.generation.find((c) => c.chat && typeof c.messages === "string");
const chatShort = g.generation.find((c) => c.chat && c.greedy_ids.length < 32);
assert.ok(raw0 && chat0 && chatShort, "golden cases used below");

const complete = (params) => openai.completions.create({ model: MODEL, temperature: 0, ...params });
const chat = (params) => openai.chat.completions.create({
  model: MODEL, temperature: 0, chat_template_kwargs: NO_THINKING, ...params,
});
const streamed = async (create, params) => joinChunks(await collect(await create({ ...params, stream: true })));

// ---- usage.prompt_tokens_details.cached_tokens -----------------------------------------------

test("a repeated prompt reports its prefix-cache hit in usage.prompt_tokens_details.cached_tokens", async () => {
  // Words no other test sends, so the first request finds nothing of it cached.
  const prompt = Array.from({ length: 60 }, (_, i) => `zebra${i} quartz${(i * 7) % 13}`).join(" ");
  const first = await complete({ prompt, max_tokens: 2 });
  const before = await metrics(server);
  const second = await complete({ prompt, max_tokens: 2 });
  const after = await metrics(server);
  const n = first.usage.prompt_tokens;
  assert.equal(tokenCounts(first.usage).prompt_tokens, n);
  assert.equal(first.usage.prompt_tokens_details.cached_tokens, 0, JSON.stringify(first.usage));
  const cached = tokenCounts(second.usage) && second.usage.prompt_tokens_details.cached_tokens;
  // Whole blocks (16 tokens) of the prompt, short of its last token (which is always computed).
  assert.ok(cached >= 16 && cached % 16 === 0 && cached <= n - 1, `cached ${cached} of ${n}`);
  assert.equal(cached, after.get("tandem_prefix_cache_hits_total") - before.get("tandem_prefix_cache_hits_total"),
    "usage agrees with /metrics");
});

// ---- n and seed -------------------------------------------------------------------------------

test("n=3 with temperature 0.8 and a seed: 3 choices, indexes 0..2, reproducible", async () => {
  const params = { prompt: "Once upon a time", n: 3, temperature: 0.8, seed: 1234, max_tokens: 12, ignore_eos: true };
  const a = await complete(params);
  const b = await complete(params);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text), "same seed, same choices");
  assert.ok(new Set(a.choices.map((c) => c.text)).size > 1, `3 samples at T=0.8 all equal: ${a.choices[0].text}`);
  const promptLen = g.generation.find((c) => c.prompt === "Once upon a time").prompt_ids.length;
  assert.deepEqual(tokenCounts(a.usage), { prompt_tokens: promptLen, completion_tokens: 36, total_tokens: promptLen + 36 });
  // Streamed with the same seed: the same text per choice index.
  const s = await streamed(complete, { ...params, stream_options: { include_usage: true } });
  assert.deepEqual([...s.texts.keys()].sort(), [0, 1, 2]);
  for (const c of a.choices) assert.equal(s.texts.get(c.index), c.text, `choice ${c.index}`);
  assert.deepEqual(tokenCounts(s.usage), tokenCounts(a.usage));
  // A different seed gives different samples.
  const other = await complete({ ...params, seed: 99 });
  assert.notDeepEqual(other.choices.map((c) => c.text), a.choices.map((c) => c.text));
});

test("n=3 chat with a seed: reproducible, choice i uses seed + i", async () => {
  const params = { messages: goldenMessages(chat0), n: 3, temperature: 0.8, seed: 7, max_tokens: 10, ignore_eos: true };
  const a = await chat(params);
  const b = await chat(params);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  // openai_server.h: "with a seed, choice i uses seed + i".
  const one = await chat({ ...params, n: 1, seed: 8 });
  assert.equal(one.choices[0].message.content, a.choices[1].message.content);
});

// ---- stop -------------------------------------------------------------------------------------

const full = raw0.greedy_text;
for (const [name, stop, at] of [
  ["a string on token boundaries", "the jury", full.indexOf("the jury")],
  ["a string starting and ending inside tokens", "old the ju", full.indexOf("old the ju")],
  ["a list (earliest match wins)", ["phone", "had asked"], Math.min(full.indexOf("phone"), full.indexOf("had asked"))],
]) {
  test(`stop as ${name}`, async () => {
    assert.ok(at > 0, "the stop string occurs in the unstopped golden text");
    const expected = full.slice(0, at);
    const stops = Array.isArray(stop) ? stop : [stop];
    const params = { prompt: raw0.prompt, max_tokens: 32, stop };
    const r = await complete(params);
    assert.equal(r.choices[0].text, expected);
    assert.equal(r.choices[0].finish_reason, "stop");
    const s = await streamed(complete, params);
    assert.equal(s.texts.get(0), expected, "streamed text");
    assert.equal(s.finish.get(0), "stop");
    for (const d of s.deltas.get(0))
      for (const st of stops) assert.ok(!d.includes(st), `delta ${JSON.stringify(d)} leaks ${st}`);
    // Chat: the same cut of the golden chat text.
    const cf = chat0.greedy_text, word = "power to";
    const cr = await chat({ messages: goldenMessages(chat0), max_tokens: 32, stop: [word] });
    assert.equal(cr.choices[0].message.content, cf.slice(0, cf.indexOf(word)));
    assert.equal(cr.choices[0].finish_reason, "stop");
  });
}

test("a stop string never matched: partial matches held back are flushed at length and at EOS", async () => {
  // " a fire" ends the golden text at the length limit; "work." ends the other one before EOS.
  const eos = g.generation.find((c) => !c.chat && c.greedy_ids.length < 32);
  for (const [c, stop, finish] of [[raw0, "a fire!!", "length"], [eos, ["work.!", "zzz"], "stop"]]) {
    for (const n of [1, 2]) {
      const params = { prompt: c.prompt, max_tokens: 32, stop, n };
      const r = await complete(params);
      const s = await streamed(complete, { ...params, stream_options: { include_usage: true } });
      for (let i = 0; i < n; ++i) {
        assert.equal(r.choices[i].text, c.greedy_text, `n=${n} choice ${i}`);
        assert.equal(r.choices[i].finish_reason, finish);
        assert.equal(s.texts.get(i), c.greedy_text, `streamed n=${n} choice ${i}`);
        assert.equal(s.finish.get(i), finish);
      }
      assert.deepEqual(tokenCounts(s.usage), tokenCounts(r.usage));
    }
  }
});

test("stop: usage equal streamed and not; a match at the very start gives empty text", async () => {
  const params = { prompt: raw0.prompt, max_tokens: 32, stop: "jury" };
  const r = await complete(params);
  const s = await streamed(complete, { ...params, stream_options: { include_usage: true } });
  assert.deepEqual(tokenCounts(s.usage), tokenCounts(r.usage));
  assert.ok(r.usage.completion_tokens < 32);
  const first = await complete({ ...params, stop: raw0.greedy_text.slice(0, 3) });
  assert.equal(first.choices[0].text, "");
  assert.equal(first.choices[0].finish_reason, "stop");
});

test("chat stop string never appears in a streamed delta", async () => {
  const cf = chat0.greedy_text, word = "I have the";
  const s = await streamed(chat, { messages: goldenMessages(chat0), max_tokens: 32, stop: word });
  assert.equal(s.texts.get(0), cf.slice(0, cf.indexOf(word)));
  for (const d of s.deltas.get(0)) assert.ok(!d.includes(word), `delta ${JSON.stringify(d)}`);
});

// ---- logprobs ---------------------------------------------------------------------------------

function checkChatLogprobs(content, text, numTokens) {
  assert.equal(content.length, numTokens);
  for (const e of content) {
    assert.equal(typeof e.token, "string");
    assert.equal(typeof e.logprob, "number");
    assert.ok(e.logprob <= 0, `logprob ${e.logprob}`);
    assert.ok(Array.isArray(e.bytes));
    assert.equal(e.top_logprobs.length, 5);
    for (const t of e.top_logprobs) assert.deepEqual(Object.keys(t).sort(), ["bytes", "logprob", "token"]);
    for (let k = 1; k < 5; ++k) assert.ok(e.top_logprobs[k - 1].logprob >= e.top_logprobs[k].logprob);
    // Greedy: the chosen token is the most likely one.
    assert.equal(e.token, e.top_logprobs[0].token);
    assert.ok(Math.abs(e.logprob - e.top_logprobs[0].logprob) < 1e-6);
  }
  assert.equal(Buffer.from(content.flatMap((e) => e.bytes)).toString("utf8"), text, "bytes join to the text");
}

function checkTop5First(top, c) {
  const byText = new Map(top.map((t) => [t.token, t.logprob]));
  for (const [id, lp] of c.top5_first) {
    const text = hf.decode([id]);
    assert.ok(byText.has(text), `golden top-5 token ${id} ${JSON.stringify(text)} missing from ${JSON.stringify(top)}`);
    assert.ok(Math.abs(byText.get(text) - lp) < 1e-3, `token ${id}: ${byText.get(text)} vs golden ${lp}`);
  }
}

test("chat logprobs + top_logprobs 5: shape, golden top-5 of the first step, streamed equal", async () => {
  const params = { messages: goldenMessages(chat0), max_tokens: chat0.greedy_ids.length, logprobs: true, top_logprobs: 5 };
  const r = await chat(params);
  const choice = r.choices[0];
  assert.equal(choice.message.content, chat0.greedy_text);
  checkChatLogprobs(choice.logprobs.content, choice.message.content, chat0.greedy_ids.length);
  checkTop5First(choice.logprobs.content[0].top_logprobs, chat0);
  assert.equal(choice.logprobs.content[0].token, hf.decode([chat0.greedy_ids[0]]));
  const chunks = await collect(await chat({ ...params, stream: true }));
  const entries = chunks.flatMap((ch) => ch.choices.flatMap((c) => c.logprobs?.content ?? []));
  assert.deepEqual(entries, choice.logprobs.content, "streamed logprobs == non-streamed");
});

test("chat logprobs true without top_logprobs: entries with empty top_logprobs", async () => {
  const r = await chat({ messages: goldenMessages(chat0), max_tokens: 4, logprobs: true });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 4);
  for (const e of content) assert.deepEqual(e.top_logprobs, []);
});

test("completions logprobs 3: tokens, token_logprobs, top_logprobs, text_offset; golden top-3", async () => {
  const r = await complete({ prompt: raw0.prompt, max_tokens: raw0.greedy_ids.length, logprobs: 3 });
  const { text, logprobs } = r.choices[0];
  assert.equal(text, raw0.greedy_text);
  const n = raw0.greedy_ids.length;
  assert.equal(logprobs.tokens.length, n);
  assert.equal(logprobs.token_logprobs.length, n);
  assert.equal(logprobs.top_logprobs.length, n);
  assert.equal(logprobs.text_offset.length, n);
  assert.equal(logprobs.tokens.join(""), text);
  let offset = 0;
  for (let i = 0; i < n; ++i) {
    assert.equal(logprobs.text_offset[i], offset, `text_offset[${i}]`);
    offset += logprobs.tokens[i].length;  // ASCII tokens here: bytes == characters
    const top = logprobs.top_logprobs[i];
    const k = Object.keys(top).length;
    assert.ok(k >= 3 && k <= 4, `top_logprobs[${i}] has ${k} entries`);
    assert.ok(Math.abs(top[logprobs.tokens[i]] - logprobs.token_logprobs[i]) < 1e-6);
  }
  assert.ok(Math.abs(logprobs.token_logprobs[0] - raw0.top5_first[0][1]) < 1e-3);
  for (const [id, lp] of raw0.top5_first.slice(0, 3)) {
    const t = hf.decode([id]);
    assert.ok(Math.abs(logprobs.top_logprobs[0][t] - lp) < 1e-3, `first step ${JSON.stringify(t)}`);
  }
});

// ---- echo, ignore_eos, max_completion_tokens, chat_template_kwargs -----------------------------

test("echo on completions: the prompt then the completion, streamed and not, text and ids prompts", async () => {
  const expected = raw0.prompt + raw0.greedy_text;
  const params = { prompt: raw0.prompt, max_tokens: raw0.greedy_ids.length, echo: true };
  const r = await complete(params);
  assert.equal(r.choices[0].text, expected);
  assert.equal(r.usage.completion_tokens, raw0.greedy_ids.length);
  assert.equal((await streamed(complete, params)).texts.get(0), expected);
  const ids = await complete({ ...params, prompt: raw0.prompt_ids });
  assert.equal(ids.choices[0].text, expected);
  assert.equal(ids.usage.prompt_tokens, raw0.prompt_ids.length);
});

test("ignore_eos with max_tokens 40 generates 40 tokens past the golden EOS", async () => {
  const params = { messages: goldenMessages(chatShort), max_tokens: 40, ignore_eos: true };
  const r = await chat(params);
  assert.equal(r.usage.completion_tokens, 40);
  assert.equal(r.choices[0].finish_reason, "length");
  assert.ok(r.choices[0].message.content.startsWith(chatShort.greedy_text), r.choices[0].message.content);
  const s = await streamed(chat, { ...params, stream_options: { include_usage: true } });
  assert.equal(s.texts.get(0), r.choices[0].message.content);
  assert.equal(s.usage.completion_tokens, 40);
  // Without ignore_eos it stops on EOS.
  const stop = await chat({ ...params, ignore_eos: false });
  assert.equal(stop.usage.completion_tokens, chatShort.greedy_ids.length);
  assert.equal(stop.choices[0].finish_reason, "stop");
});

test("max_completion_tokens limits the completion and wins over max_tokens", async () => {
  const r = await chat({ messages: goldenMessages(chat0), max_tokens: 20, max_completion_tokens: 5 });
  assert.equal(r.usage.completion_tokens, 5);
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.choices[0].message.content, hf.decode(chat0.greedy_ids.slice(0, 5)));
  const only = await chat({ messages: goldenMessages(chat0), max_completion_tokens: 3 });
  assert.equal(only.usage.completion_tokens, 3);
});

test("chat_template_kwargs enable_thinking changes the prompt as the golden renders say", async () => {
  for (const t of g.chat_template) {
    const kwargs = "enable_thinking" in t ? { enable_thinking: t.enable_thinking } : undefined;
    const r = await openai.chat.completions.create({
      model: MODEL, temperature: 0, max_tokens: 1, messages: t.messages,
      ...(kwargs ? { chat_template_kwargs: kwargs } : {}),
    });
    assert.equal(r.usage.prompt_tokens, hf.encodeSpecial(t.rendered).length, JSON.stringify(t.messages));
  }
  const msgs = [{ role: "user", content: "Hi" }];
  const off = await chat({ messages: msgs, max_tokens: 1, chat_template_kwargs: { enable_thinking: false } });
  const on = await chat({ messages: msgs, max_tokens: 1, chat_template_kwargs: { enable_thinking: true } });
  const none = await openai.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 1 });
  assert.ok(off.usage.prompt_tokens > on.usage.prompt_tokens, `${off.usage.prompt_tokens} vs ${on.usage.prompt_tokens}`);
  assert.equal(none.usage.prompt_tokens, on.usage.prompt_tokens, "the template's default thinks");
});

// ---- multi-byte text, streamed == non-streamed ------------------------------------------------

// The golden tokenizer texts without special-token text (those ids were made with special tokens
// parsed; completion prompts are plain text): CJK, emoji with modifiers and flags, accents.
const texts = g.tokenizer.filter((t) => !t.text.includes("<|")).map((t) => t);
assert.ok(texts.some((t) => /[^\x00-\x7f]/.test(t.text)), "non-ASCII golden texts");

test("multi-byte prompts round-trip through echo; usage counts the golden ids", async () => {
  for (const t of texts) {
    const params = { prompt: t.text, max_tokens: 8, echo: true };
    const r = await complete(params);
    const out = r.choices[0].text;
    assert.ok(Buffer.from(out).subarray(0, Buffer.byteLength(t.text)).equals(Buffer.from(t.text)),
      `echo of ${JSON.stringify(t.text)}: ${JSON.stringify(out)}`);
    assert.equal(r.usage.prompt_tokens, t.ids.length, JSON.stringify(t.text));
    const s = await streamed(complete, params);
    assert.equal(s.texts.get(0), out, `streamed echo of ${JSON.stringify(t.text)}`);
  }
});

test("streamed == non-streamed, byte for byte, on many prompts (chat and completions)", async () => {
  const prompts = [...texts.map((t) => t.text), ...g.generation.filter((c) => !c.chat).map((c) => c.prompt),
    "Ünïcödé → ∑ 😀 中文", "Write in Chinese: 你好", "🇺🇸🇯🇵🇩🇪"];
  let nonAscii = 0;
  for (const p of prompts) {
    for (const [create, params, textOf] of [
      [complete, { prompt: p, max_tokens: 24 }, (r) => r.choices[0].text],
      [chat, { messages: [{ role: "user", content: p }], max_tokens: 24 }, (r) => r.choices[0].message.content],
    ]) {
      const r = await create(params);
      const s = await streamed(create, { ...params, stream_options: { include_usage: true } });
      assert.ok(Buffer.from(s.texts.get(0) ?? "").equals(Buffer.from(textOf(r))), `${JSON.stringify(p)}: ${JSON.stringify(s.texts.get(0))} vs ${JSON.stringify(textOf(r))}`);
      assert.ok(!textOf(r).includes("\ufffd"), `replacement character in ${JSON.stringify(textOf(r))}`);
      assert.deepEqual(tokenCounts(s.usage), tokenCounts(r.usage));
      if (/[^\x00-\x7f]/.test(textOf(r))) ++nonAscii;
    }
  }
  // Chat prompt tokens: the rendered text, tokenized by the oracle.
  for (const t of texts) {
    const r = await chat({ messages: [{ role: "user", content: t.text }], max_tokens: 1 });
    const rendered = `<|im_start|>user\n${t.text}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n`;
    assert.equal(r.usage.prompt_tokens, hf.encodeSpecial(rendered).length, JSON.stringify(t.text));
  }
  console.log(`# ${nonAscii} outputs contained non-ASCII text`);
});

test("seeded sampling that emits multi-byte text: streamed == non-streamed byte for byte", async () => {
  // Greedy outputs of this English-trained model stay ASCII; sampling at a high temperature from
  // a CJK prompt emits CJK, Hangul, Arabic, ... and byte-level tokens (partial UTF-8), which the
  // incremental detokenizer must hold back until complete, so deltas join to the same bytes.
  let nonAscii = 0;
  for (let seed = 1; seed <= 8; ++seed) {
    for (const [create, params, textOf] of [
      [complete, { prompt: "中文分词测试，你好世界！", max_tokens: 16 }, (r) => r.choices[0].text],
      [chat, { messages: [{ role: "user", content: "日本語のテキスト 😀" }], max_tokens: 16 }, (r) => r.choices[0].message.content],
    ]) {
      const p = { ...params, temperature: 1.5, seed };
      const r = await create(p);
      const s = await streamed(create, { ...p, stream_options: { include_usage: true } });
      assert.ok(Buffer.from(s.texts.get(0) ?? "").equals(Buffer.from(textOf(r))),
        `seed ${seed}: ${JSON.stringify(s.texts.get(0))} vs ${JSON.stringify(textOf(r))}`);
      assert.deepEqual(tokenCounts(s.usage), tokenCounts(r.usage));
      if (/[^\x00-\x7f]/.test(textOf(r))) ++nonAscii;
    }
  }
  assert.ok(nonAscii >= 4, `only ${nonAscii} of 16 sampled outputs had non-ASCII text`);
});
