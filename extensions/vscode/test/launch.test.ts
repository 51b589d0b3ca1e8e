import assert from "node:assert/strict";
import { test } from "node:test";

import { evalC, EvalError } from "../src/cexpr";
import { inferLaunch, isLaunchConfig, LaunchConfig, parseDim3 } from "../src/launch";
import { fixture } from "./helpers";

const SAXPY = fixture("saxpy.cu");
const none = (): undefined => undefined;

function launched(text: string, kernel: string, user = {}): LaunchConfig {
  const got = inferLaunch(text, kernel, user);
  assert.ok(isLaunchConfig(got), `expected a launch for ${kernel}, got ${JSON.stringify(got)}`);
  return got;
}

test("C expressions: integer division truncates, shifts, casts, sizeof, min, ternary", () => {
  assert.equal(evalC("(1000 + 255) / 256", none).v, 4);
  assert.equal(evalC("1 << 20", none).v, 1048576);
  assert.equal(evalC("ceil(1000 / 256.0)", none).v, 4);
  assert.equal(evalC("(int)(1000 / (float)256)", none).v, 3);
  assert.equal(evalC("256 * sizeof(float)", none).v, 1024);
  assert.equal(evalC("std::min(4096, 1 << 10)", none).v, 1024);
  assert.equal(evalC("10 > 3 ? 7 : 9", none).v, 7);
  assert.equal(evalC("0x100u + 1'000", none).v, 1256);
  assert.equal(evalC("static_cast<int>(7.9)", none).v, 7);
  assert.throws(() => evalC("n / 2", none), (e: unknown) => e instanceof EvalError && /'n'/.test(e.message));
  assert.throws(() => evalC("atoi(argv[1])", none), /atoi\(\)/);
});

test("<<<blocks, threads>>> through variables and #defines", () => {
  const l = launched(SAXPY, "saxpy");
  assert.deepEqual(l.grid, [4096, 1, 1]);
  assert.deepEqual(l.block, [256, 1, 1]);
  assert.equal(SAXPY.split("\n")[l.line].trim().startsWith("saxpy<<<"), true);
});

test("dim3(...) arguments and dynamic shared memory", () => {
  const l = launched(SAXPY, "reduce_sum");
  assert.deepEqual(l.grid, [4096, 1, 1]);
  assert.deepEqual(l.block, [256, 1, 1]);
  assert.equal(l.shared_bytes, 1024);
});

test("template arguments at the launch site are kept", () => {
  const l = launched(SAXPY, "scale");
  assert.equal(l.templateArgs, "float");
  assert.deepEqual(l.grid, [4096, 1, 1]);
});

test("named dim3 variables with two components", () => {
  const l = launched(SAXPY, "transpose");
  assert.deepEqual(l.grid, [128, 64, 1]);
  assert.deepEqual(l.block, [32, 8, 1]);
});

test("a runtime size names the missing variable; a user value fills it", () => {
  const got = inferLaunch(SAXPY, "runtime_sized");
  assert.ok(!isLaunchConfig(got));
  assert.match(got.reason, /line \d+ uses 'm' \(= atoi\(argv\[1\]\)\), which is only known at run time/);
  const l = launched(SAXPY, "runtime_sized", { m: 1000 });
  assert.deepEqual(l.grid, [8, 1, 1]);
  assert.deepEqual(l.block, [128, 1, 1]);
});

test("hipLaunchKernelGGL sites", () => {
  const l = launched(fixture("vadd.hip"), "vadd");
  assert.deepEqual(l.grid, [32768, 1, 1]);
  assert.deepEqual(l.block, [512, 1, 1]);
  assert.equal(l.shared_bytes, undefined);
});

test("no launch site, or an impossible block, is a failure with a reason", () => {
  const noSite = inferLaunch("__global__ void k(float *x) { }\n", "k");
  assert.ok(!isLaunchConfig(noSite));
  assert.match(noSite.reason, /no launch of k/);
  const big = inferLaunch("__global__ void k(float *x) { }\nvoid h() { k<<<1, 2048>>>(0); }\n", "k");
  assert.ok(!isLaunchConfig(big));
  assert.match(big.reason, /2048 threads/);
  const zero = inferLaunch("__global__ void k(float *x) { }\nvoid h() { k<<<0, 32>>>(0); }\n", "k");
  assert.ok(!isLaunchConfig(zero));
  assert.match(zero.reason, /not a positive size/);
});

test("the binding in force at the launch site wins (last assignment before it)", () => {
  const text = "__global__ void k(float *x) { }\nint main() {\n int b = 64;\n k<<<b, 32>>>(0);\n b = 128;\n}\n";
  assert.deepEqual(launched(text, "k").grid, [64, 1, 1]);
});

test("parseDim3 accepts the forms a user types and rejects the rest", () => {
  assert.deepEqual(parseDim3("256"), [256, 1, 1]);
  assert.deepEqual(parseDim3("64, 64"), [64, 64, 1]);
  assert.deepEqual(parseDim3("[32, 8, 2]"), [32, 8, 2]);
  assert.deepEqual(parseDim3("32x8"), [32, 8, 1]);
  assert.deepEqual(parseDim3([128, 2]), [128, 2, 1]);
  assert.equal(parseDim3("0"), undefined);
  assert.equal(parseDim3("a,b"), undefined);
  assert.equal(parseDim3("1,2,3,4"), undefined);
  assert.equal(parseDim3(null), undefined);
});

test("dim3 members set after a bare declaration (ddbp-style) are followed; members read in expressions", () => {
  const text = `__global__ void k(float *x) { }
int main() {
  dim3 threads(16, 16, 1);
  dim3 blocks;
  blocks.x = (1000 + threads.x - 1) / threads.x;
  blocks.y = 4;
  k<<<blocks, threads>>>(0);
  blocks.x = 1;
}
`;
  const l = launched(text, "k");
  assert.deepEqual(l.grid, [63, 4, 1]);
  assert.deepEqual(l.block, [16, 16, 1]);
});

test("a value changed in ways not followed (+=, ++, &n to scanf) is unknown, never its stale initial value", () => {
  const scanf = "__global__ void k(float *x) { }\nint main() {\n int n = 1024;\n scanf(\"%d\", &n);\n k<<<n / 256, 256>>>(0);\n}\n";
  const got = inferLaunch(scanf, "k");
  assert.ok(!isLaunchConfig(got));
  assert.match(got.reason, /uses 'n', which changes at run time \(line 4\)/);
  assert.deepEqual(launched(scanf, "k", { n: 2048 }).grid, [8, 1, 1]);
  const loop = "__global__ void k(float *x) { }\nvoid h() {\n for (int bs = 32; bs <= 1024; bs *= 2) k<<<4096 / bs, bs>>>(0);\n}\n";
  assert.ok(!isLaunchConfig(inferLaunch(loop, "k")));
  const member = "__global__ void k(float *x) { }\nvoid h() {\n dim3 g(8);\n g.x *= 2;\n k<<<g, 32>>>(0);\n}\n";
  assert.match((inferLaunch(member, "k") as { reason: string }).reason, /'g.x', which changes at run time/);
});

test("a launch inside a host template (k<T> with T per caller) is not a usable instantiation; a concrete one is", () => {
  const text = "template <typename T>\n__global__ void k(T *x) { }\ntemplate <typename T>\nvoid run(T *p) { k<T><<<8, 64>>>(p); }\n";
  const got = inferLaunch(text, "k");
  assert.ok(!isLaunchConfig(got));
  assert.match(got.reason, /instantiates k<T> with 'T', a template parameter of the host function around it/);
  const withConcrete = text + "void other(double *p) { k<double><<<2, 32>>>(p); }\n";
  const l = launched(withConcrete, "k");
  assert.equal(l.templateArgs, "double");
  assert.deepEqual(l.grid, [2, 1, 1]);
});
