// End to end on real code: every HeCBench kernel whose launch the extension infers is extracted
// exactly as the editor would and sent to a running server; counts answers vs rejections.
//   node scripts/measure-server.js http://127.0.0.1:8000 [gpuflopbench dir] [max kernels]
const fs = require("fs");
const path = require("path");
const { findKernels } = require("../out/src/extract");
const { planKernel, askKernel, PredictionCache } = require("../out/src/service");
const { KernelcastClient } = require("../out/src/client");

const [serverUrl = "http://127.0.0.1:8000", rootArg, maxArg] = process.argv.slice(2);
const root = path.join(rootArg || path.resolve(__dirname, "../../../../shared/datasets/gpuflopbench"), "src");
const max = Number(maxArg || 1e9);
const settings = { serverUrl, devices: ["H100"], defines: {} };
const client = new KernelcastClient({ serverUrl, timeoutMs: 120_000 });
const walk = (d) => fs.readdirSync(d).flatMap((n) => { const p = path.join(d, n); return fs.statSync(p).isDirectory() ? walk(p) : [p]; });

(async () => {
  const counts = { asked: 0, answered: 0, rejected: 0, other: 0 };
  const reasons = new Map();
  const times = [];
  for (const prog of fs.readdirSync(root).filter((p) => p.endsWith("-cuda")).sort()) {
    const files = walk(path.join(root, prog)).filter((f) => /\.(cu|cuh|h|hpp|cpp)$/.test(f)).map((f) => [f, fs.readFileSync(f, "utf8")]);
    for (const [f, text] of files) {
      for (const k of findKernels(text)) {
        if (counts.asked >= max) break;
        const dir = path.dirname(f);
        const readInclude = (name) => {
          for (const base of [dir, path.join(dir, "include"), path.join(dir, "..", "include")]) {
            try { return fs.readFileSync(path.resolve(base, name), "utf8"); } catch { /* next */ }
          }
          return undefined;
        };
        const siblings = () => files.filter(([g]) => g !== f).map(([g, t]) => ({ name: path.basename(g), text: t }));
        const plan = planKernel(text, k, settings, { fileName: f, readInclude, siblings });
        if (!plan.ok) continue;
        counts.asked++;
        const t0 = Date.now();
        try {
          const { answer } = await askKernel(new PredictionCache(), client, plan.query, settings);
          if (answer.predictions[0]?.duration_us > 0) counts.answered++; else counts.other++;
          times.push(Date.now() - t0);
        } catch (e) {
          if (e.kind === "rejected") {
            counts.rejected++;
            const r = e.message.replace(/^kernelcast server rejected the request \(field [^)]*\): /, "").slice(0, 90);
            reasons.set(r, [...(reasons.get(r) || []), `${prog}/${k.name}`]);
          } else { counts.other++; console.error(prog, k.name, e.message); }
        }
      }
    }
  }
  times.sort((a, b) => a - b);
  console.log(JSON.stringify(counts), `median ${times[Math.floor(times.length / 2)]} ms, p90 ${times[Math.floor(times.length * 0.9)]} ms`);
  for (const [r, ks] of [...reasons].sort((a, b) => b[1].length - a[1].length).slice(0, 12)) console.log(ks.length, r, ks.slice(0, 3).join(" "));
})();
