import assert from "node:assert/strict";
import { test } from "node:test";

import type { Prediction } from "../src/client";
import { breakdownLines, formatBound, formatDuration, formatInterval, hoverMarkdown, lensTitle, summaryLine } from "../src/format";

const H100: Prediction = {
  kernel: 0, device: "h100-sxm", device_name: "H100 SXM", kind: "source", duration_us: 12.345, duration_us_lo: 10.1,
  duration_us_hi: 14.9, achieved_gbps: 2710.4, gflops: 451.2, l2_hit_rate: 0.42, roofline_class: "bandwidth",
  bound_pipe: "dram", roofline_us: 8.2, headroom: 1.505, ood: false, note: null, model_version: "models:/kernelcast/7", breakdown: null,
};
const MI300X: Prediction = {
  kernel: 0, device: "mi300x", device_name: null, duration_us: 1834.2, duration_us_lo: null, duration_us_hi: null,
  roofline_class: "compute", bound_pipe: "tensor", headroom: null, ood: true, note: "shape outside training range",
};

test("durations: 3 significant figures in a readable unit; unknown is a dash, not 0", () => {
  assert.equal(formatDuration(0.4123), "0.412 µs");
  assert.equal(formatDuration(12.345), "12.3 µs");
  assert.equal(formatDuration(999.4), "999 µs");
  assert.equal(formatDuration(1834.2), "1.83 ms");
  assert.equal(formatDuration(2_100_000), "2.10 s");
  assert.equal(formatDuration(null), "–");
  assert.equal(formatDuration(Number.NaN), "–");
});

test("intervals share the unit when they can", () => {
  assert.equal(formatInterval(10.1, 14.9), "10.1–14.9 µs");
  assert.equal(formatInterval(900, 1200), "900 µs–1.20 ms");
  assert.equal(formatInterval(null, 3), "");
});

test("bound: class and pipe, either alone, or a dash", () => {
  assert.equal(formatBound(H100), "bandwidth-bound (dram)");
  assert.equal(formatBound({ ...H100, roofline_class: null }), "dram-bound");
  assert.equal(formatBound({ ...H100, roofline_class: null, bound_pipe: null }), "–");
});

test("CodeLens line names every device, its time and bound, and flags out-of-range answers", () => {
  assert.equal(lensTitle([H100, MI300X]), "kernelcast: h100-sxm 12.3 µs bandwidth-bound (dram) | mi300x 1.83 ms compute-bound (tensor) ⚠");
  assert.equal(lensTitle([]), "kernelcast: no prediction");
});

test("hover table: one row per device, launch, notes, model version; markdown is escaped", () => {
  const md = hoverMarkdown([H100, MI300X], {
    title: "saxpy_kernel", launch: { grid: [4096, 1, 1], block: [256, 1, 1], shared_bytes: 1024 }, launchFrom: "launch on line 70",
  });
  assert.match(md, /\*\*kernelcast\*\* — saxpy\\_kernel/);
  assert.match(md, /\| H100 SXM \| 12\.3 µs \| 10\.1–14\.9 µs \| bandwidth-bound \(dram\) \| 1\.50× \| 2710 \| 451 \| 42% \|/);
  assert.match(md, /\| mi300x ⚠ \| 1\.83 ms \| – \| compute-bound \(tensor\) \| – \| – \| – \| – \|/);
  assert.match(md, /launch: grid 4096×1×1, block 256×1×1, 1024 B shared \(launch on line 70\)/);
  assert.match(md, /- mi300x: shape outside training range/);
  assert.match(md, /model: `models:\/kernelcast\/7`/);
});

test("module breakdown: top ops from the JSON text, at most 5; bad JSON shows nothing", () => {
  const rows = Array.from({ length: 7 }, (_, i) => ({ op: `op${i}`, count: i + 1, duration_us: 10 * (i + 1), bound: "dram" }));
  const moduleMd = hoverMarkdown([{ ...H100, kind: "module", breakdown: JSON.stringify(rows) }], { title: "model.py" });
  assert.match(moduleMd, /top ops on H100 SXM:\n- op0 ×1: 10\.0 µs \(dram\)/);
  assert.ok(!hoverMarkdown([{ ...H100, breakdown: JSON.stringify(rows) }], { title: "k" }).includes("top ops"), "not for a source kernel");
  const lines = breakdownLines({ ...H100, breakdown: JSON.stringify(rows) });
  assert.equal(lines.length, 5);
  assert.equal(lines[0], "- op0 ×1: 10.0 µs (dram)");
  assert.deepEqual(breakdownLines({ ...H100, breakdown: rows }), lines, "a nested list reads as the JSON text did");
  assert.deepEqual(breakdownLines({ ...H100, breakdown: "not json" }), []);
  assert.deepEqual(breakdownLines({ ...H100, breakdown: null }), []);
});

test("summary line for notifications", () => {
  assert.equal(
    summaryLine("saxpy", [H100, MI300X]),
    "saxpy — H100 SXM: 12.3 µs [10.1–14.9 µs], bandwidth-bound (dram), 1.50× roofline; mi300x: 1.83 ms, compute-bound (tensor) (outside training range)",
  );
});
