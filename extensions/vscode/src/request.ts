/**
 * Build POST /v1/predict bodies (interfaces.md "HTTP API"): {"kernels": [K...], "devices": [...], "model"?}.
 * A kernel K is CUDA/HIP source + language + launch, or a KernelBench-style PyTorch module's text.
 */
import type { Dim3, LaunchConfig } from "./launch";

export interface LaunchSpec {
  grid: Dim3;
  block: Dim3;
  kernel?: string;
  defines?: Record<string, string>;
  shared_bytes?: number;
}

export interface KernelQuery {
  dtype?: string;
  op?: string;
  shape?: Record<string, number>;
  source?: string;
  language?: "cuda" | "hip";
  launch?: LaunchSpec;
  module?: string;
}

export type DeviceRef = string | Record<string, unknown>;

export interface PredictBody {
  kernels: KernelQuery[];
  devices: DeviceRef[];
  model?: string;
}

/** A problem with what the user asked (not with the server): shown as is. */
export class InputError extends Error {}

/** Device names from the setting: trimmed, blanks dropped, duplicates (any case) collapsed. */
export function normalizeDevices(devices: unknown): string[] {
  if (!Array.isArray(devices)) throw new InputError("kernelcast.devices must be a list of device names, e.g. [\"H100\"]");
  const seen = new Set<string>();
  const out: string[] = [];
  for (const d of devices) {
    if (typeof d !== "string") throw new InputError(`kernelcast.devices holds ${JSON.stringify(d)}, not a device name`);
    const name = d.trim();
    if (name === "" || seen.has(name.toLowerCase())) continue;
    seen.add(name.toLowerCase());
    out.push(name);
  }
  if (out.length === 0) throw new InputError("kernelcast.devices is empty: pick at least one device (command \"kernelcast: Pick devices\")");
  return out;
}

/** NAME: value settings as the strings the API takes ({"N": 1024} -> {"N": "1024"}). */
export function normalizeDefines(defines: unknown, setting = "kernelcast.defines"): Record<string, string> {
  if (defines === undefined || defines === null) return {};
  if (typeof defines !== "object" || Array.isArray(defines)) {
    throw new InputError(`${setting} must be an object of NAME: value, e.g. {"N": 1024}`);
  }
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(defines as Record<string, unknown>)) {
    if (!/^[A-Za-z_]\w*$/.test(k)) throw new InputError(`${setting}: '${k}' is not a C identifier`);
    if (typeof v !== "string" && typeof v !== "number") throw new InputError(`${setting}.${k} must be a string or a number`);
    out[k] = String(v);
  }
  return out;
}

/** One CUDA/HIP kernel question (a template kernel's instantiation is in the source, not the name). */
export function buildSourceKernel(opts: {
  source: string;
  language: "cuda" | "hip";
  kernelName: string;
  launch: Pick<LaunchConfig, "grid" | "block" | "shared_bytes">;
  dtype?: string;
  defines?: Record<string, string>;
}): KernelQuery {
  const launch: LaunchSpec = {
    grid: opts.launch.grid,
    block: opts.launch.block,
    kernel: opts.kernelName,
  };
  if (opts.launch.shared_bytes !== undefined) launch.shared_bytes = opts.launch.shared_bytes;
  if (opts.defines && Object.keys(opts.defines).length > 0) launch.defines = opts.defines;
  const kernel: KernelQuery = { source: opts.source, language: opts.language, launch };
  if (opts.dtype) kernel.dtype = opts.dtype;
  return kernel;
}

/** Does this Python text look like a KernelBench program the server can take? Why not, if not. */
export function moduleProblem(text: string): string | undefined {
  const missing: string[] = [];
  if (!/^class\s+Model\s*\(/m.test(text)) missing.push("class Model(nn.Module)");
  if (!/^def\s+get_inputs\s*\(/m.test(text)) missing.push("get_inputs()");
  if (!/^def\s+get_init_inputs\s*\(/m.test(text)) missing.push("get_init_inputs()");
  return missing.length ? `not a KernelBench-style module: it lacks ${missing.join(", ")}` : undefined;
}

/** One PyTorch-module question (the module's full text, KernelBench style). */
export function buildModuleKernel(text: string, dtype?: string): KernelQuery {
  const problem = moduleProblem(text);
  if (problem) throw new InputError(`the selection is ${problem}`);
  const kernel: KernelQuery = { module: text };
  if (dtype) kernel.dtype = dtype;
  return kernel;
}

export function buildPredictBody(kernels: KernelQuery[], devices: DeviceRef[], model?: string): PredictBody {
  const body: PredictBody = { kernels, devices };
  if (model) body.model = model;
  return body;
}
