import assert from "node:assert/strict";
import { test } from "node:test";

import { maskCode } from "../src/cmask";
import { detectLanguage, extractKernelAt, extractKernelSource, findKernels, kernelAt } from "../src/extract";
import { fixture } from "./helpers";

const SAXPY = fixture("saxpy.cu");

test("masking keeps offsets and blanks comments and strings", () => {
  const text = 'int a; // x { "\nchar *s = "}{"; /* { */ int b;';
  const masked = maskCode(text);
  assert.equal(masked.length, text.length);
  assert.equal(masked.split("\n").length, text.split("\n").length);
  assert.ok(!/[{}]/.test(masked), masked);
  assert.ok(masked.includes("int b;"));
});

test("finds every __global__ definition, not ones in comments or strings", () => {
  const names = findKernels(SAXPY).map((k) => k.name);
  assert.deepEqual(names, ["saxpy", "reduce_sum", "scale", "transpose", "runtime_sized"]);
});

test("kernel info: line, params, template flag, __launch_bounds__ skipped", () => {
  const kernels = findKernels(SAXPY);
  const saxpy = kernels[0];
  assert.equal(SAXPY.split("\n")[saxpy.line].trim().startsWith("__global__ void saxpy("), true);
  assert.match(saxpy.params, /^int n, float a, const float \*__restrict__ x/);
  const reduce = kernels[1];
  assert.equal(reduce.name, "reduce_sum");
  const scale = kernels[2];
  assert.equal(scale.template, true);
  assert.ok(SAXPY.slice(scale.start).startsWith("template <typename T, int UNROLL = 4>"));
  // The template's default argument (= 4) must not make the item run on to the next kernel.
  assert.ok(SAXPY.slice(scale.start, scale.end).trimEnd().endsWith("}"));
  assert.ok(!SAXPY.slice(scale.start, scale.end).includes("transpose"));
});

test("kernelAt picks the kernel around the cursor and nothing outside kernels", () => {
  const kernels = findKernels(SAXPY);
  const inBody = SAXPY.indexOf("tile[threadIdx.x] = i < n");
  assert.equal(kernelAt(kernels, inBody)?.name, "reduce_sum");
  assert.equal(kernelAt(kernels, SAXPY.indexOf("int main")), undefined);
  assert.equal(kernelAt(kernels, SAXPY.indexOf("fma_helper(float a")), undefined);
});

test("extracted source: includes, defines, device context and only the asked kernel", () => {
  const got = extractKernelAt(SAXPY, SAXPY.indexOf("y[i] = fma_helper"));
  assert.ok(got);
  assert.equal(got.kernel.name, "saxpy");
  const src = got.source;
  for (const kept of ["#include <cuda_runtime.h>", "#define N (1 << 20)", "#define BLOCK 256", "const int TILE = 32;",
    "struct Pair", "__constant__ float coeffs[4];", "__device__ __forceinline__ float fma_helper", "__global__ void saxpy("]) {
    assert.ok(src.includes(kept), `missing ${kept}`);
  }
  assert.ok(src.includes("} while (0)"), "a multi-line #define is kept whole");
  for (const dropped of ["int main", "host_helper", "host_only_buffer", "reduce_sum", "transpose", "cudaMalloc"]) {
    assert.ok(!src.includes(dropped), `should not include ${dropped}`);
  }
});

test("local headers are inlined once when a reader is given, kept as #include otherwise", () => {
  const kernel = findKernels(SAXPY)[0];
  const withHeader = extractKernelSource(SAXPY, kernel, (name) => (name === "common.h" ? fixture("common.h") : undefined));
  assert.ok(withHeader.includes("#define CLAMP(x, lo, hi)"));
  assert.ok(!withHeader.includes('#include "common.h"'));
  const without = extractKernelSource(SAXPY, kernel);
  assert.ok(without.includes('#include "common.h"'));
});

test("namespaces and extern \"C\" blocks are looked into", () => {
  const text = 'namespace ops {\n__global__ void k1(float *x) { x[0] = 1; }\n}\nextern "C" {\n__global__ void k2(float *x) { x[0] = 2; }\n}\n';
  assert.deepEqual(findKernels(text).map((k) => k.name), ["k1", "k2"]);
});

test("a prototype is not a kernel; an unterminated file does not hang", () => {
  assert.deepEqual(findKernels("__global__ void k(float *x);\n").map((k) => k.name), []);
  assert.deepEqual(findKernels("__global__ void k(float *x) {\n  x[0] = 1;\n").map((k) => k.name), []);
});

test("language: .hip, hip_runtime include, or hipLaunchKernelGGL means hip", () => {
  assert.equal(detectLanguage(SAXPY, "saxpy.cu"), "cuda");
  assert.equal(detectLanguage(fixture("vadd.hip"), "x.cu"), "hip");
  assert.equal(detectLanguage("", "k.hip"), "hip");
  assert.equal(detectLanguage("", "k.cu", "hip"), "hip");
});
