// Helpers the minfer serve tests share: start a server on a free port and
// stop it, read Server-Sent Events, read /metrics. Configured by the
// environment ctest sets (tests/serve/CMakeLists.txt): MINFER_BIN (the
// minfer binary) and MINFER_SERVE_MODEL (a tiny synthetic model).
import { spawn, execFileSync } from "node:child_process";
export { spawn };
import assert from "node:assert/strict";

export const BIN = process.env.MINFER_BIN;
export const MODEL = process.env.MINFER_SERVE_MODEL;
if (!BIN || !MODEL) {
  console.error("MINFER_BIN and MINFER_SERVE_MODEL must be set (ctest sets them)");
  process.exit(2);
}

// Starts `minfer serve -m MODEL --port 0 ARGS`; resolves when /health is 200.
export async function startServer(args = [], model = MODEL) {
  const proc = spawn(BIN, ["serve", "-m", model, "--port", "0", ...args], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let log = "";
  const exited = new Promise((res) => proc.on("exit", (code, sig) => res({ code, sig })));
  const port = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error("server did not start:\n" + log)), 20000);
    proc.stderr.on("data", (d) => {
      log += d;
      const m = /listening on http:\/\/[^:]+:(\d+)/.exec(log);
      if (m) {
        clearTimeout(t);
        resolve(Number(m[1]));
      }
    });
    exited.then(({ code }) => reject(new Error(`server exited ${code}:\n${log}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    const r = await fetch(base + "/health").catch(() => null);
    if (r && r.status === 200) break;
    if (i > 200) throw new Error("server never became healthy:\n" + log);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    proc, base, port, exited,
    log: () => log,
    async stop(signal = "SIGTERM") {
      proc.kill(signal);
      return exited;
    },
  };
}

export async function post(base, path, body, headers = {}) {
  const r = await fetch(base + path, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, headers: r.headers, text, json };
}

// Reads an SSE body to the end: the parsed data objects and whether
// [DONE] came last.
export async function readEvents(res) {
  const text = await res.text();
  const events = [];
  let done = false;
  for (const block of text.split("\n\n")) {
    if (!block.trim()) continue;
    assert.ok(block.startsWith("data: "), "SSE block without 'data: ': " + block);
    const data = block.slice(6);
    if (data === "[DONE]") { done = true; continue; }
    assert.ok(!done, "data after [DONE]");
    events.push(JSON.parse(data));
  }
  return { events, done };
}

export async function stream(base, path, body, headers = {}) {
  const r = await fetch(base + path, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: JSON.stringify({ ...body, stream: true }),
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-type"), /text\/event-stream/);
  return readEvents(r);
}

export async function metrics(base) {
  const text = await (await fetch(base + "/metrics")).text();
  const m = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const k = line.lastIndexOf(" ");
    m[line.slice(0, k)] = Number(line.slice(k + 1));
  }
  return m;
}

// Polls until f() is truthy (or fails after ms).
export async function until(f, ms, what) {
  const t0 = Date.now();
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() - t0 > ms) throw new Error("timed out waiting for " + what);
    await new Promise((r) => setTimeout(r, 25));
  }
}

// `minfer run` with greedy sampling: the reference a server's greedy answer
// must equal. ids from --json; text from the streamed stdout (its exact
// bytes less the final newline, NULs dropped as the server's JSON does).
export function minferRun(args, model = MODEL) {
  if (!args.includes("--chat")) args = ["--raw", ...args]; // completions: no chat template
  const run = (extra) => execFileSync(BIN, ["run", "-m", model, "--temp", "0", ...extra, ...args],
    { stdio: ["ignore", "pipe", "pipe"] });
  const json = JSON.parse(run(["--json"]).toString("utf8"));
  json.text = run([]).toString("utf8").replace(/\n$/, "").replaceAll("\0", "");
  return json;
}
