// End-to-end test helpers: start `tandem run --mode agg` on a free 127.0.0.1 port, wait for
// /health, stop it; the official openai client; curl and fetch wrappers; SSE and Prometheus
// parsing; the golden file and Hugging Face's JS tokenizer as oracles.
//
// Environment: TANDEM_BINARY (the tandem executable, required), TANDEM_MODEL_DIR (default
// models/tiny-qwen3 of the repository). The golden file is the repository's tests/golden/tiny-qwen3.json.
import { spawn, execFile } from "node:child_process";
import { readFileSync, existsSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { after } from "node:test";
import assert from "node:assert/strict";

import OpenAI from "../tools/node_modules/openai/index.mjs";
import { Tokenizer } from "../tools/node_modules/@huggingface/tokenizers/dist/tokenizers.mjs";

export { OpenAI };

const here = path.dirname(fileURLToPath(import.meta.url));
export const REPO_DIR = path.resolve(here, "../..");
export const GOLDEN_DIR = path.join(REPO_DIR, "tests/golden");
export const MODEL_DIR = process.env.TANDEM_MODEL_DIR || path.join(REPO_DIR, "models/tiny-qwen3");
export const BINARY = process.env.TANDEM_BINARY || path.join(REPO_DIR, "build/tandem");
export const MODEL = "tiny-qwen3";     // the served name: the model directory's name
export const MAX_MODEL_LEN = 4096;     // the bundled model's max_position_embeddings
export const EOS_CUTOFF = 32;          // golden runs generated at most 32 tokens

const HEALTH_TIMEOUT_MS = 60_000;
const STOP_GRACE_MS = 10_000;

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A port the kernel just handed out on 127.0.0.1 (bound to 0, then released).
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// Starts `tandem run --mode agg --port P [...args]` (mode "disagg": a frontend, a prefill and a
// decode worker), waits until GET /health is 200 (at most 60 s) and registers an after() hook
// that stops it. Returns {url, baseURL, port, proc, log(),
// stop()}. Retries with another port when the port was taken in between (at most 3 times).
// TANDEM_E2E_RUN_ARGS (space-separated) is added to every server's flags: ctest runs some files
// a second time with it (e.g. --async-scheduling, the overlapped engine loop).
export async function startServer({ args = [], env = {}, mode = "agg" } = {}) {
  if (!existsSync(BINARY)) throw new Error(`TANDEM_BINARY ${BINARY} does not exist`);
  args = [...args, ...(process.env.TANDEM_E2E_RUN_ARGS ?? "").split(" ").filter(Boolean)];
  let lastError;
  for (let attempt = 0; attempt < 3; ++attempt) {
    const port = await freePort();
    const server = launch(port, args, env, mode);
    after(() => server.stop());
    try {
      await server.ready;
      return server;
    } catch (e) {
      lastError = e;
      await server.stop();
      if (!/address in use|bind/i.test(server.log())) break;
    }
  }
  throw lastError;
}

// Safety net: a server still running when the test process exits is killed.
const live = new Set();
process.on("exit", () => { for (const p of live) try { p.kill("SIGKILL"); } catch {} });

function launch(port, args, env, mode = "agg") {
  const url = `http://127.0.0.1:${port}`;
  const proc = spawn(BINARY, ["run", "--mode", mode, "--host", "127.0.0.1", "--port", String(port), ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const keep = (d) => {
    output += d.toString();
    if (output.length > 200_000) output = output.slice(-100_000);
  };
  proc.stdout.on("data", keep);
  proc.stderr.on("data", keep);
  let exited = false;
  live.add(proc);
  proc.on("exit", () => live.delete(proc));
  const exit = new Promise((resolve) => proc.on("exit", (code, signal) => {
    exited = true;
    resolve({ code, signal });
  }));
  const log = () => output;

  const ready = (async () => {
    const deadline = Date.now() + HEALTH_TIMEOUT_MS;
    while (Date.now() < deadline) {
      if (exited) throw new Error(`tandem exited before /health was 200:\n${output}`);
      try {
        const r = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2000) });
        await r.text();
        if (r.status === 200) return;
      } catch {}
      await sleep(200);
    }
    throw new Error(`tandem: /health not 200 within ${HEALTH_TIMEOUT_MS} ms:\n${output}`);
  })();

  let stopped = null;
  const stop = () => {
    if (stopped) return stopped;
    stopped = (async () => {
      if (exited) return exit;
      proc.kill("SIGTERM");
      const t = setTimeout(() => { if (!exited) proc.kill("SIGKILL"); }, STOP_GRACE_MS);
      const result = await exit;
      clearTimeout(t);
      return result;
    })();
    return stopped;
  };
  return { url, baseURL: `${url}/v1`, port, proc, log, ready, stop, exited: () => exited, exit };
}

// usage without prompt_tokens_details and completion_tokens_details, after checking them:
// cached_tokens (OpenAI's prompt-cache field) is an integer in [0, prompt_tokens], reasoning_tokens
// (there with a reasoning parser) one in [0, completion_tokens]. For comparing the token counts of
// two requests, whose cache hits differ with what ran before.
export function tokenCounts(usage) {
  assert.ok(usage, "usage present");
  const cached = usage.prompt_tokens_details?.cached_tokens;
  assert.ok(Number.isInteger(cached) && cached >= 0 && cached <= usage.prompt_tokens,
    `prompt_tokens_details.cached_tokens: ${JSON.stringify(usage)}`);
  if (usage.completion_tokens_details !== undefined) {
    const r = usage.completion_tokens_details.reasoning_tokens;
    assert.ok(Number.isInteger(r) && r >= 0 && r <= usage.completion_tokens,
      `completion_tokens_details.reasoning_tokens: ${JSON.stringify(usage)}`);
  }
  const { prompt_tokens_details, completion_tokens_details, ...counts } = usage;
  return counts;
}

// The official client against a server; no retries (a retry would hide an error).
export function client(server, { apiKey = "unused", ...options } = {}) {
  return new OpenAI({ baseURL: server.baseURL, apiKey, maxRetries: 0, timeout: 300_000, ...options });
}

// POST JSON (or a raw string body) with fetch; returns {status, headers, text, json}.
export async function post(server, pathname, body, { headers = {}, method = "POST", timeoutMs = 300_000 } = {}) {
  const r = await fetch(`${server.url}${pathname}`, {
    method,
    headers: { "content-type": "application/json", ...headers },
    body: method === "GET" || method === "HEAD" ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await r.text();
  let json;
  try { json = JSON.parse(text); } catch {}
  return { status: r.status, headers: r.headers, text, json };
}

// curl with the given arguments; returns {status, body} (the status is curl's %{http_code}).
export function curl(args, { timeoutMs = 300_000 } = {}) {
  return new Promise((resolve, reject) => {
    execFile("curl", ["-sS", "--max-time", String(Math.ceil(timeoutMs / 1000)), "-w", "\n%{http_code}", ...args],
      { maxBuffer: 64 << 20, encoding: "buffer" }, (err, stdout, stderr) => {
        if (err) return reject(new Error(`curl ${args.join(" ")}: ${err.message} ${stderr}`));
        const out = stdout.toString("utf8");
        const cut = out.lastIndexOf("\n");
        resolve({ status: Number(out.slice(cut + 1)), body: out.slice(0, cut) });
      });
  });
}

// curl POST of a JSON body to `pathname`; -N so streams are not buffered.
export function curlJson(server, pathname, body, extra = []) {
  return curl(["-N", "-H", "content-type: application/json", ...extra, "--data-binary",
               typeof body === "string" ? body : JSON.stringify(body), `${server.url}${pathname}`]);
}

// SSE text -> the parsed JSON events; asserts the stream ends with `data: [DONE]` (done: true).
export function parseSse(text) {
  const events = [];
  let done = false;
  for (const block of text.split(/\r?\n\r?\n/)) {
    const lines = block.split(/\r?\n/).filter((l) => l.startsWith("data:"));
    if (lines.length === 0) continue;
    const data = lines.map((l) => l.slice(5).replace(/^ /, "")).join("\n");
    if (data === "[DONE]") { done = true; continue; }
    if (done) throw new Error(`SSE event after [DONE]: ${data}`);
    events.push(JSON.parse(data));
  }
  return { events, done };
}

// Joined text per choice index from chat or completion chunks (parsed JSON objects or the
// openai client's chunk objects). Returns {texts: Map(index -> text), finish: Map, usage, deltas}.
export function joinChunks(chunks) {
  const texts = new Map(), finish = new Map(), deltas = new Map();
  let usage = null;
  for (const c of chunks) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices ?? []) {
      const piece = ch.delta ? (ch.delta.content ?? "") : (ch.text ?? "");
      texts.set(ch.index, (texts.get(ch.index) ?? "") + piece);
      if (!deltas.has(ch.index)) deltas.set(ch.index, []);
      deltas.get(ch.index).push(piece);
      if (ch.finish_reason) finish.set(ch.index, ch.finish_reason);
    }
  }
  return { texts, finish, usage, deltas };
}

// Collects an openai client stream.
export async function collect(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

// Prometheus text -> Map(name{labels} -> number).
export function parseMetrics(text) {
  const m = new Map();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const sp = line.lastIndexOf(" ");
    m.set(line.slice(0, sp), Number(line.slice(sp + 1)));
  }
  return m;
}

// GET /metrics. Retried once when the pooled keep-alive socket turns out closed ("other side
// closed"): a test that blocked node's event loop for longer than the server's keep-alive timeout
// (5 s; e.g. loading the JS tokenizer on a loaded machine) finds the server's FIN only then.
export async function metrics(server) {
  const get = () => fetch(`${server.url}/metrics`, { signal: AbortSignal.timeout(10_000) });
  let r;
  try {
    r = await get();
  } catch (e) {
    if (e?.cause?.code !== "UND_ERR_SOCKET") throw e;
    r = await get();
  }
  return parseMetrics(await r.text());
}

// Asserts the OpenAI error body shape {"error":{"message","type","param","code"}}.
export function assertErrorBody(assert, json, { type, code, param } = {}, context = "") {
  assert.ok(json && typeof json === "object", `${context}: error body is not JSON: ${json}`);
  const e = json.error;
  assert.ok(e && typeof e === "object", `${context}: no "error" object: ${JSON.stringify(json)}`);
  for (const k of ["message", "type", "param", "code"])
    assert.ok(k in e, `${context}: error.${k} missing: ${JSON.stringify(json)}`);
  assert.equal(typeof e.message, "string", context);
  assert.ok(e.message.length > 0, `${context}: empty message`);
  assert.equal(typeof e.type, "string", context);
  assert.ok(e.param === null || typeof e.param === "string", `${context}: param ${e.param}`);
  assert.ok(e.code === null || typeof e.code === "string", `${context}: code ${e.code}`);
  if (type !== undefined) assert.equal(e.type, type, `${context}: ${JSON.stringify(json)}`);
  if (code !== undefined) assert.equal(e.code, code, `${context}: ${JSON.stringify(json)}`);
  if (param !== undefined) assert.equal(e.param, param, `${context}: ${JSON.stringify(json)}`);
}

// The golden file (Hugging Face transformers' outputs for the bundled model).
export function golden() {
  return JSON.parse(readFileSync(path.join(GOLDEN_DIR, "tiny-qwen3.json"), "utf8"));
}

// A golden generation case's chat messages (a string is one user message).
export function goldenMessages(c) {
  return typeof c.messages === "string" ? [{ role: "user", content: c.messages }] : c.messages;
}

// The golden chat cases were rendered with enable_thinking=false.
export const NO_THINKING = { enable_thinking: false };

// Hugging Face's JS tokenizer (an oracle no one here wrote). plain: special-token text is
// ordinary text (the special tokens are dropped from added_tokens, as tests/tools/hf_tokenize.mjs
// does).
let tokenizers = null;
export function hfTokenizer() {
  if (!tokenizers) {
    const json = JSON.parse(readFileSync(path.join(MODEL_DIR, "tokenizer.json"), "utf8"));
    let config = {};
    try { config = JSON.parse(readFileSync(path.join(MODEL_DIR, "tokenizer_config.json"), "utf8")); } catch {}
    const plainJson = structuredClone(json);
    plainJson.added_tokens = plainJson.added_tokens.filter((t) => !t.special);
    const special = new Tokenizer(json, config), plain = new Tokenizer(plainJson, config);
    tokenizers = {
      encodeSpecial: (text) => special.encode(text, { add_special_tokens: false }).ids,
      encodePlain: (text) => plain.encode(text, { add_special_tokens: false }).ids,
      decode: (ids) => special.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }),
    };
  }
  return tokenizers;
}
