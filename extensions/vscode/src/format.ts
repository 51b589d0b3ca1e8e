/**
 * Turn /v1/predict answers into the short CodeLens line and the hover's Markdown table.
 * Unknown values (null) are shown as "–", never as 0.
 */
import type { Prediction } from "./client";
import type { LaunchSpec } from "./request";

const DASH = "–";

/** 3 significant figures in the unit that keeps the number readable: 0.412 µs, 12.3 µs, 1.25 ms, 2.10 s. */
export function formatDuration(us: number | null | undefined): string {
  if (us === null || us === undefined || !Number.isFinite(us)) return DASH;
  if (us < 1000) return `${sig3(us)} µs`;
  if (us < 1_000_000) return `${sig3(us / 1000)} ms`;
  return `${sig3(us / 1_000_000)} s`;
}

function sig3(x: number): string {
  if (x === 0) return "0";
  const digits = Math.max(0, 2 - Math.floor(Math.log10(Math.abs(x))));
  return x.toFixed(Math.min(digits, 3));
}

/** "10.1–14.9 µs" in the unit of the midpoint, or "" when the model gives no interval. */
export function formatInterval(lo: number | null | undefined, hi: number | null | undefined): string {
  if (lo === null || lo === undefined || hi === null || hi === undefined) return "";
  const [a, b] = [formatDuration(lo), formatDuration(hi)];
  const unitA = a.split(" ")[1];
  const unitB = b.split(" ")[1];
  return unitA === unitB ? `${a.split(" ")[0]}–${b}` : `${a}–${b}`;
}

/** "bandwidth-bound (dram)" / "compute-bound (tensor)" / "–". */
export function formatBound(p: Prediction): string {
  const cls = p.roofline_class ? `${p.roofline_class}-bound` : "";
  const pipe = p.bound_pipe ? (cls ? ` (${p.bound_pipe})` : `${p.bound_pipe}-bound`) : "";
  return cls || pipe ? `${cls}${pipe}` : DASH;
}

function deviceLabel(p: Prediction): string {
  return p.device_name || p.device || "?";
}

function fixed(x: number | null | undefined, digits: number, suffix = ""): string {
  return x === null || x === undefined || !Number.isFinite(x) ? DASH : `${x.toFixed(digits)}${suffix}`;
}

function percent(x: number | null | undefined): string {
  return x === null || x === undefined || !Number.isFinite(x) ? DASH : `${(x * 100).toFixed(0)}%`;
}

/** One line per kernel for a CodeLens: "kernelcast: H100 12.3 µs bandwidth-bound (dram) | MI300X ...". */
export function lensTitle(predictions: Prediction[]): string {
  if (predictions.length === 0) return "kernelcast: no prediction";
  const parts = predictions.map((p) => {
    const warn = p.ood ? " ⚠" : "";
    // The catalog id (h100-sxm) is short enough for one line; the hover has the full name.
    return `${p.device || deviceLabel(p)} ${formatDuration(p.duration_us)} ${formatBound(p)}${warn}`;
  });
  return `kernelcast: ${parts.join(" | ")}`;
}

export interface HoverContext {
  title: string;
  launch?: LaunchSpec;
  launchFrom?: string;
  modelVersion?: string;
  note?: string;
}

/** The hover: one table row per device, then launch, notes, module breakdown and model version. */
export function hoverMarkdown(predictions: Prediction[], ctx: HoverContext): string {
  const lines: string[] = [`**kernelcast** — ${escapeMd(ctx.title)}`, ""];
  lines.push("| device | runtime | interval | bound | × roofline | GB/s | GFLOP/s | L2 hit |");
  lines.push("|---|---:|---:|---|---:|---:|---:|---:|");
  for (const p of predictions) {
    lines.push(
      `| ${escapeMd(deviceLabel(p))}${p.ood ? " ⚠" : ""} | ${formatDuration(p.duration_us)} | ${formatInterval(p.duration_us_lo, p.duration_us_hi) || DASH} | ` +
        `${escapeMd(formatBound(p))} | ${fixed(p.headroom, 2, "×")} | ${fixed(p.achieved_gbps, 0)} | ${fixed(p.gflops, 0)} | ${percent(p.l2_hit_rate)} |`,
    );
  }
  if (ctx.launch) {
    const l = ctx.launch;
    const shared = l.shared_bytes ? `, ${l.shared_bytes} B shared` : "";
    lines.push("", `launch: grid ${l.grid.join("×")}, block ${l.block.join("×")}${shared}${ctx.launchFrom ? ` (${escapeMd(ctx.launchFrom)})` : ""}`);
  }
  if (ctx.note) lines.push("", `_${escapeMd(ctx.note)}_`);
  const notes = predictions.filter((p) => p.note).map((p) => `- ${escapeMd(deviceLabel(p))}: ${escapeMd(String(p.note))}`);
  if (notes.length) lines.push("", "notes:", ...notes);
  // A source answer's breakdown is the kernel itself; a module's lists the ops that matter.
  const breakdown = predictions[0]?.kind === "module" ? breakdownLines(predictions[0]) : [];
  if (breakdown.length) lines.push("", `top ops on ${escapeMd(deviceLabel(predictions[0]))}:`, ...breakdown);
  const version = ctx.modelVersion || predictions.find((p) => p.model_version)?.model_version;
  if (version) lines.push("", `model: \`${version}\``);
  lines.push("", "⚠ = outside the model's training range (less certain). × roofline = predicted time / time at the roofline ceiling.");
  return lines.join("\n");
}

interface BreakdownRow {
  op?: string;
  count?: number;
  duration_us?: number;
  bound?: string;
}

/** Module/source answers carry "breakdown": a list of the top ops (JSON text from servers before
 * it was nested); show up to 5. */
export function breakdownLines(p: Prediction | undefined): string[] {
  if (!p || p.breakdown === null || p.breakdown === undefined || p.breakdown === "") return [];
  let rows: unknown = p.breakdown;
  if (typeof rows === "string") {
    try {
      rows = JSON.parse(rows);
    } catch {
      return [];
    }
  }
  if (!Array.isArray(rows)) return [];
  return (rows as BreakdownRow[]).slice(0, 5).map((r) =>
    `- ${escapeMd(String(r.op ?? "?"))} ×${r.count ?? 1}: ${formatDuration(r.duration_us)}${r.bound ? ` (${escapeMd(r.bound)})` : ""}`,
  );
}

/** A one-line summary for notifications and the output channel. */
export function summaryLine(title: string, predictions: Prediction[]): string {
  const parts = predictions.map((p) => {
    const interval = formatInterval(p.duration_us_lo, p.duration_us_hi);
    return `${deviceLabel(p)}: ${formatDuration(p.duration_us)}${interval ? ` [${interval}]` : ""}, ${formatBound(p)}` +
      `${p.headroom !== null && p.headroom !== undefined ? `, ${p.headroom.toFixed(2)}× roofline` : ""}${p.ood ? " (outside training range)" : ""}`;
  });
  return `${title} — ${parts.join("; ")}`;
}

function escapeMd(text: string): string {
  return text.replace(/([\\`*_{}[\]<>|#])/g, "\\$1");
}
