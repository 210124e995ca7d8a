// The chat page (GET /) in a real headless browser: Debian's chromium
// driven by puppeteer-core. Loads /, sends a message and sees streamed text
// appear, keeps the conversation for a second turn, shows tokens/s, and
// stops a reply mid-stream (the server then frees the sequence). Run by
// ctest (serve-page).
import { test } from "node:test";
import assert from "node:assert/strict";
import puppeteer from "puppeteer-core";
import { startServer, metrics, until } from "./lib.mjs";

const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";

test("chat page: streams a reply, keeps the conversation, stops a reply", async () => {
  const s = await startServer(["-c", "32768"]);
  const browser = await puppeteer.launch({
    executablePath: CHROMIUM, headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  try {
    const page = await browser.newPage();
    const requests = [];
    page.on("request", (r) => { if (r.method() === "POST") requests.push(r.postData()); });
    // Bound every reply (an untrained model may never emit end-of-generation);
    // the test changes window.__extra to shape the next request.
    await page.evaluateOnNewDocument(() => {
      window.__extra = { max_tokens: 48, ignore_eos: true };
      const f = window.fetch;
      window.fetch = (url, opts) => {
        if (opts && opts.body)
          opts = { ...opts, body: JSON.stringify({ ...JSON.parse(opts.body), ...window.__extra }) };
        return f(url, opts);
      };
    });
    await page.goto(s.base + "/", { waitUntil: "load" });
    assert.equal(await page.title(), "minfer chat");
    await page.waitForFunction(() => document.getElementById("model").textContent.endsWith(".gguf"));

    await page.type("#input", "hello page");
    await page.click("#send");
    await page.waitForFunction(
      () => document.querySelector(".assistant") && document.getElementById("send").disabled === false,
      { timeout: 20000 });
    const first = await page.$eval(".assistant", (e) => e.textContent);
    assert.ok(first.length > 0, "no streamed text appeared");
    assert.equal(await page.$(".error"), null, "the reply ended in an error: " + first);
    assert.match(await page.$eval("#stats", (e) => e.textContent), /tokens, [\d.]+ t\/s/);

    // The second turn sends the whole conversation.
    await page.type("#input", "and again");
    await page.click("#send");
    await page.waitForFunction(() => document.getElementById("send").disabled === false);
    const sent = JSON.parse(requests.at(-1));
    assert.deepEqual(sent.messages.map((m) => m.role), ["user", "assistant", "user"]);
    assert.equal(sent.messages[1].content.length > 0, true);

    // A reply that would not end by itself: stop it from the page.
    await page.evaluate(() => { window.__extra = { ignore_eos: true, max_tokens: 30000 }; });
    await page.type("#input", "long one");
    await page.click("#send");
    await page.waitForFunction(() => document.querySelectorAll(".assistant")[2]?.textContent.length > 50);
    await page.click("#stop");
    await page.waitForFunction(() => document.querySelectorAll(".assistant")[2].textContent.endsWith("[stopped]"));
    await until(async () => {
      const m = await metrics(s.base);
      return m["minfer_requests_active"] === 0;
    }, 10000, "the stopped reply's sequence to end");
    // logged when the HTTP library completes the connection, maybe after the engine is done
    await until(async () => /client gone, cancelled/.test(s.log()), 5000, "the stopped request's log line");
  } finally {
    await browser.close();
    await s.stop();
  }
});
