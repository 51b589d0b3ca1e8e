/** Against a REAL kernelcast server started with an API key and --allow-modules (server-harness.ts). */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { KernelcastClient, KernelcastError } from "../src/client";
import { hoverMarkdown } from "../src/format";
import { buildModuleKernel, buildPredictBody } from "../src/request";
import { planKernels, predictBody } from "../src/service";
import { fixture } from "./helpers";
import { Server, settingsFor, startServer, stopServer } from "./server-harness";

describe("against a real kernelcast server with an API key and modules enabled", { timeout: 240_000 }, () => {
  let server: Server;
  const KEY = "kc-test-key-0123456789";

  before(async () => {
    server = await startServer(["--api-key-env", "KC_VSCODE_TEST_KEY", "--allow-modules"], { KC_VSCODE_TEST_KEY: KEY });
  });
  after(async () => {
    if (server) await stopServer(server);
  });

  test("no key: told to set kernelcast.apiKey; wrong key: told it was refused; right key: answered", async () => {
    const settings = settingsFor(server);
    const [plan] = planKernels(fixture("saxpy.cu"), settings);
    assert.ok(plan.ok);
    const body = predictBody(plan.query, settings);
    await assert.rejects(new KernelcastClient({ serverUrl: server.url }).predict(body),
      (e: unknown) => e instanceof KernelcastError && e.kind === "auth" && /set kernelcast.apiKey/.test(e.message));
    await assert.rejects(new KernelcastClient({ serverUrl: server.url, apiKey: "wrong" }).predict(body),
      (e: unknown) => e instanceof KernelcastError && e.kind === "auth" && /was refused/.test(e.message));
    const answer = await new KernelcastClient({ serverUrl: server.url, apiKey: KEY }).predict(body);
    assert.equal(answer.predictions.length, 1);
  });

  test("a KernelBench module (GEMM + ReLU): per-device time and the top ops, traced by the server", async () => {
    const client = new KernelcastClient({ serverUrl: server.url, apiKey: KEY, timeoutMs: 120_000 });
    const answer = await client.predict(buildPredictBody([buildModuleKernel(fixture("model.py"))], ["H100", "MI300X"]));
    assert.equal(answer.predictions.length, 2);
    for (const p of answer.predictions) {
      assert.equal(p.kind, "module");
      assert.ok(p.duration_us! > 0);
    }
    const md = hoverMarkdown(answer.predictions, { title: "model.py" });
    assert.match(md, /top ops on [^:]+:\n- \S*(addmm|linear|gemm)/i, md);
  });
});
