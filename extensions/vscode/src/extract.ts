/**
 * Find CUDA/HIP `__global__` kernels in a source file and cut out what one kernel needs to compile.
 *
 * The server compiles what we send (NVRTC, device code only), so sending the whole file would
 * drag host code (`main`, `cudaMalloc`, `<vector>`) along and ship far more text than the kernel
 * needs. We send the file's preprocessor lines (includes, defines, conditionals), its device-side
 * declarations (`__device__` helpers, `__constant__` data, types, compile-time constants), and
 * the one kernel asked about; other kernels and host functions are left out.
 */
import { isIdentChar, lineOf, maskCode, matchBracket, splitTopLevel } from "./cmask";

export interface Chunk {
  /** Offset of the first non-blank character of the top-level item. */
  start: number;
  /** Offset one past its last character. */
  end: number;
  kind: "pp" | "item";
}

export interface KernelInfo {
  name: string;
  /** Offset of the kernel's name in the text. */
  nameOffset: number;
  /** Start of the declaration (its `template <...>` prefix included). */
  start: number;
  /** One past the closing brace of its body. */
  end: number;
  /** Offset of the `{` that opens its body. */
  bodyOpen: number;
  /** 0-based line of `start` (where a CodeLens goes). */
  line: number;
  params: string;
  template: boolean;
}

export interface ExtractedKernel {
  kernel: KernelInfo;
  /** Includes/defines + device-side declarations + the kernel: what goes in "source". */
  source: string;
}

/** Split a file into top-level items: preprocessor lines and declarations/definitions. */
export function topLevelChunks(masked: string, from = 0, to = masked.length): Chunk[] {
  const chunks: Chunk[] = [];
  let i = from;
  while (i < to) {
    while (i < to && /\s/.test(masked[i])) i++;
    if (i >= to) break;
    if (masked[i] === "#") {
      let j = i;
      while (j < to && masked[j] !== "\n") {
        if (masked[j] === "\\" && masked[j + 1] === "\n") j++;
        j++;
      }
      chunks.push({ start: i, end: j, kind: "pp" });
      i = j;
      continue;
    }
    const end = itemEnd(masked, i, to);
    const head = masked.slice(i, end);
    const container = /^(namespace\b[\w\s:]*|extern\s*)\{/.exec(head);
    if (container) {
      // Flatten `namespace x { ... }` and `extern "C" { ... }`: their members are top-level items.
      const open = i + container[0].length - 1;
      const close = matchBracket(masked, open);
      chunks.push(...topLevelChunks(masked, open + 1, close < 0 ? end : close));
      i = close < 0 ? end : close + 1;
      continue;
    }
    chunks.push({ start: i, end, kind: "item" });
    i = end;
  }
  return chunks;
}

/** End of the top-level item starting at `start`: a `;` at depth 0, or the `}` closing a body. */
function itemEnd(masked: string, start: number, to: number): number {
  let depth = 0;
  for (let i = start; i < to; i++) {
    const c = masked[i];
    if (c === "#" && depth === 0 && atLineStart(masked, i)) {
      // A directive at top level ends a malformed item instead of being swallowed by it.
      return i;
    }
    if (c === "(" || c === "[") depth++;
    else if (c === ")" || c === "]") depth--;
    else if (c === ";" && depth === 0) return i + 1;
    else if (c === "{" && depth === 0) {
      const close = matchBracket(masked, i);
      if (close < 0) return to;
      const head = stripTemplateHeader(masked.slice(start, i)).replace(/\([^()]*\)/g, "");
      // Types and brace initialisers end at the `;` after the `}`; function bodies and
      // namespaces end at the `}` itself.
      if (/\b(struct|class|union|enum)\b/.test(head) || /=/.test(head)) {
        i = close;
        continue;
      }
      return close + 1;
    }
  }
  return to;
}

/** `template <typename T, int N = 4> void f(...)` -> ` void f(...)`: defaults are not initialisers. */
function stripTemplateHeader(head: string): string {
  const m = /^\s*template\s*</.exec(head);
  if (!m) return head;
  const close = matchBracket(head, m[0].length - 1);
  return close < 0 ? head : head.slice(close + 1);
}

function atLineStart(masked: string, i: number): boolean {
  for (let j = i - 1; j >= 0; j--) {
    if (masked[j] === "\n") return true;
    if (!/[ \t]/.test(masked[j])) return false;
  }
  return true;
}

const ATTRIBUTE_CALLS = /\b(__launch_bounds__|__maxnreg__|__cluster_dims__|__attribute__|__declspec|alignas)\s*\(/g;

/** Blank out `__launch_bounds__(...)`-style attributes so the kernel's name is the ident before `(`. */
function blankAttributes(head: string): string {
  let out = head;
  ATTRIBUTE_CALLS.lastIndex = 0;
  let m: RegExpExecArray | null;
  while ((m = ATTRIBUTE_CALLS.exec(out)) !== null) {
    const open = m.index + m[0].length - 1;
    const close = matchBracket(out, open);
    const stop = close < 0 ? out.length : close + 1;
    out = out.slice(0, m.index) + " ".repeat(stop - m.index) + out.slice(stop);
    ATTRIBUTE_CALLS.lastIndex = stop;
  }
  return out;
}

/** Every `__global__` kernel defined (with a body) in `text`, in file order. */
export function findKernels(text: string, masked: string = maskCode(text)): KernelInfo[] {
  const kernels: KernelInfo[] = [];
  for (const chunk of topLevelChunks(masked)) {
    if (chunk.kind !== "item") continue;
    const info = kernelOfChunk(text, masked, chunk);
    if (info) kernels.push(info);
  }
  return kernels;
}

function kernelOfChunk(text: string, masked: string, chunk: Chunk): KernelInfo | undefined {
  const item = masked.slice(chunk.start, chunk.end);
  const g = /\b__global__\b/.exec(item);
  if (!g) return undefined;
  const open = item.indexOf("{", g.index);
  if (open < 0 || !item.trimEnd().endsWith("}")) return undefined; // a prototype, not a definition
  const head = blankAttributes(item.slice(0, open));
  const paren = head.indexOf("(", g.index);
  if (paren < 0) return undefined;
  let k = paren - 1;
  while (k >= 0 && /\s/.test(head[k])) k--;
  const nameEnd = k + 1;
  while (k >= 0 && isIdentChar(head[k])) k--;
  const name = head.slice(k + 1, nameEnd);
  if (!/^[A-Za-z_]\w*$/.test(name)) return undefined;
  const close = matchBracket(head, paren);
  return {
    name,
    nameOffset: chunk.start + k + 1,
    start: chunk.start,
    end: chunk.end,
    bodyOpen: chunk.start + open,
    line: lineOf(text, chunk.start),
    params: text.slice(chunk.start + paren + 1, chunk.start + (close < 0 ? open : close)).trim(),
    template: /^\s*template\s*</.test(item),
  };
}

/** The kernel whose declaration or body contains `offset`, if any. */
export function kernelAt(kernels: KernelInfo[], offset: number): KernelInfo | undefined {
  return kernels.find((k) => offset >= k.start && offset <= k.end);
}

const DEVICE_QUALIFIERS = /\b(__device__|__constant__|__shared__|__managed__|__forceinline__)\b/;

/** Does this top-level item belong in the device-side context sent with a kernel? */
function keepItem(masked: string, chunk: Chunk): boolean {
  const item = masked.slice(chunk.start, chunk.end);
  if (/\b__global__\b/.test(item)) return false; // other kernels: only the one asked about is sent
  if (DEVICE_QUALIFIERS.test(item)) return true;
  const brace = item.indexOf("{");
  const head = brace < 0 ? item : item.slice(0, brace);
  if (/^\s*(template\s*<[^>]*>\s*)?(struct|class|union|enum|typedef|using)\b/.test(head)) return true;
  if (/^\s*(static_assert|texture\s*<|surface\s*<)/.test(head)) return true;
  const isFunction = brace >= 0 && /\)\s*(const|noexcept|override|->[^{]*)?\s*$/.test(head);
  if (isFunction) return false; // host code (main, helpers): never compiled for the device
  // Compile-time constants kernels size their arrays and loops by.
  return /\b(const|constexpr)\b/.test(head) && !/\(/.test(head.replace(/\bsizeof\s*\([^)]*\)/g, ""));
}

/**
 * The source to send for `kernel`: preprocessor lines and device-side items in file order, then
 * the kernel itself. `readInclude` (optional) returns the text of a local `#include "x.h"` so
 * headers beside the file travel with it; unresolved ones are kept as `#include` lines.
 */
export function extractKernelSource(
  text: string,
  kernel: KernelInfo,
  readInclude?: (name: string) => string | undefined,
  masked: string = maskCode(text),
  seen: Set<string> = new Set<string>(),
): string {
  const parts: string[] = [];
  for (const chunk of topLevelChunks(masked)) {
    if (chunk.start === kernel.start) {
      parts.push(text.slice(chunk.start, chunk.end));
    } else if (chunk.kind === "pp") {
      parts.push(inlineLocalInclude(text.slice(chunk.start, chunk.end), readInclude, seen));
    } else if (keepItem(masked, chunk)) {
      parts.push(text.slice(chunk.start, chunk.end));
    }
  }
  return parts.join("\n") + "\n";
}

/** Does `text` `#include "…/name"` (the file a kernel lives in, included by its launcher)? */
export function includeOffset(text: string, name: string): number {
  const escaped = name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const m = new RegExp(`^[ \\t]*#[ \\t]*include[ \\t]*"(?:[^"]*/)?${escaped}"`, "m").exec(text);
  return m ? m.index : -1;
}

/**
 * What a file declares before it includes `name`: preprocessor lines and device-side items.
 * A kernel kept in a header (kernels.h) often uses types and macros its includer defined
 * first (`typedef float RealType;` in main.cu); without them it does not compile alone.
 */
export function includerContext(
  text: string,
  name: string,
  readInclude?: (name: string) => string | undefined,
  seen: Set<string> = new Set<string>(),
): string {
  const until = includeOffset(text, name);
  return until < 0 ? "" : deviceContext(text, until, readInclude, seen);
}

/** Preprocessor lines (local headers inlined, filtered the same way) and device-side items before `until`. */
function deviceContext(
  text: string,
  until: number,
  readInclude: ((name: string) => string | undefined) | undefined,
  seen: Set<string>,
): string {
  const masked = maskCode(text);
  const parts: string[] = [];
  for (const chunk of topLevelChunks(masked, 0, until)) {
    if (chunk.kind === "pp") parts.push(inlineLocalInclude(text.slice(chunk.start, chunk.end), readInclude, seen));
    else if (keepItem(masked, chunk)) parts.push(text.slice(chunk.start, chunk.end));
  }
  return parts.length ? parts.join("\n") + "\n" : "";
}

function inlineLocalInclude(
  line: string,
  readInclude: ((name: string) => string | undefined) | undefined,
  seen: Set<string>,
): string {
  const m = /^#\s*include\s*"([^"]+)"/.exec(line);
  if (!m || !readInclude) return line;
  if (seen.has(m[1])) return `// kernelcast: ${m[1]} already inlined above`;
  const body = readInclude(m[1]);
  if (body === undefined) return line;
  seen.add(m[1]);
  // Headers carry host code too (helpers, main-side classes): only their device side is kept.
  return `// kernelcast: begin ${m[1]}\n${deviceContext(body, body.length, readInclude, seen)}// kernelcast: end ${m[1]}`;
}

/** "cuda" or "hip", from the file name, the editor's language id, and what the file includes. */
export function detectLanguage(text: string, fileName = "", languageId = ""): "cuda" | "hip" {
  if (/\.hip$/i.test(fileName) || languageId === "hip") return "hip";
  if (/#\s*include\s*[<"]hip\/hip_runtime/.test(text) || /\bhipLaunchKernelGGL\b/.test(text)) return "hip";
  return "cuda";
}

/** Extract the kernel at `offset`, or undefined when the cursor is not inside a `__global__` function. */
export function extractKernelAt(
  text: string,
  offset: number,
  readInclude?: (name: string) => string | undefined,
): ExtractedKernel | undefined {
  const masked = maskCode(text);
  const kernel = kernelAt(findKernels(text, masked), offset);
  if (!kernel) return undefined;
  return { kernel, source: extractKernelSource(text, kernel, readInclude, masked) };
}

/** Names of the template parameters of the top-level item around `offset` (none if it is no template). */
export function enclosingTemplateParams(masked: string, offset: number): string[] {
  const chunk = topLevelChunks(masked).find((c) => offset >= c.start && offset < c.end);
  if (!chunk) return [];
  const m = /^\s*template\s*</.exec(masked.slice(chunk.start, chunk.end));
  if (!m) return [];
  const open = chunk.start + m[0].length - 1;
  const close = matchBracket(masked, open);
  if (close < 0) return [];
  return splitTopLevel(masked.slice(open + 1, close))
    .map((p) => /([A-Za-z_]\w*)\s*$/.exec(p.split("=")[0].trim())?.[1])
    .filter((n): n is string => n !== undefined);
}

/**
 * `template __global__ void k<float, 4>(float *x, int n);` for a template kernel launched as
 * `k<float><<<...>>>`: a template only produces code once instantiated, and the launch site that
 * instantiated it is host code we do not send. Defaults fill arguments the launch left out.
 */
export function templateInstantiation(text: string, kernel: KernelInfo, templateArgs: string): string | undefined {
  const masked = maskCode(text.slice(kernel.start, kernel.bodyOpen));
  const m = /^\s*template\s*</.exec(masked);
  if (!m) return undefined;
  const close = matchBracket(masked, m[0].length - 1);
  if (close < 0) return undefined;
  const params = splitTopLevel(masked.slice(m[0].length, close)).filter((p) => p !== "");
  const args = splitTopLevel(templateArgs).filter((a) => a !== "");
  if (args.length > params.length) return undefined;
  const values: string[] = [];
  const names: string[] = [];
  for (const [i, p] of params.entries()) {
    const [decl, dflt] = p.split("=").map((s) => s.trim());
    const name = /([A-Za-z_]\w*)\s*$/.exec(decl)?.[1];
    const value = args[i] ?? dflt;
    if (!name || value === undefined) return undefined;
    names.push(name);
    values.push(value);
  }
  // Substitute all parameters at once so an argument that spells another parameter's name stays put.
  const subst = (s: string): string =>
    s.replace(/\b[A-Za-z_]\w*\b/g, (w) => (names.includes(w) ? values[names.indexOf(w)] : w));
  const kernelParams = splitTopLevel(kernel.params).filter((p) => p !== "").map((p) => subst(p.split("=")[0].trim()));
  return `template __global__ void ${kernel.name}<${values.join(", ")}>(${kernelParams.join(", ")});`;
}
