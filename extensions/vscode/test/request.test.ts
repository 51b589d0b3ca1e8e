import assert from "node:assert/strict";
import { test } from "node:test";

import { templateInstantiation, findKernels } from "../src/extract";
import { buildModuleKernel, buildPredictBody, buildSourceKernel, InputError, normalizeDefines, normalizeDevices } from "../src/request";
import { planKernels, predictBody, PredictionCache, Settings } from "../src/service";
import { fixture } from "./helpers";

const SETTINGS: Settings = { serverUrl: "http://127.0.0.1:1", devices: ["H100"], defines: {} };

test("devices: trimmed, blanks dropped, duplicates in any case collapsed; empty or wrong type is an error", () => {
  assert.deepEqual(normalizeDevices([" H100", "MI300X", "h100", ""]), ["H100", "MI300X"]);
  assert.throws(() => normalizeDevices([]), (e: unknown) => e instanceof InputError && /kernelcast.devices is empty/.test(e.message));
  assert.throws(() => normalizeDevices("H100"), /must be a list/);
  assert.throws(() => normalizeDevices([42]), /holds 42/);
});

test("defines: numbers become strings; non-identifiers and nested values are errors", () => {
  assert.deepEqual(normalizeDefines({ N: 1024, MODE: "fast" }), { N: "1024", MODE: "fast" });
  assert.deepEqual(normalizeDefines(undefined), {});
  assert.throws(() => normalizeDefines({ "1N": 3 }), /'1N' is not a C identifier/);
  assert.throws(() => normalizeDefines({ N: [1] }), /kernelcast.defines.N/);
  assert.throws(() => normalizeDefines({ n: {} }, "kernelcast.launchValues"), /kernelcast.launchValues.n must be/);
  assert.throws(() => normalizeDefines([1]), /must be an object/);
});

test("a source kernel has exactly the contract's fields", () => {
  const k = buildSourceKernel({ source: "src", language: "cuda", kernelName: "k", launch: { grid: [8, 1, 1], block: [128, 1, 1] }, dtype: "fp16", defines: { N: "8" } });
  assert.deepEqual(k, { source: "src", language: "cuda", dtype: "fp16", launch: { grid: [8, 1, 1], block: [128, 1, 1], kernel: "k", defines: { N: "8" } } });
  const bare = buildSourceKernel({ source: "s", language: "hip", kernelName: "k", launch: { grid: [1, 1, 1], block: [64, 1, 1], shared_bytes: 256 } });
  assert.deepEqual(bare, { source: "s", language: "hip", launch: { grid: [1, 1, 1], block: [64, 1, 1], kernel: "k", shared_bytes: 256 } });
  assert.deepEqual(buildPredictBody([bare], ["H100"]), { kernels: [bare], devices: ["H100"] });
  assert.deepEqual(buildPredictBody([bare], ["H100"], "roofline").model, "roofline");
});

test("a module question needs the KernelBench shape and says what is missing", () => {
  const text = fixture("model.py");
  assert.deepEqual(buildModuleKernel(text, "bf16"), { module: text, dtype: "bf16" });
  assert.throws(() => buildModuleKernel("import torch\nx = 1\n"), /lacks class Model\(nn.Module\), get_inputs\(\), get_init_inputs\(\)/);
});

test("template kernels get an explicit instantiation from the launch site's arguments", () => {
  const text = fixture("saxpy.cu");
  const scale = findKernels(text).find((k) => k.name === "scale")!;
  assert.equal(templateInstantiation(text, scale, "float"), "template __global__ void scale<float, 4>(float *data, float factor, int n);");
  assert.equal(templateInstantiation(text, scale, "double, 8"), "template __global__ void scale<double, 8>(double *data, double factor, int n);");
  assert.equal(templateInstantiation(text, scale, "a, b, c"), undefined);
});

test("planning a file: a question per kernel with a launch, a reason for the one without", () => {
  const plans = planKernels(fixture("saxpy.cu"), SETTINGS, { fileName: "saxpy.cu" });
  assert.deepEqual(plans.map((p) => [p.kernel.name, p.ok]), [
    ["saxpy", true], ["reduce_sum", true], ["scale", true], ["transpose", true], ["runtime_sized", false],
  ]);
  const scale = plans[2];
  assert.ok(scale.ok);
  assert.equal(scale.query.launch?.kernel, "scale");
  assert.ok(scale.query.source?.trimEnd().endsWith("template __global__ void scale<float, 4>(float *data, float factor, int n);"));
  const missing = plans[4];
  assert.ok(!missing.ok);
  assert.match(missing.reason, /no launch configuration for runtime_sized: .*uses 'm' \(= atoi\(argv\[1\]\)\).*kernelcast.launchValues \(e.g. \{"m": 1048576\}\)/);
});

test("fallbacks: kernelcast.launch settings when inference fails; an entered launch wins over the file", () => {
  const text = fixture("saxpy.cu");
  const withFallback = planKernels(text, { ...SETTINGS, grid: [100, 1, 1], block: [64, 1, 1] })[4];
  assert.ok(withFallback.ok);
  assert.deepEqual(withFallback.launch.grid, [100, 1, 1]);
  assert.match(withFallback.launchFrom, /kernelcast.launch settings/);
  const entered = planKernels(text, SETTINGS, { override: { grid: [7, 1, 1], block: [32, 1, 1] } })[0];
  assert.ok(entered.ok);
  assert.deepEqual([entered.launch.grid, entered.launch.block], [[7, 1, 1], [32, 1, 1]]);
  const userValue = planKernels(text, { ...SETTINGS, values: { m: "4096" } })[4];
  assert.ok(userValue.ok);
  assert.deepEqual(userValue.launch.grid, [32, 1, 1]);
  // A run-time value is not a macro: as -Dm=4096 it would rewrite every identifier m.
  assert.equal(userValue.query.launch?.defines, undefined);
  const macro = planKernels(text, { ...SETTINGS, defines: { m: "4096" } })[4];
  assert.ok(macro.ok);
  assert.deepEqual(macro.query.launch?.defines, { m: "4096" });
});

test("the cache (with a stand-in client) asks once per body and forgets failures so the next refresh retries", async () => {
  let calls = 0;
  const fake = {
    baseUrl: "http://x",
    predict: async () => {
      calls++;
      if (calls === 1) throw new Error("down");
      return { model_version: "roofline", predictions: [] };
    },
  };
  const cache = new PredictionCache(2);
  const plan = planKernels(fixture("saxpy.cu"), SETTINGS)[0];
  assert.ok(plan.ok);
  const body = predictBody(plan.query, SETTINGS);
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  await assert.rejects(cache.get(fake as any, body), /down/);
  await new Promise((r) => setImmediate(r));
  assert.equal(cache.size, 0);
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const client = fake as any;
  await cache.get(client, body);
  await cache.get(client, body);
  assert.equal(calls, 2);
  await cache.get(client, { ...body, devices: ["A100"] });
  await cache.get(client, { ...body, devices: ["L4"] });
  assert.equal(cache.size, 2, "bounded: the oldest entry went out");
});

test("a kernel launched from another file of the folder: that launch is used and named", () => {
  const kernels = "#define TPB 128\n__global__ void axpy(float *y, const float *x, int n) { }\n";
  const main = '#include "kernels.h"\n#define TPB 128\nint main() {\n  const int n = 1 << 16;\n  axpy<<<(n + TPB - 1) / TPB, TPB>>>(0, 0, n);\n}\n';
  const siblings = () => [{ name: "util.cu", text: "int unrelated;" }, { name: "main.cu", text: main }];
  const [plan] = planKernels(kernels, SETTINGS, { siblings });
  assert.ok(plan.ok, JSON.stringify(plan));
  assert.deepEqual(plan.launch.grid, [512, 1, 1]);
  assert.equal(plan.launchFrom, "launch on line 5 of main.cu");
  const wrapper = "void launch(float *y, const float *x, int n) { axpy<<<(n + 255) / 256, 256>>>(y, x, n); }\n";
  const [needsN] = planKernels(kernels, SETTINGS, { siblings: () => [{ name: "wrap.cu", text: wrapper }] });
  assert.ok(!needsN.ok);
  assert.match(needsN.reason, /wrap\.cu: the launch on line 1 uses 'n', whose value is not in the file/);
  const [none] = planKernels(kernels, SETTINGS, { siblings: () => [] });
  assert.ok(!none.ok);
  assert.match(none.reason, /no launch of axpy .* in this file or the files beside it/);
});

test("a kernel in a header gets what its includer declares first; shared headers are inlined once", () => {
  const header = "__global__ void accumulate(RealType *e, int n) {\n  for (int i = 1; i < n; i++) e[0] += e[i];\n}\n";
  const main = '#include "types.h"\ntypedef float RealType;\nconst int SIZE = 64;\nstatic int host_counter;\n#include "kernels.hpp"\nint main() { accumulate<<<1, 1>>>(0, SIZE); }\n';
  const reads: string[] = [];
  const readInclude = (name: string) => (reads.push(name), name === "types.h" ? "struct Vec { float x; };\n" : undefined);
  const [plan] = planKernels(header, SETTINGS, { fileName: "/src/kernels.hpp", readInclude, siblings: () => [{ name: "main.cu", text: main }] });
  assert.ok(plan.ok, JSON.stringify(plan));
  const src = plan.query.source!;
  assert.ok(src.indexOf("typedef float RealType;") < src.indexOf("__global__ void accumulate"), src);
  assert.ok(src.includes("struct Vec") && src.includes("const int SIZE = 64;"));
  assert.ok(!src.includes("host_counter") && !src.includes("int main"));
  assert.match(src, /what main.cu declares before including kernels.hpp/);
  assert.deepEqual(plan.launch.grid, [1, 1, 1]);
});

test("host constants in template arguments become numbers; types stay", () => {
  const text = "#define TREE 16\ntemplate <int N, typename T>\n__global__ void k(T *x) { x[0] = N; }\nint main() {\n  const int width = TREE * 2;\n  k<width, float><<<4, 32>>>(0);\n}\n";
  const [plan] = planKernels(text, SETTINGS);
  assert.ok(plan.ok, JSON.stringify(plan));
  assert.ok(plan.query.source!.trimEnd().endsWith("template __global__ void k<32, float>(float *x);"), plan.query.source);
});
