/**
 * Editor-independent glue: from a file's text and the user's settings to a /v1/predict question
 * per kernel (or the reason there is none), and a cache so unchanged kernels are not re-asked
 * every time the editor refreshes its CodeLenses.
 */
import { KernelcastClient, KernelcastError, PredictResponse } from "./client";
import { detectLanguage, extractKernelSource, findKernels, includeOffset, includerContext, KernelInfo, templateInstantiation } from "./extract";
import { cmaskCache } from "./memo";
import { Dim3, inferLaunch, isLaunchConfig, LaunchConfig, LaunchFailure } from "./launch";
import { buildPredictBody, buildSourceKernel, KernelQuery, LaunchSpec, PredictBody } from "./request";

export interface Settings {
  serverUrl: string;
  apiKey?: string;
  devices: string[];
  /** "" lets the server decide (it infers the dtype from the source). */
  dtype?: string;
  /** Macros sent to the compiler (-D, launch.defines); they also size launches. */
  defines: Record<string, string>;
  /** Values of run-time variables (n = atoi(argv[1])) for evaluating launches only: never sent,
   * since as -D macros they would rewrite every identifier of that name (a parameter `n`). */
  values?: Record<string, string>;
  /** Fallback launch when the file has no launch site the extension can evaluate. */
  grid?: Dim3;
  block?: Dim3;
  model?: string;
}

export type KernelPlan =
  | { ok: true; kernel: KernelInfo; query: KernelQuery; launch: LaunchSpec; launchFrom: string }
  | { ok: false; kernel: KernelInfo; reason: string; needsLaunch: boolean };

export interface PlanOptions {
  fileName?: string;
  languageId?: string;
  readInclude?: (name: string) => string | undefined;
  /** A launch the user entered for this kernel; wins over everything else. */
  override?: { grid: Dim3; block: Dim3 };
  /** Other source files of the folder, searched when this one never launches the kernel. */
  siblings?: () => Array<{ name: string; text: string }>;
}

const NO_SITE = /^no launch of /;

/** The kernel's launch from this file, else from the first sibling file that launches it. */
function findLaunch(text: string, kernel: KernelInfo, settings: Settings, opts: PlanOptions, masked: string): { launch: LaunchConfig | LaunchFailure; file?: string } {
  const user = { ...settings.defines, ...(settings.values ?? {}) };
  const own = inferLaunch(text, kernel.name, user, masked);
  if (isLaunchConfig(own) || !NO_SITE.test(own.reason) || !opts.siblings) return { launch: own };
  let failure: { launch: LaunchFailure; file?: string } | undefined;
  for (const sibling of opts.siblings()) {
    if (!sibling.text.includes(kernel.name)) continue;
    const got = inferLaunch(sibling.text, kernel.name, user);
    if (isLaunchConfig(got)) return { launch: got, file: sibling.name };
    if (!NO_SITE.test(got.reason)) failure ??= { launch: { ...got, reason: `${sibling.name}: ${got.reason}` }, file: sibling.name };
  }
  return failure ?? { launch: { reason: `no launch of ${kernel.name} (<<<grid, block>>>) in this file or the files beside it` } };
}

/** All kernels in `text`, each with its question or the reason it cannot be asked. */
export function planKernels(text: string, settings: Settings, opts: PlanOptions = {}): KernelPlan[] {
  const masked = cmaskCache(text);
  return findKernels(text, masked).map((k) => planKernel(text, k, settings, opts, masked));
}

export function planKernel(text: string, kernel: KernelInfo, settings: Settings, options: PlanOptions = {}, masked = cmaskCache(text)): KernelPlan {
  const opts = { ...options, siblings: options.siblings && once(options.siblings) };
  let launch: Pick<LaunchConfig, "grid" | "block" | "shared_bytes" | "templateArgs">;
  let launchFrom: string;
  const { launch: inferred, file } = findLaunch(text, kernel, settings, opts, masked);
  if (opts.override) {
    launch = { ...opts.override, templateArgs: isLaunchConfig(inferred) ? inferred.templateArgs : undefined };
    launchFrom = "entered by you";
  } else if (isLaunchConfig(inferred)) {
    launch = inferred;
    launchFrom = `launch on line ${inferred.line + 1}${file ? ` of ${file}` : ""}`;
  } else if (settings.grid && settings.block) {
    launch = { grid: settings.grid, block: settings.block };
    launchFrom = `kernelcast.launch settings (${inferred.reason})`;
  } else {
    return {
      ok: false,
      kernel,
      reason: `no launch configuration for ${kernel.name}: ${inferred.reason}. ${launchHint(inferred.reason)}`,
      needsLaunch: true,
    };
  }
  if (kernel.template && !launch.templateArgs) {
    return { ok: false, kernel, reason: `${kernel.name} is a template and no launch spells its arguments (${kernel.name}<float><<<...>>>): kernelcast cannot instantiate it`, needsLaunch: false };
  }
  const seen = new Set<string>();
  const base = (opts.fileName ?? "").split(/[\\/]/).pop() ?? "";
  const includer = base && opts.siblings ? opts.siblings().find((f) => includeOffset(f.text, base) >= 0) : undefined;
  const context = includer ? includerContext(includer.text, base, opts.readInclude, seen) : "";
  let source = (context ? `// kernelcast: what ${includer!.name} declares before including ${base}\n${context}` : "") +
    extractKernelSource(text, kernel, opts.readInclude, masked, seen);
  if (kernel.template && launch.templateArgs) {
    const instance = templateInstantiation(text, kernel, launch.templateArgs);
    if (!instance) {
      return { ok: false, kernel, reason: `cannot instantiate ${kernel.name}<${launch.templateArgs}>: its template parameters do not match the launch's arguments`, needsLaunch: false };
    }
    source += instance + "\n";
  }
  const query = buildSourceKernel({
    source,
    language: detectLanguage(text, opts.fileName, opts.languageId),
    kernelName: kernel.name,
    launch,
    dtype: settings.dtype || undefined,
    defines: settings.defines,
  });
  return { ok: true, kernel, query, launch: query.launch!, launchFrom };
}

/** What to do about a launch that does not evaluate: name the setting and the variable. */
function launchHint(reason: string): string {
  const name = /uses '([A-Za-z_]\w*)/.exec(reason)?.[1];
  const value = name ? ` (e.g. {"${name}": 1048576})` : "";
  return `Click to enter grid and block, or give the value in kernelcast.launchValues${value}, or set kernelcast.launch.grid/block`;
}

function once<T>(f: () => T): () => T {
  let done = false;
  let value: T;
  return () => {
    if (!done) {
      value = f();
      done = true;
    }
    return value;
  };
}

export function predictBody(query: KernelQuery, settings: Settings): PredictBody {
  return buildPredictBody([query], settings.devices, settings.model || undefined);
}

export interface KernelAnswer {
  answer: PredictResponse;
  /** Said to the user beside the numbers (e.g. how the question had to be rephrased). */
  note?: string;
}

const HIP_AS_CUDA_NOTE = "HIP kernel analysed as CUDA: this server cannot compile HIP (no HIP compiler there; the kernel syntax is the same)";
/** Servers (by URL) that answered a "hip" question with "not analysed" / "HIP compiler not found": ask them CUDA directly. */
const hipRejectedBy = new Set<string>();

/** HIP is sent as HIP (servers compile it to AMDGPU ISA); only a server that cannot -- an older one
 * ("language: hip is not analysed") or one without the HIP compiler -- is asked again as CUDA. */
function hipUnsupported(err: unknown): boolean {
  if (!(err instanceof KernelcastError) || err.kind !== "rejected") return false;
  return /HIP compiler not found/i.test(err.message) || (/\bhip\b/i.test(err.message) && /\b(language|CUDA)\b/.test(err.message));
}

/**
 * Ask the server about one kernel on the configured devices. A HIP kernel the server cannot
 * compile as HIP is asked again as CUDA -- what the server's own error advises -- and the
 * answer says so; any other failure is the caller's to show.
 */
export async function askKernel(cache: PredictionCache, client: KernelcastClient, query: KernelQuery, settings: Settings): Promise<KernelAnswer> {
  const asCuda = (): Promise<PredictResponse> => cache.get(client, predictBody({ ...query, language: "cuda" }, settings));
  if (query.language === "hip" && hipRejectedBy.has(client.baseUrl)) return { answer: await asCuda(), note: HIP_AS_CUDA_NOTE };
  try {
    return { answer: await cache.get(client, predictBody(query, settings)) };
  } catch (err) {
    if (query.language !== "hip" || !hipUnsupported(err)) throw err;
    hipRejectedBy.add(client.baseUrl);
    return { answer: await asCuda(), note: HIP_AS_CUDA_NOTE };
  }
}

/**
 * Answers by request body. A settled failure is dropped so the next refresh retries; successes
 * stay (bounded, oldest out first) until the settings change and the cache is cleared.
 */
export class PredictionCache {
  private readonly entries = new Map<string, Promise<PredictResponse>>();

  constructor(private readonly maxEntries = 256) {}

  has(client: KernelcastClient, body: PredictBody): boolean {
    return this.entries.has(this.key(client, body));
  }

  private key(client: KernelcastClient, body: PredictBody): string {
    return `${client.baseUrl}\n${JSON.stringify(body)}`;
  }

  get(client: KernelcastClient, body: PredictBody): Promise<PredictResponse> {
    const key = this.key(client, body);
    const hit = this.entries.get(key);
    if (hit) {
      this.entries.delete(key);
      this.entries.set(key, hit); // most recently used last
      return hit;
    }
    const pending = client.predict(body);
    pending.catch(() => this.entries.delete(key));
    this.entries.set(key, pending);
    while (this.entries.size > this.maxEntries) this.entries.delete(this.entries.keys().next().value as string);
    return pending;
  }

  clear(): void {
    this.entries.clear();
  }

  get size(): number {
    return this.entries.size;
  }
}
