// The official `openai` npm package (pinned in package.json) drives
// minfer serve as a real client would: chat and completions, streaming and
// not, with an API key, and its typed errors. Run by ctest (serve-openai).
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startServer, minferRun } from "./lib.mjs";

test("openai client: chat and completions, streaming and not, errors", async () => {
  const s = await startServer(["--api-key", "k-123", "--parallel", "2"]);
  try {
    const client = new OpenAI({ baseURL: s.base + "/v1", apiKey: "k-123", maxRetries: 0 });
    const models = await client.models.list();
    const model = models.data[0].id;
    assert.match(model, /\.gguf$/);

    const ref = minferRun(["--chat", "-p", "Say something", "-n", "16"]);
    const chat = await client.chat.completions.create({
      model, messages: [{ role: "user", content: "Say something" }], max_tokens: 16, temperature: 0,
    });
    assert.equal(chat.object, "chat.completion");
    assert.equal(chat.choices[0].message.content, ref.text);
    assert.equal(chat.usage.completion_tokens, ref.generated_ids.length);

    const st = await client.chat.completions.create({
      model, messages: [{ role: "user", content: "Say something" }], max_completion_tokens: 16,
      temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    let text = "", usage = null, finish = null;
    for await (const chunk of st) {
      if (chunk.usage) usage = chunk.usage;
      const c = chunk.choices[0];
      if (c) {
        text += c.delta.content ?? "";
        finish = c.finish_reason ?? finish;
      }
    }
    assert.equal(text, ref.text, "streamed chat differs from the non-streamed one");
    assert.deepEqual(usage, chat.usage);
    assert.equal(finish, chat.choices[0].finish_reason);

    const cref = minferRun(["-p", "Once upon a time", "-n", "12"]);
    const comp = await client.completions.create({ model, prompt: "Once upon a time",
      max_tokens: 12, temperature: 0 });
    assert.equal(comp.choices[0].text, cref.text);
    const cst = await client.completions.create({ model, prompt: "Once upon a time",
      max_tokens: 12, temperature: 0, stream: true });
    let ctext = "";
    for await (const chunk of cst) ctext += chunk.choices[0]?.text ?? "";
    assert.equal(ctext, cref.text);

    await assert.rejects(client.chat.completions.create({ model, messages: [], max_tokens: 1 }),
      (e) => e instanceof OpenAI.BadRequestError && /messages/.test(e.message));
    await assert.rejects(client.chat.completions.create({ model, max_tokens: 1,
      messages: [{ role: "user", content: "x" }], tools: [{ type: "function",
        function: { name: "f", parameters: {} } }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "tools");
    const wrong = new OpenAI({ baseURL: s.base + "/v1", apiKey: "nope", maxRetries: 0 });
    await assert.rejects(wrong.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  } finally {
    assert.equal((await s.stop()).code, 0);
  }
});
