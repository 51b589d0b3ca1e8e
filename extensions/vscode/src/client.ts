/**
 * HTTP client for the kernelcast server's /v1 API (global fetch: Node >= 18 and VS Code's host).
 *
 * Every failure becomes a KernelcastError whose message a user can act on: which server, what
 * went wrong (unreachable, timed out, needs an API key, rejected the kernel and why), what to do.
 */
import type { PredictBody } from "./request";

/** One answer dict (interfaces.md "The answer"); None from the server arrives as null. */
export interface Prediction {
  kernel: number;
  device: string;
  device_name?: string | null;
  kind?: string | null;
  duration_us: number | null;
  duration_us_lo?: number | null;
  duration_us_hi?: number | null;
  achieved_gbps?: number | null;
  gflops?: number | null;
  l1_hit_rate?: number | null;
  l2_hit_rate?: number | null;
  arith_intensity?: number | null;
  roofline_class?: string | null;
  bound_pipe?: string | null;
  roofline_us?: number | null;
  headroom?: number | null;
  ood?: boolean | null;
  note?: string | null;
  model_version?: string | null;
  breakdown?: BreakdownItem[] | string | null;  // a list; JSON text from older servers
  [key: string]: unknown;
}

export interface BreakdownItem {
  op?: string;
  count?: number;
  duration_us?: number;
  bound?: string;
}

export interface PredictResponse {
  model_version: string;
  predictions: Prediction[];
}

export interface DeviceInfo {
  id: string;
  name?: string;
  vendor?: string;
  arch?: string;
  [key: string]: unknown;
}

export type ErrorKind = "config" | "unreachable" | "timeout" | "auth" | "rejected" | "not_ready" | "server" | "protocol";

export class KernelcastError extends Error {
  constructor(
    message: string,
    readonly kind: ErrorKind,
    readonly status?: number,
    readonly code?: string,
    readonly field?: string | null,
  ) {
    super(message);
  }
}

export interface ClientOptions {
  serverUrl: string;
  apiKey?: string;
  timeoutMs?: number;
}

const STALE_SOCKET = new Set(["UND_ERR_SOCKET", "ECONNRESET", "EPIPE"]);

export class KernelcastClient {
  readonly baseUrl: string;
  private readonly apiKey?: string;
  private readonly timeoutMs: number;

  constructor(opts: ClientOptions) {
    this.baseUrl = normalizeServerUrl(opts.serverUrl);
    this.apiKey = opts.apiKey?.trim() || undefined;
    this.timeoutMs = opts.timeoutMs ?? 30_000;
  }

  async predict(body: PredictBody): Promise<PredictResponse> {
    const data = await this.request("POST", "/v1/predict", body);
    if (!isObject(data) || !Array.isArray(data.predictions)) {
      throw new KernelcastError(`${this.baseUrl}/v1/predict answered without a "predictions" list: is this a kernelcast server?`, "protocol");
    }
    return { model_version: String(data.model_version ?? ""), predictions: data.predictions as Prediction[] };
  }

  async devices(): Promise<DeviceInfo[]> {
    const data = await this.request("GET", "/v1/devices");
    if (!isObject(data) || !Array.isArray(data.devices)) {
      throw new KernelcastError(`${this.baseUrl}/v1/devices answered without a "devices" list: is this a kernelcast server?`, "protocol");
    }
    return data.devices as DeviceInfo[];
  }

  /** GET /readyz: the loaded model's version, or a not_ready error while the server has none. */
  async ready(): Promise<string> {
    const data = await this.request("GET", "/readyz");
    return isObject(data) ? String(data.model_version ?? "") : "";
  }

  private async request(method: "GET" | "POST", path: string, body?: unknown): Promise<unknown> {
    const url = this.baseUrl + path;
    const headers: Record<string, string> = { accept: "application/json" };
    if (body !== undefined) headers["content-type"] = "application/json";
    if (this.apiKey) {
      // Both common spellings: the server reads one of them, the other is ignored.
      headers.authorization = `Bearer ${this.apiKey}`;
      headers["x-api-key"] = this.apiKey;
    }
    const send = (): Promise<Response> => fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    let response: Response;
    try {
      try {
        response = await send();
      } catch (err) {
        // A kept-alive socket the server closed as we reused it: every call here is a pure
        // question (no side effects), so asking once more is safe.
        if (!STALE_SOCKET.has((err as { cause?: { code?: string } })?.cause?.code ?? "")) throw err;
        response = await send();
      }
    } catch (err) {
      throw networkError(this.baseUrl, url, err, this.timeoutMs);
    }
    const text = await response.text();
    let data: unknown = undefined;
    try {
      data = text ? JSON.parse(text) : undefined;
    } catch {
      data = undefined;
    }
    if (response.ok) {
      if (data === undefined) throw new KernelcastError(`${url} answered ${response.status} with a body that is not JSON: is this a kernelcast server?`, "protocol", response.status);
      return data;
    }
    throw httpError(url, response.status, data, this.apiKey !== undefined);
  }
}

/** "localhost:8000/" -> "http://localhost:8000"; anything but http(s) is a config error. */
export function normalizeServerUrl(raw: string): string {
  let text = (raw ?? "").trim();
  if (text === "") throw new KernelcastError("kernelcast.serverUrl is empty: set it to the server's address, e.g. http://127.0.0.1:8000", "config");
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(text)) text = `http://${text}`;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new KernelcastError(`kernelcast.serverUrl '${raw}' is not a URL, e.g. http://127.0.0.1:8000`, "config");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new KernelcastError(`kernelcast.serverUrl '${raw}' must be http:// or https://`, "config");
  }
  return url.toString().replace(/\/+$/, "");
}

function networkError(base: string, url: string, err: unknown, timeoutMs: number): KernelcastError {
  const e = err as { name?: string; cause?: { code?: string; message?: string }; message?: string };
  if (e?.name === "TimeoutError" || e?.name === "AbortError") {
    return new KernelcastError(`kernelcast server at ${base} did not answer ${url} within ${Math.round(timeoutMs / 1000)} s`, "timeout");
  }
  const code = e?.cause?.code ?? "";
  const why = code === "ECONNREFUSED" ? "connection refused"
    : code === "ENOTFOUND" || code === "EAI_AGAIN" ? "host not found"
    : code ? code : (e?.cause?.message ?? e?.message ?? "network error");
  return new KernelcastError(
    `kernelcast server at ${base} is unreachable (${why}): start it with \`kernelcast serve\` or fix kernelcast.serverUrl`,
    "unreachable",
  );
}

/** Map a non-2xx answer to a message; the server's {"error": {code, message, field}} is quoted. */
export function httpError(url: string, status: number, data: unknown, sentKey: boolean): KernelcastError {
  const err = isObject(data) && isObject(data.error) ? data.error : undefined;
  const code = err && typeof err.code === "string" ? err.code : undefined;
  const field = err && (typeof err.field === "string" || err.field === null) ? (err.field as string | null) : undefined;
  const detail = err && typeof err.message === "string" ? err.message : detailText(data);
  if (status === 401 || status === 403) {
    const hint = sentKey ? "the API key in kernelcast.apiKey was refused" : "the server requires an API key: set kernelcast.apiKey";
    return new KernelcastError(`kernelcast server refused ${url} (${status}): ${hint}`, "auth", status, code, field);
  }
  if (status === 404 && /\/v1\//.test(url) && !err) {
    return new KernelcastError(`${url} does not exist (404): the server is not a kernelcast server with the /v1 API (upgrade and restart \`kernelcast serve\`)`, "protocol", status);
  }
  if (status === 503) {
    return new KernelcastError(`kernelcast server at ${new URL(url).origin} has no model loaded yet (503)${detail ? `: ${detail}` : ""}`, "not_ready", status, code, field);
  }
  if (status >= 400 && status < 500) {
    const where = field ? ` (field ${field})` : "";
    return new KernelcastError(`kernelcast server rejected the request${where}: ${detail ?? `HTTP ${status}`}`, "rejected", status, code, field);
  }
  return new KernelcastError(`kernelcast server failed on ${url} (HTTP ${status})${detail ? `: ${detail}` : ""}`, "server", status, code, field);
}

/** FastAPI's own {"detail": "..."} or {"detail": [{"loc": [...], "msg": "..."}]}. */
function detailText(data: unknown): string | undefined {
  if (!isObject(data)) return undefined;
  if (typeof data.detail === "string") return data.detail;
  if (Array.isArray(data.detail) && isObject(data.detail[0])) {
    const first = data.detail[0];
    const loc = Array.isArray(first.loc) ? first.loc.join(".") : "";
    return `${loc ? loc + ": " : ""}${String(first.msg ?? "invalid")}`;
  }
  return undefined;
}

function isObject(x: unknown): x is Record<string, unknown> {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}
