#!/usr/bin/env node
// Load test for minfer serve (a benchmark, not a unit test): N concurrent
// streaming chat clients for M seconds on loopback against a running
// server. Reports requests/s, generated tokens/s, time to first token
// p50/p99, errors (must be 0), and that no KV cells leak (once the clients
// stop: no active or queued request, and no more cells used than the
// sequences' cached prompts hold, minfer_kv_tokens_held).
//
//   node tests/serve/load.mjs --url http://127.0.0.1:8080 --clients 32 --seconds 30 \
//        --prompt-tokens 128 --max-tokens 256 [--api-key KEY] [--json]
// Exits 1 when any request failed or cells leaked.
import { parseArgs } from "node:util";

const { values: o } = parseArgs({
  options: {
    url: { type: "string", default: "http://127.0.0.1:8080" },
    clients: { type: "string", default: "32" },
    seconds: { type: "string", default: "30" },
    "prompt-tokens": { type: "string", default: "128" },
    "max-tokens": { type: "string", default: "256" },
    "api-key": { type: "string" },
    json: { type: "boolean", default: false },
  },
});
const N = Number(o.clients), SECONDS = Number(o.seconds);
const headers = { "Content-Type": "application/json" };
if (o["api-key"]) headers.Authorization = "Bearer " + o["api-key"];

async function metrics() {
  const t = await (await fetch(o.url + "/metrics", { headers })).text();
  const m = {};
  for (const l of t.split("\n"))
    if (l && !l.startsWith("#")) m[l.slice(0, l.lastIndexOf(" "))] = Number(l.slice(l.lastIndexOf(" ") + 1));
  return m;
}

// A prompt of about n tokens: distinct per client and request, so the
// prefix cache helps only with the shared system line, as in real traffic.
async function promptOf(n, salt) {
  const words = [];
  for (let i = 0; words.length < n; i++) words.push(`w${(i * 7919 + salt) % 1000}`);
  return words.join(" ");
}

const ttft = [];
let requests = 0, tokens = 0, errors = 0;
const firstErrors = [];
const deadline = Date.now() + SECONDS * 1000;

async function client(id) {
  for (let k = 0; Date.now() < deadline; k++) {
    const t0 = performance.now();
    let first = 0;
    try {
      const res = await fetch(o.url + "/v1/chat/completions", {
        method: "POST", headers,
        body: JSON.stringify({
          messages: [{ role: "system", content: "You are a load test." },
            { role: "user", content: await promptOf(Number(o["prompt-tokens"]) / 2, id * 1000 + k) }],
          max_tokens: Number(o["max-tokens"]), ignore_eos: true, stream: true,
        }),
      });
      if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = "", done = false;
      while (!done) {
        const r = await reader.read();
        if (r.done) break;
        buf += dec.decode(r.value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const ev = buf.slice(6, i);
          buf = buf.slice(i + 2);
          if (ev === "[DONE]") { done = true; break; }
          const j = JSON.parse(ev);
          if (j.error) throw new Error(j.error.message);
          if (j.choices[0]?.delta?.content !== undefined || j.choices[0]?.finish_reason === null) {
            if (!first) first = performance.now();
            tokens++;
          }
        }
      }
      if (!done) throw new Error("stream ended without [DONE]");
      requests++;
      ttft.push(first - t0);
    } catch (e) {
      errors++;
      if (firstErrors.length < 5) firstErrors.push(String(e.message || e));
    }
  }
}

const before = await metrics();
const tStart = performance.now();
await Promise.all(Array.from({ length: N }, (_, i) => client(i)));
const wall = (performance.now() - tStart) / 1000;
let after = await metrics();
for (let i = 0; i < 100 && after.minfer_requests_active > 0; i++) {
  await new Promise((r) => setTimeout(r, 50));
  after = await metrics();
}
const gen = after.minfer_tokens_generated_total - before.minfer_tokens_generated_total;
const pct = (a, p) => {
  if (!a.length) return NaN;
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
// Cells no sequence accounts for are leaked (shared prefixes make the
// tokens held exceed the cells used, never the reverse).
const leak = after.minfer_requests_active !== 0 || after.minfer_requests_queued !== 0 ||
  after.minfer_kv_cells_used > after.minfer_kv_tokens_held;
const report = {
  clients: N, seconds: wall, requests, errors,
  requests_per_s: requests / wall,
  tokens_per_s: gen / wall, client_tokens_per_s: tokens / wall,
  ttft_p50_ms: pct(ttft, 50), ttft_p99_ms: pct(ttft, 99),
  kv_cells_used_after: after.minfer_kv_cells_used, kv_cells_total: after.minfer_kv_cells_total,
  kv_tokens_held_after: after.minfer_kv_tokens_held,
  requests_active_after: after.minfer_requests_active, leak,
};
if (o.json) console.log(JSON.stringify(report));
else {
  console.log(`${N} clients, ${wall.toFixed(1)} s: ${requests} requests (${report.requests_per_s.toFixed(2)}/s), ` +
    `${report.tokens_per_s.toFixed(1)} generated tokens/s, TTFT p50 ${report.ttft_p50_ms.toFixed(1)} ms ` +
    `p99 ${report.ttft_p99_ms.toFixed(1)} ms, errors ${errors}, ` +
    `after: ${after.minfer_requests_active} active, ${after.minfer_kv_cells_used}/${after.minfer_kv_cells_total} cells used ` +
    `for ${after.minfer_kv_tokens_held} cached tokens` +
    (leak ? " — LEAK" : ""));
  for (const e of firstErrors) console.log("error: " + e);
}
process.exit(errors || leak ? 1 : 0);
