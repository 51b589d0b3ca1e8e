/**
 * Against a REAL kernelcast server: a `kernelcast serve --model roofline` (server-harness.ts), asked
 * the kernels the extension extracts from the fixtures.
 */
import assert from "node:assert/strict";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";

import { KernelcastClient, KernelcastError } from "../src/client";
import { lensTitle } from "../src/format";
import { buildModuleKernel, buildPredictBody } from "../src/request";
import { askKernel, planKernels, predictBody, PredictionCache } from "../src/service";
import { FIXTURES, fixture } from "./helpers";
import { Server, settingsFor, startServer, stopServer } from "./server-harness";
import * as stub from "./vscode-stub";

describe("against a real kernelcast server (roofline model)", { timeout: 180_000 }, () => {
  let server: Server;
  let client: KernelcastClient;

  before(async () => {
    server = await startServer();
    client = new KernelcastClient({ serverUrl: server.url, timeoutMs: 60_000 });
  });
  after(async () => {
    if (server) await stopServer(server);
  });

  test("readyz reports the loaded model", async () => {
    assert.equal(await client.ready(), "roofline");
  });

  test("saxpy from a whole program: one answer per distinct device, bandwidth-bound, positive runtime", async () => {
    const settings = settingsFor(server, ["H100", "MI300X", "h100"]);
    const plan = planKernels(fixture("saxpy.cu"), settings, { fileName: "saxpy.cu" })[0];
    assert.ok(plan.ok && plan.kernel.name === "saxpy");
    const answer = await client.predict(predictBody(plan.query, settings));
    assert.equal(answer.model_version, "roofline");
    assert.equal(answer.predictions.length, 2, JSON.stringify(answer.predictions));
    for (const p of answer.predictions) {
      assert.equal(p.kernel, 0);
      assert.ok(typeof p.duration_us === "number" && p.duration_us > 0, `duration ${p.duration_us}`);
      // 2 FLOPs per 12 bytes moved: far left of every GPU's ridge point -- bandwidth-bound, or latency-bound
      // where this small launch is too little work to fill the GPU (the class is the bound's side).
      assert.equal(p.roofline_class, p.bound_pipe === "launch" ? "latency" : "bandwidth");
      assert.ok(p.bound_pipe, "bound pipe named");
    }
    const devices = answer.predictions.map((p) => String(p.device).toLowerCase());
    assert.ok(devices.some((d) => d.includes("h100")) && devices.some((d) => d.includes("mi300")), devices.join(","));
    assert.match(lensTitle(answer.predictions), /^kernelcast: .*µs|ms .*-bound/);
  });

  test("a bigger launch of the same kernel is predicted slower", async () => {
    const settings = settingsFor(server);
    const text = fixture("saxpy.cu");
    const small = planKernels(text, settings, { override: { grid: [64, 1, 1], block: [256, 1, 1] } })[0];
    const large = planKernels(text, settings, { override: { grid: [65536, 1, 1], block: [256, 1, 1] } })[0];
    assert.ok(small.ok && large.ok);
    const [a, b] = await Promise.all([client.predict(predictBody(small.query, settings)), client.predict(predictBody(large.query, settings))]);
    assert.ok(b.predictions[0].duration_us! > a.predictions[0].duration_us!, `${a.predictions[0].duration_us} vs ${b.predictions[0].duration_us}`);
  });

  test("every kernel the file launches is answered: dim3, shared memory, template instantiation", async () => {
    const settings = settingsFor(server);
    const plans = planKernels(fixture("saxpy.cu"), settings, { fileName: "saxpy.cu" }).filter((p) => p.ok);
    assert.deepEqual(plans.map((p) => p.kernel.name), ["saxpy", "reduce_sum", "scale", "transpose"]);
    for (const plan of plans) {
      assert.ok(plan.ok);
      const answer = await client.predict(predictBody(plan.query, settings));
      assert.equal(answer.predictions.length, 1, plan.kernel.name);
      assert.ok(answer.predictions[0].duration_us! > 0, `${plan.kernel.name}: ${JSON.stringify(answer.predictions[0])}`);
    }
  });

  test("a HIP kernel launched with hipLaunchKernelGGL", async () => {
    const settings = settingsFor(server, ["MI300X"]);
    const [plan] = planKernels(fixture("vadd.hip"), settings, { fileName: "vadd.hip" });
    assert.ok(plan.ok);
    assert.equal(plan.query.language, "hip");
    const { answer, note } = await askKernel(new PredictionCache(), client, plan.query, settings);
    assert.ok(answer.predictions[0].duration_us! > 0);
    assert.match(answer.predictions[0].device, /mi300/i);
    // Either the server compiles HIP, or it said it does not and the kernel was asked as CUDA, visibly.
    if (note !== undefined) assert.match(note, /HIP kernel analysed as CUDA/);
  });

  test("an unknown device is a 4xx the user can read, naming the device", async () => {
    const settings = settingsFor(server, ["H1000"]);
    const [plan] = planKernels(fixture("saxpy.cu"), settings);
    assert.ok(plan.ok);
    await assert.rejects(client.predict(predictBody(plan.query, settings)), (e: unknown) => {
      assert.ok(e instanceof KernelcastError, String(e));
      assert.equal(e.kind, "rejected");
      assert.ok(e.status! >= 400 && e.status! < 500);
      assert.match(e.message, /H1000/);
      return true;
    });
  });

  test("a kernel that does not compile is rejected with a message, not a 500", async () => {
    const settings = settingsFor(server);
    const text = "__global__ void broken(float *x) {\n  x[threadIdx.x] = undefined_symbol + ;\n}\nvoid h() { broken<<<1, 32>>>(0); }\n";
    const [plan] = planKernels(text, settings);
    assert.ok(plan.ok);
    await assert.rejects(client.predict(predictBody(plan.query, settings)), (e: unknown) => {
      assert.ok(e instanceof KernelcastError, String(e));
      assert.equal(e.kind, "rejected", e.message);
      assert.ok(e.message.length > 20);
      return true;
    });
  });

  test("a PyTorch module on a server that has not enabled modules says so", async () => {
    const body = buildPredictBody([buildModuleKernel(fixture("model.py"))], ["H100"]);
    await assert.rejects(client.predict(body), (e: unknown) => {
      assert.ok(e instanceof KernelcastError, String(e));
      assert.equal(e.kind, "rejected");
      assert.match(e.message, /module/i);
      return true;
    });
  });

  test("through extension.ts (stand-in vscode API): the lens and hover show the server's answer", async () => {
    stub.settings["kernelcast.serverUrl"] = server.url;
    stub.settings["kernelcast.devices"] = ["H100", "MI300X"];
    stub.loadExtension().activate(stub.stubContext());
    const text = fixture("saxpy.cu");
    const doc = stub.document(text, path.join(FIXTURES, "saxpy.cu"), "cuda-cpp");
    const provider = stub.registered.codeLens[0] as { provideCodeLenses(d: unknown): unknown[]; resolveCodeLens(l: unknown): Promise<{ command?: { title: string } }> };
    const lens = await provider.resolveCodeLens(provider.provideCodeLenses(doc)[0]);
    assert.match(lens.command?.title ?? "", /^kernelcast: h100-sxm [\d.]+ (µs|ms) (bandwidth|latency)-bound \(\w+\) \| mi300x [\d.]+ (µs|ms) (bandwidth|latency)-bound/);
    const hover = stub.registered.hover[0] as { provideHover(d: unknown, p: unknown): Promise<{ contents: { value: string } }> };
    const md = (await hover.provideHover(doc, doc.positionAt(text.indexOf("saxpy(int n")))).contents.value;
    assert.match(md, /\| NVIDIA H100[^|]* \| [\d.]+ (µs|ms) \|/);
    assert.match(md, /launch: grid 4096×1×1, block 256×1×1 \(launch on line \d+\)/);
    assert.match(md, /model: `roofline`/);
  });

  test("'Pick devices' offers the server's catalog with the current ones ticked and saves the choice (stand-in vscode API)", async () => {
    stub.settings["kernelcast.serverUrl"] = server.url;
    stub.settings["kernelcast.devices"] = ["H100"];
    let offered: Array<{ label: string; picked?: boolean }> = [];
    stub.vscodeStub.window.pick = (items) => {
      offered = items;
      return items.filter((i) => /^(h100|mi300x)/i.test(i.label));
    };
    await stub.registered.commands.get("kernelcast.pickDevices")!();
    assert.ok(offered.length > 3);
    assert.deepEqual(offered.filter((i) => i.picked).map((i) => i.label.toLowerCase()).filter((l) => l.startsWith("h100")).length > 0, true);
    const saved = stub.settings["kernelcast.devices"] as string[];
    assert.ok(saved.some((d) => /^h100/i.test(d)) && saved.some((d) => /^mi300x/i.test(d)), saved.join(","));
  });

  test("the device list for the picker, and the server still ready after the bad requests", async () => {
    const devices = await client.devices();
    assert.ok(devices.length > 3);
    assert.ok(devices.some((d) => /h100/i.test(d.id)), devices.map((d) => d.id).join(","));
    assert.equal(await client.ready(), "roofline");
  });
});
