/**
 * Infer a kernel's launch configuration from a launch site in the same file:
 * `k<<<grid, block[, shared[, stream]]>>>(...)`, `hipLaunchKernelGGL(k, grid, block, shared, stream, ...)`
 * or `cudaLaunchKernel((void*)k, grid, block, args, shared, stream)`.
 *
 * grid/block may be literals, `dim3(...)` expressions, or variables and macros defined earlier in
 * the file (`dim3 grid((n + 255) / 256)`, `#define BLOCK 256`). Runtime values (`atoi(argv[1])`)
 * cannot be known from the text: the user supplies them in `kernelcast.defines`, and we say which
 * name was missing rather than guess.
 */
import { CValue, evalC, EvalError, NamedEvalError } from "./cexpr";
import { isIdentChar, lineOf, maskCode, matchBracket, splitTopLevel } from "./cmask";
import { enclosingTemplateParams } from "./extract";

export type Dim3 = [number, number, number];

export interface LaunchConfig {
  grid: Dim3;
  block: Dim3;
  shared_bytes?: number;
  /** Template arguments at the launch site (`k<float, 4><<<...>>>` -> "float, 4"). */
  templateArgs?: string;
  /** 0-based line of the launch site the configuration came from. */
  line: number;
}

export interface LaunchFailure {
  reason: string;
  line?: number;
}

interface LaunchSite {
  offset: number;
  templateArgs?: string;
  grid: string;
  block: string;
  shared?: string;
}

interface Binding {
  offset: number;
  expr?: string;
  dim3?: string[];
  /** Changed in a way we do not evaluate (n += 1, &n passed to scanf, i++): unknown from here on. */
  mutated?: boolean;
}

const MAX_THREADS_PER_BLOCK = 1024;

/** Every launch site of `kernel` in `masked` text, in file order. */
export function findLaunchSites(masked: string, kernel: string): LaunchSite[] {
  const sites: LaunchSite[] = [];
  const chevrons = /<<</g;
  let m: RegExpExecArray | null;
  while ((m = chevrons.exec(masked)) !== null) {
    let k = m.index - 1;
    while (k >= 0 && /\s/.test(masked[k])) k--;
    let templateArgs: string | undefined;
    if (masked[k] === ">") {
      const open = matchBackward(masked, k);
      if (open < 0) continue;
      templateArgs = masked.slice(open + 1, k).trim();
      k = open - 1;
      while (k >= 0 && /\s/.test(masked[k])) k--;
    }
    const nameEnd = k + 1;
    while (k >= 0 && (isIdentChar(masked[k]) || masked[k] === ":")) k--;
    const name = masked.slice(k + 1, nameEnd).split("::").pop();
    if (name !== kernel) continue;
    const close = masked.indexOf(">>>", m.index + 3);
    if (close < 0) continue;
    const args = splitTopLevel(masked.slice(m.index + 3, close));
    if (args.length < 2) continue;
    sites.push({ offset: k + 1, templateArgs, grid: args[0], block: args[1], shared: args[2] });
  }
  const calls = /\b(hipLaunchKernelGGL|cudaLaunchKernel)\s*\(/g;
  while ((m = calls.exec(masked)) !== null) {
    const open = m.index + m[0].length - 1;
    const close = matchBracket(masked, open);
    if (close < 0) continue;
    const args = splitTopLevel(masked.slice(open + 1, close));
    // (void*)k, (k<float>), k -> name and template args
    const target = args[0].replace(/^\(\s*void\s*\*\s*\)/, "").replace(/^\((.*)\)$/s, "$1").replace(/^&/, "").trim();
    const t = /^([\w:]+)\s*(?:<(.*)>)?$/s.exec(target);
    if (!t || t[1].split("::").pop() !== kernel) continue;
    const shared = m[1] === "hipLaunchKernelGGL" ? args[3] : args[4];
    sites.push({ offset: m.index, templateArgs: t[2]?.trim(), grid: args[1] ?? "", block: args[2] ?? "", shared });
  }
  return sites.sort((a, b) => a.offset - b.offset);
}

function matchBackward(masked: string, close: number): number {
  let depth = 0;
  for (let i = close; i >= 0; i--) {
    if (masked[i] === ">") depth++;
    else if (masked[i] === "<") {
      depth--;
      if (depth === 0) return i;
    } else if (masked[i] === ";" || masked[i] === "{" || masked[i] === "}") return -1;
  }
  return -1;
}

/** Macros, constants, variables and dim3s defined in the file, each with where it was set. */
export function collectBindings(masked: string): Map<string, Binding[]> {
  const out = new Map<string, Binding[]>();
  const add = (name: string, b: Binding): void => {
    const list = out.get(name) ?? [];
    list.push(b);
    out.set(name, list);
  };
  // Object-like macros (#define N 1024); function-like ones (#define F(x) ...) are skipped.
  const defines = /^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(?!\()[ \t]*((?:[^\n\\]|\\\n)*)/gm;
  let m: RegExpExecArray | null;
  while ((m = defines.exec(masked)) !== null) {
    add(m[1], { offset: m.index, expr: m[2].replace(/\\\n/g, " ").trim() });
  }
  // dim3 g(a, b), dim3 g = dim3(a, b), dim3 g{a, b}, dim3 g = {a, b}
  const dims = /\bdim3\s+([A-Za-z_]\w*)\s*(?:=\s*(?:dim3\s*)?)?([({])/g;
  while ((m = dims.exec(masked)) !== null) {
    const open = m.index + m[0].length - 1;
    const close = matchBracket(masked, open);
    if (close < 0) continue;
    add(m[1], { offset: m.index, dim3: splitTopLevel(masked.slice(open + 1, close)) });
  }
  // `dim3 g;` is 1x1x1 until its members are set (`g.x = n / 256;`).
  const bareDims = /\bdim3\s+([A-Za-z_]\w*)\s*;/g;
  while ((m = bareDims.exec(masked)) !== null) add(m[1], { offset: m.index, dim3: [] });
  const members = /\b([A-Za-z_]\w*)\.([xyz])\s*=(?!=)\s*([^;{}]*);/g;
  while ((m = members.exec(masked)) !== null) add(`${m[1]}.${m[2]}`, { offset: m.index, expr: m[3].trim() });
  // Changes we cannot follow. A false alarm only costs an inferred launch, never a wrong one.
  const mutations = [
    /(?<![&\w)\]])&\s*([A-Za-z_]\w*(?:\.[xyz])?)\b(?!\s*(?:\[|->|\.(?![xyz]\b)))/g,
    /\b([A-Za-z_]\w*(?:\.[xyz])?)\s*(?:\+\+|--|<<=|>>=|[-+*/%&|^]=)/g,
    /(?:\+\+|--)\s*([A-Za-z_]\w*(?:\.[xyz])?)\b/g,
  ];
  for (const re of mutations) {
    while ((m = re.exec(masked)) !== null) add(m[1], { offset: m.index, mutated: true });
  }
  // Scalar declarations and assignments: `const int n = 1 << 20;`, `blocks = (n + 255) / 256;`.
  const statements = /(?:^|[;{}(\n])\s*((?:(?:const|constexpr|static|unsigned|signed|long|short|int|size_t|auto|float|double|u?int(?:8|16|32|64)_t|uint|std::size_t)\s+)*)([A-Za-z_]\w*(?:\s*=[^;{}]*?)?(?:\s*,\s*[A-Za-z_]\w*\s*=[^;{}]*?)*)\s*;/g;
  while ((m = statements.exec(masked)) !== null) {
    const body = m[2];
    const start = m.index + m[0].indexOf(body);
    if (!m[1] && !/^[A-Za-z_]\w*\s*=[^=]/.test(body)) continue;
    for (const part of splitTopLevel(body)) {
      const eq = /^([A-Za-z_]\w*)\s*=([^=][\s\S]*)$/.exec(part);
      if (eq) add(eq[1], { offset: start, expr: eq[2].trim() });
    }
    statements.lastIndex = m.index + m[0].length - 1; // the `;` may open the next statement
  }
  return out;
}

/** Values the user supplied (kernelcast.defines) for names the file cannot give. */
export type UserValues = Record<string, string | number>;

class Scope {
  private readonly active = new Set<string>();
  constructor(private readonly bindings: Map<string, Binding[]>, private readonly user: UserValues, private readonly text: string) {}

  /** The binding of `name` in force at `offset`: the last one set before it. */
  private bindingAt(name: string, offset: number): Binding | undefined {
    const list = this.bindings.get(name);
    if (!list) return undefined;
    let best: Binding | undefined;
    for (const b of list) if (b.offset < offset && (!best || b.offset > best.offset)) best = b;
    return best;
  }

  scalar(expr: string, offset: number): CValue {
    return evalC(expr, (name) => this.lookup(name, offset));
  }

  private lookup(name: string, offset: number): CValue | undefined {
    if (this.active.has(name)) return undefined; // self-reference (n = n * 2): not a constant
    const user = this.userValue(name);
    this.active.add(name);
    try {
      const member = /^(\w+)\.([xyz])$/.exec(name);
      if (member) return this.member(member[1], member[2] as "x" | "y" | "z", offset);
      const b = this.bindingAt(name, offset);
      if (b?.mutated && user === undefined) {
        throw new NamedEvalError(`uses '${name}', which changes at run time (line ${lineOf(this.text, b.offset) + 1})`);
      }
      if (b?.expr !== undefined && b.expr !== "" && !b.mutated) {
        try {
          return this.scalar(b.expr, b.offset);
        } catch (err) {
          if (!(err instanceof EvalError)) throw err;
          if (user === undefined) {
            if (err instanceof NamedEvalError) throw err;
            throw new NamedEvalError(`uses '${name}' (= ${b.expr.replace(/\s+/g, " ").slice(0, 60)}), which is only known at run time`);
          }
        }
      }
      if (user !== undefined) return evalC(user, (n) => this.lookup(n, offset));
      return undefined;
    } finally {
      this.active.delete(name);
    }
  }

  /** `k<BLOCK, float>`: host constants become numbers (device code cannot see them); types stay. */
  templateArgs(args: string, offset: number): string {
    return splitTopLevel(args).map((a) => {
      if (!/^[\w\s()+\-*/%<>:.]+$/.test(a) || /^(unsigned\s+|signed\s+)?[A-Za-z_][\w:]*$/.test(a) && !this.bindings.has(a)) return a;
      try {
        const v = this.scalar(a, offset);
        return v.int ? String(v.v) : a;
      } catch {
        return a;
      }
    }).join(", ");
  }

  private userValue(name: string): string | undefined {
    return Object.prototype.hasOwnProperty.call(this.user, name) ? String(this.user[name]) : undefined;
  }

  /** `g.x` in an expression: its last assignment after g was declared, else g's own component. */
  private member(name: string, c: "x" | "y" | "z", offset: number): CValue | undefined {
    const dims = this.dim3Components(name, offset);
    return dims ? { v: dims[["x", "y", "z"].indexOf(c)], int: true } : undefined;
  }

  /** A named dim3's three components in force at `offset`, or undefined when it is not a dim3. */
  private dim3Components(name: string, offset: number): Dim3 | undefined {
    const b = this.bindingAt(name, offset);
    if (!b) return undefined;
    if (b.mutated) throw new NamedEvalError(`uses '${name}', which changes at run time (line ${lineOf(this.text, b.offset) + 1})`);
    if (!b.dim3) return undefined;
    const parts = [...b.dim3];
    if (parts.length > 3) throw new EvalError(`'${name}' is not a 1-3 component size`);
    return (["x", "y", "z"] as const).map((c, i) => {
      const set = this.bindingAt(`${name}.${c}`, offset);
      if (set && set.offset > b.offset) {
        if (set.mutated) throw new NamedEvalError(`uses '${name}.${c}', which changes at run time (line ${lineOf(this.text, set.offset) + 1})`);
        return this.positive(set.expr ?? "", set.offset);
      }
      return parts[i] === undefined || parts[i] === "" ? 1 : this.positive(parts[i], b.offset);
    }) as Dim3;
  }

  private positive(expr: string, at: number): number {
    const v = this.scalar(expr, at);
    const n = Math.trunc(v.v);
    if (!Number.isFinite(n) || n < 1) throw new EvalError(`'${expr.trim()}' evaluates to ${v.v}, not a positive size`);
    return n;
  }

  dim3(expr: string, offset: number): Dim3 {
    const text = expr.trim();
    if (/^[A-Za-z_]\w*$/.test(text)) {
      const named = this.dim3Components(text, offset);
      if (named) return named;
    }
    const ctor = /^dim3\s*([({])([\s\S]*)[)}]$/.exec(text);
    const parts = ctor ? splitTopLevel(ctor[2]) : [text];
    if (parts.length === 0 || parts.length > 3 || parts.some((p) => p === "")) {
      throw new EvalError(`'${text}' is not a 1-3 component size`);
    }
    const dims = parts.map((p) => this.positive(p, offset));
    while (dims.length < 3) dims.push(1);
    return dims as Dim3;
  }
}

/**
 * The launch configuration of `kernel` from its first launch site that evaluates, or a failure
 * saying why none did (no site, or the name a site depends on that the file does not define).
 */
export function inferLaunch(text: string, kernel: string, user: UserValues = {}, masked: string = maskCode(text)): LaunchConfig | LaunchFailure {
  const sites = findLaunchSites(masked, kernel);
  if (sites.length === 0) return { reason: `no launch of ${kernel} (<<<grid, block>>>) in this file` };
  const scope = new Scope(collectBindings(masked), user, text);
  let firstFailure: LaunchFailure | undefined;
  for (const site of sites) {
    const line = lineOf(text, site.offset);
    try {
      const grid = scope.dim3(site.grid, site.offset);
      const block = scope.dim3(site.block, site.offset);
      const threads = block[0] * block[1] * block[2];
      if (threads > MAX_THREADS_PER_BLOCK) {
        throw new EvalError(`block ${block.join("x")} has ${threads} threads, more than ${MAX_THREADS_PER_BLOCK}`);
      }
      const config: LaunchConfig = { grid, block, line };
      if (site.templateArgs) {
        // k<T><<<...>>> inside `template <typename T> void run()`: T is only known per caller.
        const hostParams = enclosingTemplateParams(masked, site.offset);
        const unbound = splitTopLevel(site.templateArgs).find((a) => hostParams.includes(a.trim()));
        if (unbound) throw new EvalError(`instantiates ${kernel}<${site.templateArgs}> with '${unbound}', a template parameter of the host function around it`);
        config.templateArgs = scope.templateArgs(site.templateArgs, site.offset);
      }
      if (site.shared !== undefined && site.shared.trim() !== "") {
        const shared = Math.trunc(scope.scalar(site.shared, site.offset).v);
        if (shared > 0) config.shared_bytes = shared;
      }
      return config;
    } catch (err) {
      if (!(err instanceof EvalError)) throw err;
      firstFailure ??= { reason: `the launch on line ${line + 1} ${err.message}`, line };
    }
  }
  return firstFailure!;
}

export function isLaunchConfig(x: LaunchConfig | LaunchFailure): x is LaunchConfig {
  return (x as LaunchConfig).grid !== undefined;
}

/** Parse a user-entered size: "256", "128,4", "[64, 64, 1]", "64x64". */
export function parseDim3(input: string | number[] | undefined | null): Dim3 | undefined {
  if (input === undefined || input === null) return undefined;
  const parts = Array.isArray(input) ? input.map(String) : input.replace(/[[\]()\s]/g, "").split(/[,x×]/);
  if (parts.length < 1 || parts.length > 3 || parts.some((p) => !/^\d+$/.test(p))) return undefined;
  const dims = parts.map(Number);
  if (dims.some((d) => d < 1)) return undefined;
  while (dims.length < 3) dims.push(1);
  return dims as Dim3;
}
