// How often the extension finds a profiled HeCBench kernel and infers its launch from the file
// that defines it, against the launch Nsight Compute recorded (gpuFLOPBench profiling-data.csv).
//   node scripts/measure-hecbench.js [/work/shared/datasets/gpuflopbench]   (after npm run build)
const fs = require("fs");
const path = require("path");
const { findKernels } = require("../out/src/extract");
const { isLaunchConfig } = require("../out/src/launch");
const { planKernel } = require("../out/src/service");

const root = process.argv[2] || path.resolve(__dirname, "../../../../shared/datasets/gpuflopbench");
const csv = fs.readFileSync(path.join(root, "cuda-profiling/profiling-data.csv"), "utf8").split("\n");
const header = parseRow(csv[0]);
const col = (name) => header.indexOf(name);
const seen = new Map();
for (const line of csv.slice(1)) {
  if (!line.trim()) continue;
  const r = parseRow(line);
  const program = r[col("targetName")];
  if (!program.endsWith("-cuda")) continue;
  const key = `${program}/${r[col("kernelName")]}`;
  if (!seen.has(key)) seen.set(key, { program, kernel: r[col("kernelName")], grid: dims(r[col("Grid Size")]), block: dims(r[col("Block Size")]) });
}

const counts = { profiled: 0, noSource: 0, found: 0, inferred: 0, exact: 0, blockOnly: 0, wrong: 0 };
const wrong = [];
const filesOf = new Map();
for (const k of seen.values()) {
  counts.profiled++;
  const dir = path.join(root, "src", k.program);
  if (!fs.existsSync(dir)) { counts.noSource++; continue; }
  if (!filesOf.has(dir)) filesOf.set(dir, walk(dir).filter((f) => /\.(cu|cuh|h|hpp|cpp)$/.test(f)).map((f) => [f, fs.readFileSync(f, "utf8")]));
  const hit = filesOf.get(dir).find(([, text]) => findKernels(text).some((x) => x.name === k.kernel));
  if (!hit) continue;
  counts.found++;
  // As the extension does: this file first, then the files beside it.
  const kernel = findKernels(hit[1]).find((x) => x.name === k.kernel);
  const siblings = () => filesOf.get(dir).filter(([f]) => f !== hit[0]).map(([f, text]) => ({ name: path.basename(f), text }));
  const plan = planKernel(hit[1], kernel, { serverUrl: "http://unused", devices: ["H100"], defines: {} }, { siblings });
  if (!plan.ok) continue;
  const got = plan.launch;
  counts.inferred++;
  const same = (a, b) => a.every((v, i) => v === b[i]);
  if (same(got.grid, k.grid) && same(got.block, k.block)) counts.exact++;
  else if (same(got.block, k.block)) counts.blockOnly++;
  else { counts.wrong++; wrong.push(`${k.program}/${k.kernel}: inferred ${got.grid}/${got.block}, profiled ${k.grid}/${k.block}`); }
}
console.log(JSON.stringify(counts));
console.log(`kernel found in its program's files: ${pct(counts.found, counts.profiled - counts.noSource)}`);
console.log(`launch inferred (of found): ${pct(counts.inferred, counts.found)}; of those, grid+block exact ${pct(counts.exact, counts.inferred)}, block only ${pct(counts.blockOnly, counts.inferred)}, block differs ${pct(counts.wrong, counts.inferred)}`);
if (process.env.VERBOSE) console.log(wrong.slice(0, 40).join("\n"));

function pct(a, b) { return `${a}/${b} (${b ? ((100 * a) / b).toFixed(1) : "0"}%)`; }
function dims(s) { return s.replace(/[()\s]/g, "").split(",").map(Number); }
function walk(d) { return fs.readdirSync(d).flatMap((n) => { const p = path.join(d, n); return fs.statSync(p).isDirectory() ? walk(p) : [p]; }); }
function parseRow(line) {
  const out = []; let cur = ""; let q = false;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (q) { if (c === '"' && line[i + 1] === '"') { cur += '"'; i++; } else if (c === '"') q = false; else cur += c; }
    else if (c === '"') q = true; else if (c === ",") { out.push(cur); cur = ""; } else cur += c;
  }
  out.push(cur);
  return out;
}
