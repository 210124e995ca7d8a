// minfer serve over plain HTTP (Node's fetch): every route, streaming vs
// non-streaming equality, greedy answers equal `minfer run`, 32 concurrent
// clients, disconnect frees the sequence's cells, every error class,
// --timeout, SIGTERM during streams. Run by ctest (serve-api).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  startServer, post, stream, metrics, until, minferRun, readEvents,
} from "./lib.mjs";

const CHAT = "/v1/chat/completions";
const COMP = "/v1/completions";
const greedy = { temperature: 0 };

test("routes: health, models, tokenize, detokenize, metrics, page, 404, 405", async () => {
  const s = await startServer();
  try {
    let r = await fetch(s.base + "/health");
    assert.equal(r.status, 200);
    assert.deepEqual(await r.json(), { status: "ok" });
    r = await fetch(s.base + "/v1/models");
    const models = await r.json();
    assert.equal(models.object, "list");
    assert.equal(models.data[0].object, "model");
    assert.match(models.data[0].id, /\.gguf$/);

    const ref = minferRun(["-p", "hello world", "-n", "0"]);
    const tk = await post(s.base, "/tokenize", { content: "hello world" });
    assert.equal(tk.status, 200);
    assert.deepEqual(tk.json.tokens, ref.prompt_ids, "/tokenize differs from minfer run's ids");
    const pieces = await post(s.base, "/tokenize", { content: "hi", with_pieces: true });
    assert.deepEqual(pieces.json.tokens.map((t) => t.piece).join(""), "hi");
    const dt = await post(s.base, "/detokenize", { tokens: tk.json.tokens });
    assert.equal(dt.json.content, "hello world");

    const m = await fetch(s.base + "/metrics");
    assert.match(m.headers.get("content-type"), /^text\/plain/);
    const text = await m.text();
    for (const name of ["minfer_requests_total", "minfer_requests_active",
      "minfer_requests_queued", "minfer_prompt_tokens_total", "minfer_tokens_generated_total",
      "minfer_kv_cells_used", "minfer_kv_cells_total",
      "minfer_time_to_first_token_seconds_bucket", "minfer_time_per_output_token_seconds_bucket"])
      assert.ok(text.includes(name), "/metrics lacks " + name);
    assert.match(text, /minfer_requests_total\{route="\/tokenize",status="200"\} 2/);

    r = await fetch(s.base + "/");
    assert.equal(r.status, 200);
    assert.match(await r.text(), /<title>minfer chat<\/title>/);

    r = await fetch(s.base + "/v1/nope");
    assert.equal(r.status, 404);
    assert.equal((await r.json()).error.type, "not_found_error");
    r = await fetch(s.base + CHAT);
    assert.equal(r.status, 405);
  } finally {
    assert.equal((await s.stop()).code, 0);
  }
});

test("greedy completions and chat equal minfer run; stream equals non-stream", async () => {
  const s = await startServer();
  try {
    const ref = minferRun(["-p", "The quick brown fox", "-n", "24"]);
    const a = await post(s.base, COMP, { prompt: "The quick brown fox", max_tokens: 24, ...greedy });
    assert.equal(a.status, 200);
    assert.equal(a.json.object, "text_completion");
    assert.equal(a.json.choices[0].text, ref.text, "completion differs from minfer run");
    assert.equal(a.json.usage.prompt_tokens, ref.prompt_ids.length);
    assert.equal(a.json.usage.completion_tokens, ref.generated_ids.length);
    assert.equal(a.json.usage.total_tokens, a.json.usage.prompt_tokens + a.json.usage.completion_tokens);
    assert.equal(a.json.choices[0].finish_reason, "length");

    const ids = await post(s.base, COMP, { prompt: ref.prompt_ids, max_tokens: 24, ...greedy });
    assert.equal(ids.json.choices[0].text, ref.text, "a prompt of ids differs from its text");

    const st = await stream(s.base, COMP, { prompt: "The quick brown fox", max_tokens: 24, ...greedy });
    assert.ok(st.done, "stream did not end with [DONE]");
    assert.equal(st.events.map((e) => e.choices[0].text).join(""), ref.text);
    assert.equal(st.events.at(-1).choices[0].finish_reason, "length");

    const cref = minferRun(["--chat", "-p", "hello there", "-n", "20"]);
    const body = { messages: [{ role: "user", content: "hello there" }], max_tokens: 20, ...greedy };
    const c = await post(s.base, CHAT, body);
    assert.equal(c.json.object, "chat.completion");
    assert.equal(c.json.choices[0].message.role, "assistant");
    assert.equal(c.json.choices[0].message.content, cref.text, "chat differs from minfer run --chat");
    assert.equal(c.json.usage.prompt_tokens, cref.prompt_ids.length);
    // Content as an array of text parts renders the same prompt.
    const parts = await post(s.base, CHAT, { ...body, messages: [{ role: "user",
      content: [{ type: "text", text: "hello " }, { type: "text", text: "there" }] }] });
    assert.equal(parts.json.choices[0].message.content, cref.text);

    const cs = await stream(s.base, CHAT, { ...body, stream_options: { include_usage: true } });
    assert.ok(cs.done);
    assert.equal(cs.events[0].object, "chat.completion.chunk");
    assert.equal(cs.events[0].choices[0].delta.role, "assistant");
    const content = cs.events.filter((e) => e.choices.length)
      .map((e) => e.choices[0].delta.content || "").join("");
    assert.equal(content, cref.text, "streamed chat differs from non-streamed");
    const last = cs.events.at(-1);
    assert.deepEqual(last.choices, []);
    assert.deepEqual(last.usage, c.json.usage);

    // Several prompts: one choice each, in order, each its own answer.
    const ref2 = minferRun(["-p", "Another prompt", "-n", "12"]);
    const ref1 = minferRun(["-p", "The quick brown fox", "-n", "12"]);
    const multi = await post(s.base, COMP, { prompt: ["The quick brown fox", "Another prompt"],
      max_tokens: 12, ...greedy });
    assert.deepEqual(multi.json.choices.map((ch) => [ch.index, ch.text]),
      [[0, ref1.text], [1, ref2.text]]);
  } finally {
    await s.stop();
  }
});

test("stop strings, logprobs, seeds, max_tokens 0", async () => {
  const s = await startServer();
  try {
    const ref = minferRun(["-p", "stop here", "-n", "40"]);
    // A stop string taken from inside the greedy text: the reply ends before it.
    const cp = [...ref.text];
    const at = cp.findIndex((ch, i) => i >= 3 && ch.trim() && !cp.slice(0, i).join("").includes(ch));
    if (at > 0) {
      const stop = cp[at];
      const expect = cp.slice(0, at).join("");
      const r = await post(s.base, COMP, { prompt: "stop here", max_tokens: 40, stop: [stop], ...greedy });
      assert.equal(r.json.choices[0].text, expect, "stop string not cut at its first match");
      assert.equal(r.json.choices[0].finish_reason, "stop");
      const st = await stream(s.base, COMP, { prompt: "stop here", max_tokens: 40, stop, ...greedy });
      assert.equal(st.events.map((e) => e.choices[0].text).join(""), expect);
      assert.equal(st.events.at(-1).choices[0].finish_reason, "stop");
    }
    const lp = await post(s.base, CHAT, { messages: [{ role: "user", content: "x" }], max_tokens: 5,
      logprobs: true, top_logprobs: 3, ...greedy });
    const content = lp.json.choices[0].logprobs.content;
    assert.equal(content.length, 5);
    for (const e of content) {
      assert.ok(e.logprob <= 0 && Number.isFinite(e.logprob));
      assert.equal(e.top_logprobs.length, 3);
      // greedy: the chosen token is the most likely one
      assert.equal(e.top_logprobs[0].logprob, e.logprob);
      assert.ok(Array.isArray(e.bytes));
    }
    const clp = await post(s.base, COMP, { prompt: "x", max_tokens: 4, logprobs: 2, ...greedy });
    assert.equal(clp.json.choices[0].logprobs.tokens.length, 4);
    assert.equal(clp.json.choices[0].logprobs.token_logprobs.length, 4);

    const seeded = { prompt: "seed", max_tokens: 16, temperature: 1.5, top_k: 0, top_p: 1,
      min_p: 0, seed: 1234 };
    const x = await post(s.base, COMP, seeded);
    const y = await post(s.base, COMP, seeded);
    assert.equal(x.json.choices[0].text, y.json.choices[0].text, "same seed, different text");
    const pen = await post(s.base, COMP, { ...seeded, presence_penalty: 1.5,
      frequency_penalty: 1, repeat_penalty: 1.3 });
    assert.equal(pen.status, 200);

    const zero = await post(s.base, COMP, { prompt: "abc", max_tokens: 0 });
    assert.equal(zero.json.choices[0].text, "");
    assert.equal(zero.json.usage.completion_tokens, 0);
  } finally {
    await s.stop();
  }
});

test("32 concurrent clients each get their own correct answer", async () => {
  const s = await startServer(["--parallel", "8", "--max-queue", "64"]);
  try {
    const prompts = Array.from({ length: 32 }, (_, i) => `client ${i} says ${"ab".repeat(i % 5)}`);
    const refs = prompts.map((p) => minferRun(["-p", p, "-n", "16"]).text);
    const answers = await Promise.all(prompts.map(async (p, i) => {
      const body = { prompt: p, max_tokens: 16, ...greedy };
      if (i % 2) {
        const st = await stream(s.base, COMP, body);
        return st.events.map((e) => e.choices[0].text).join("");
      }
      return (await post(s.base, COMP, body)).json.choices[0].text;
    }));
    answers.forEach((a, i) => assert.equal(a, refs[i], `client ${i} got another answer`));
    const m = await metrics(s.base);
    assert.ok(m["minfer_kv_cells_used"] <= m["minfer_kv_tokens_held"],
      `${m["minfer_kv_cells_used"]} cells used but the sequences hold ${m["minfer_kv_tokens_held"]} tokens`);
    // Continuous batching: passes carried several sequences on average.
    const perStep = m["minfer_batch_sequences_total"] / m["minfer_decode_steps_total"];
    assert.ok(perStep > 2, `only ${perStep.toFixed(2)} sequences per forward pass`);
    assert.equal(m["minfer_requests_active"], 0);
    assert.equal(m["minfer_requests_queued"], 0);
    assert.equal(m['minfer_requests_total{route="/v1/completions",status="200"}'], 32);
  } finally {
    await s.stop();
  }
});

test("chunked prefill: a long prompt does not stall a running stream", async () => {
  const s = await startServer(["-c", "32768", "--parallel", "2", "-b", "16"]);
  try {
    const res = await fetch(s.base + COMP, {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: "running", max_tokens: 15000, ignore_eos: true, stream: true }),
    });
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let events = 0, pending = "";
    const count = async () => {
      const { value } = await reader.read();
      pending += dec.decode(value);
      const parts = pending.split("\n\n");
      pending = parts.pop();
      events += parts.length;
    };
    await count();
    // 3,000 prompt tokens at -b 16 take ~190 passes; each must also carry
    // the running stream's next token.
    let finished = false;
    const long = post(s.base, COMP, { prompt: Array(3000).fill(97), max_tokens: 1 })
      .then((r) => { finished = true; return r; });
    const before = events;
    while (!finished) await count();
    const r = await long;
    assert.equal(r.status, 200);
    assert.ok(events - before >= 100,
      `the stream got ${events - before} tokens while a 3000-token prompt was prefilled`);
  } finally {
    await s.stop();
  }
});

test("the prefix cache reuses a shared prompt prefix", async () => {
  const s = await startServer(["-c", "32768"]);
  try {
    const system = "You are a helpful assistant. ".repeat(8);
    const ask = (q) => post(s.base, CHAT, { messages: [{ role: "system", content: system },
      { role: "user", content: q }], max_tokens: 4, ...greedy });
    const ref = minferRun(["--chat", "--system", system, "-p", "second", "-n", "4"]);
    await ask("first question");
    const before = (await metrics(s.base))["minfer_prompt_tokens_cached_total"];
    const r = await ask("second");
    const after = (await metrics(s.base))["minfer_prompt_tokens_cached_total"];
    assert.ok(after - before >= 100, `only ${after - before} prompt tokens came from the cache`);
    assert.equal(r.json.choices[0].message.content, ref.text, "a cached prefix changed the answer");

    // A prefix held by a sequence still running is forked (cells shared).
    const ac = new AbortController();
    const res = await fetch(s.base + CHAT, {
      method: "POST", signal: ac.signal, headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ messages: [{ role: "system", content: system },
        { role: "user", content: "keep talking" }], max_tokens: 20000, ignore_eos: true,
      stream: true }),
    });
    await res.body.getReader().read();
    const ref3 = minferRun(["--chat", "--system", system, "-p", "third", "-n", "4"]);
    const b3 = (await metrics(s.base))["minfer_prompt_tokens_cached_total"];
    const r3 = await ask("third");
    const a3 = (await metrics(s.base))["minfer_prompt_tokens_cached_total"];
    assert.ok(a3 - b3 >= 100, `only ${a3 - b3} prompt tokens forked from the running sequence`);
    assert.equal(r3.json.choices[0].message.content, ref3.text, "a forked prefix changed the answer");
    const m = await metrics(s.base);
    assert.ok(m["minfer_kv_cells_used"] < m["minfer_kv_tokens_held"],
      `no cells are shared: ${m["minfer_kv_cells_used"]} used, ${m["minfer_kv_tokens_held"]} held`);
    ac.abort();
  } finally {
    await s.stop();
  }
});

test("a client that disconnects mid-stream frees its cells", async () => {
  const s = await startServer(["-c", "32768"]);
  try {
    const ac = new AbortController();
    const res = await fetch(s.base + COMP, {
      method: "POST", signal: ac.signal, headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: "never ending", max_tokens: 30000, ignore_eos: true, stream: true }),
    });
    const reader = res.body.getReader();
    let got = 0;
    while (got < 2000) got += (await reader.read()).value.length;
    const busy = await metrics(s.base);
    assert.ok(busy["minfer_kv_cells_used"] > 0, "no cells in use while streaming");
    ac.abort();
    await until(async () => {
      const m = await metrics(s.base);
      return m["minfer_kv_cells_used"] === 0 && m["minfer_requests_active"] === 0;
    }, 10000, "kv_cells_used back to 0 after the disconnect");
    // The request's log line is written when the HTTP library completes
    // the connection, which may come after the engine freed the cells.
    await until(async () => /client gone, cancelled/.test(s.log()), 5000, "the cancelled request's log line");

    // A non-streaming request has no writes to fail: the engine sees the
    // closed socket of its suspended connection.
    const ac2 = new AbortController();
    const pending = fetch(s.base + COMP, {
      method: "POST", signal: ac2.signal, headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: "quiet", max_tokens: 30000, ignore_eos: true }),
    }).catch((e) => e);
    await until(async () => (await metrics(s.base))["minfer_requests_active"] === 1, 5000, "start");
    ac2.abort();
    assert.equal((await pending).name, "AbortError");
    await until(async () => {
      const m = await metrics(s.base);
      return m["minfer_kv_cells_used"] === 0 && m["minfer_requests_active"] === 0;
    }, 5000, "kv_cells_used back to 0 after a non-streaming client left");
    await until(async () => /POST \/v1\/completions 499 .*client gone, cancelled/.test(s.log()), 5000,
                "the 499 log line of the non-streaming request");
  } finally {
    await s.stop();
  }
});

test("errors: 400 per field, 401, 404, 413, 503 queue full, --timeout", async () => {
  const s = await startServer(["-c", "32768", "--api-key", "sekret", "--max-body", "300000",
    "--parallel", "1", "--max-queue", "0", "--timeout", "1.5"]);
  const auth = { Authorization: "Bearer sekret" };
  const msgs = [{ role: "user", content: "hi" }];
  const bad = async (body, param, re, path = CHAT) => {
    const r = await post(s.base, path, body, auth);
    assert.equal(r.status, 400, `${JSON.stringify(body).slice(0, 80)}: ${r.text}`);
    assert.equal(r.json.error.type, "invalid_request_error");
    assert.equal(r.json.error.param, param);
    assert.match(r.json.error.message, re);
    assert.ok("code" in r.json.error);
  };
  try {
    await bad("{not json", null, /not valid JSON/);
    await bad({ max_tokens: 4 }, "messages", /'messages' is required/);
    await bad({ messages: "hi" }, "messages", /must be an array/);
    await bad({ messages: msgs, temperature: "hot" }, "temperature", /must be a number/);
    await bad({ messages: msgs, temperature: 7 }, "temperature", /is 7 but must be between 0 and 2/);
    await bad({ messages: msgs, max_tokens: -5 }, "max_tokens", /is -5; it must be 0 or more/);
    await bad({ messages: msgs, tools: [] }, "tools", /'tools' is not supported/);
    await bad({ messages: msgs, n: 2 }, "n", /'n' is 2/);
    await bad({ messages: msgs, response_format: { type: "json_object" } }, "response_format",
      /response_format/);
    await bad({ messages: [{ role: "robot", content: "x" }] }, "messages[0].role", /robot/);
    await bad({ prompt: [1, 2, 99999] }, "prompt", /outside the vocabulary/, COMP);
    await bad({ prompt: Array(40000).fill(65) }, "prompt", /40000 tokens but a sequence holds at most 32768/, COMP);

    let r = await post(s.base, CHAT, { messages: msgs });
    assert.equal(r.status, 401, "no key accepted");
    assert.equal(r.json.error.code, "invalid_api_key");
    r = await post(s.base, CHAT, { messages: msgs }, { Authorization: "Bearer wrong" });
    assert.equal(r.status, 401, "wrong key accepted");
    r = await fetch(s.base + "/health");
    assert.equal(r.status, 200, "/health needs no key");
    r = await fetch(s.base + "/nothing-here", { headers: auth });
    assert.equal(r.status, 404);

    r = await post(s.base, COMP, { prompt: "x".repeat(300001) }, auth);
    assert.equal(r.status, 413);
    assert.equal(r.json.error.code, "request_too_large");

    // One sequence, no queue: a second request while one streams is refused.
    const ac = new AbortController();
    const long = await fetch(s.base + COMP, {
      method: "POST", signal: ac.signal, headers: { "Content-Type": "application/json", ...auth },
      body: JSON.stringify({ prompt: "long", max_tokens: 30000, ignore_eos: true, stream: true }),
    });
    const reader = long.body.getReader();
    await reader.read();
    r = await post(s.base, COMP, { prompt: "second" }, auth);
    assert.equal(r.status, 503, "queue full but accepted");
    assert.equal(r.headers.get("retry-after"), "1");
    assert.equal(r.json.error.code, "queue_full");
    // --timeout 1.5: the long stream ends with finish_reason "length".
    let rest = "";
    const dec = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      rest += dec.decode(value);
    }
    assert.match(rest, /"finish_reason":"length"\}\]\}\n\ndata: \[DONE\]\n\n$/);
  } finally {
    await s.stop();
  }
});

test("SIGTERM during streams: every stream gets a final event, exit 0", async () => {
  const s = await startServer(["-c", "32768", "--parallel", "2"]);
  const open = await Promise.all([0, 1, 2].map(() => fetch(s.base + COMP, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: "stream on", max_tokens: 30000, ignore_eos: true, stream: true }),
  })));
  const bodies = open.map((r) => readEvents(r));
  await until(async () => (await metrics(s.base))["minfer_requests_active"] >= 1, 5000, "a stream");
  const exit = s.stop("SIGTERM");
  const results = await Promise.all(bodies);
  for (const { events, done } of results) {
    assert.ok(done, "a stream did not end with [DONE]");
    const last = events.at(-1);
    assert.ok(last.error || last.choices[0].finish_reason, "no final event");
  }
  assert.ok(results.some(({ events }) => events.at(-1).error?.message.match(/shutting down/)));
  const { code } = await exit;
  assert.equal(code, 0);
  assert.match(s.log(), /SIGTERM: ending in-flight requests/);
});

test("--api-key-file: the key is the file's first line", async () => {
  const { writeFileSync, mkdtempSync } = await import("node:fs");
  const dir = mkdtempSync("/tmp/minfer-serve-key-");
  writeFileSync(dir + "/key", "from-file\n");
  const s = await startServer(["--api-key-file", dir + "/key"]);
  try {
    let r = await fetch(s.base + "/v1/models", { headers: { Authorization: "Bearer from-file" } });
    assert.equal(r.status, 200);
    r = await fetch(s.base + "/v1/models", { headers: { Authorization: "Bearer from-fil" } });
    assert.equal(r.status, 401);
    r = await fetch(s.base + "/metrics");
    assert.equal(r.status, 401, "/metrics without the key");
  } finally {
    await s.stop();
  }
});

test("/health is 503 while the model loads, then a load failure exits 1", async () => {
  // A FIFO as the model: opening it blocks until a writer comes, so the
  // server sits in its loading phase for as long as the test wants.
  const { mkdtempSync, openSync, closeSync } = await import("node:fs");
  const { BIN, spawn } = await import("./lib.mjs");
  const dir = mkdtempSync("/tmp/minfer-serve-fifo-");
  execFileSync("mkfifo", [dir + "/model.gguf"]);
  const proc = spawn(BIN, ["serve", "-m", dir + "/model.gguf", "--port", "0"],
    { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  proc.stderr.on("data", (d) => { log += d; });
  const exited = new Promise((res) => proc.on("exit", (code) => res(code)));
  const port = await until(() => /listening on http:\/\/[^:]+:(\d+)/.exec(log)?.[1], 10000, "listen");
  const base = `http://127.0.0.1:${port}`;
  let r = await fetch(base + "/health");
  assert.equal(r.status, 503);
  assert.deepEqual(await r.json(), { status: "loading model" });
  r = await post(base, "/v1/completions", { prompt: "x" });
  assert.equal(r.status, 503);
  assert.equal(r.json.error.code, "loading");
  assert.equal(r.headers.get("retry-after"), "1");
  closeSync(openSync(dir + "/model.gguf", "w")); // the load now fails: not a regular file
  assert.equal(await exited, 1);
  assert.match(log, /not a regular file/);
});

test("Qwen3 enable_thinking renders as minfer run --no-think (fixture model)", async (t) => {
  const { existsSync } = await import("node:fs");
  const model = `${process.env.MINFER_FIXTURES_DIR}/models/fixture-qwen3moe-dev-f16.gguf`;
  if (!existsSync(model)) {
    t.skip("no fixture-qwen3moe-dev-f16.gguf under MINFER_FIXTURES_DIR");
    return;
  }
  const s = await startServer(["-c", "2048"], model);
  try {
    const body = (thinking) => ({ messages: [{ role: "user", content: "hi" }], max_tokens: 6,
      temperature: 0, enable_thinking: thinking });
    const off = minferRun(["--chat", "--no-think", "-p", "hi", "-n", "6"], model);
    const on = minferRun(["--chat", "-p", "hi", "-n", "6"], model);
    assert.notEqual(off.prompt_ids.length, on.prompt_ids.length, "--no-think changed nothing");
    const a = await post(s.base, CHAT, body(false));
    assert.equal(a.json.usage.prompt_tokens, off.prompt_ids.length);
    assert.equal(a.json.choices[0].message.content, off.text);
    const b = await post(s.base, CHAT, body(true));
    assert.equal(b.json.usage.prompt_tokens, on.prompt_ids.length);
    const c = await post(s.base, CHAT, { ...body(true), enable_thinking: undefined,
      chat_template_kwargs: { enable_thinking: false } });
    assert.equal(c.json.usage.prompt_tokens, off.prompt_ids.length);
  } finally {
    await s.stop();
  }
});

test("SIGINT while idle: exit 0", async () => {
  const s = await startServer();
  const { code } = await s.stop("SIGINT");
  assert.equal(code, 0);
  assert.match(s.log(), /SIGINT: ending in-flight requests/);
});
