/**
 * A small evaluator for the C integer/float expressions found in launch configurations:
 * `(n + 255) / 256`, `1 << 20`, `N * sizeof(float)`, `std::min(blocks, 1024)`, `ceil(n / 256.0)`.
 *
 * Integer division truncates as in C, so a ceil-div written the usual way gives the launch's
 * real grid. Anything it cannot evaluate (a runtime variable, an unknown function) raises
 * EvalError naming the culprit, so the user is told exactly what to set.
 */

export class EvalError extends Error {}

/** An EvalError that already names the variable to blame: outer lookups pass it on unchanged. */
export class NamedEvalError extends EvalError {}

export interface CValue {
  v: number;
  int: boolean;
}

/** Resolve an identifier to a value (or undefined when it is unknown). */
export type Resolver = (name: string) => CValue | undefined;

const SIZEOF: Record<string, number> = {
  char: 1, "signed char": 1, "unsigned char": 1, bool: 1, int8_t: 1, uint8_t: 1,
  short: 2, "unsigned short": 2, half: 2, __half: 2, __nv_bfloat16: 2, int16_t: 2, uint16_t: 2,
  int: 4, "unsigned int": 4, unsigned: 4, float: 4, int32_t: 4, uint32_t: 4, uint: 4,
  long: 8, "unsigned long": 8, "long long": 8, "unsigned long long": 8, double: 8, size_t: 8,
  int64_t: 8, uint64_t: 8, float2: 8, int2: 8, half2: 4, __half2: 4, float4: 16, int4: 16, double2: 16,
};

const INT_TYPES = /^(const\s+)?(unsigned\s+|signed\s+)?(int|long|long\s+long|short|char|size_t|u?int(8|16|32|64)_t|unsigned|uint|dim_t|index_t)$/;
const FLOAT_TYPES = /^(const\s+)?(float|double)$/;

type Tok = { t: "num"; v: CValue } | { t: "id"; v: string } | { t: "op"; v: string };

function tokenize(src: string): Tok[] {
  const toks: Tok[] = [];
  let i = 0;
  while (i < src.length) {
    const c = src[i];
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    const num = /^(0[xX][0-9a-fA-F']+|(\d[\d']*\.?[\d']*|\.\d+)([eE][+-]?\d+)?)([uUlLfFzZ]*)/.exec(src.slice(i));
    if (num && /[\d.]/.test(c)) {
      const body = num[1].replace(/'/g, "");
      const suffix = num[4].toLowerCase();
      const isFloat = !/^0x/i.test(body) && (/[.eE]/.test(body) || suffix.includes("f"));
      const v = /^0x/i.test(body) ? parseInt(body, 16) : /^0\d+$/.test(body) ? parseInt(body, 8) : Number(body);
      toks.push({ t: "num", v: { v, int: !isFloat } });
      i += num[0].length;
      continue;
    }
    // dim3 members (grid.x) are one name: the launch scope knows them; other members stay unknown.
    const id = /^[A-Za-z_]\w*(\s*::\s*[A-Za-z_]\w*)*(\.[xyz]\b)?/.exec(src.slice(i));
    if (id) {
      toks.push({ t: "id", v: id[0].replace(/\s+/g, "") });
      i += id[0].length;
      continue;
    }
    const op = /^(->|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%()<>?:,!~&|^[\].])/.exec(src.slice(i));
    if (!op) throw new EvalError(`cannot read '${src.slice(i, i + 10)}'`);
    toks.push({ t: "op", v: op[0] });
    i += op[0].length;
  }
  return toks;
}

const toInt = (x: CValue): CValue => ({ v: Math.trunc(x.v), int: true });

function arith(op: string, a: CValue, b: CValue): CValue {
  const int = a.int && b.int;
  switch (op) {
    case "+": return { v: a.v + b.v, int };
    case "-": return { v: a.v - b.v, int };
    case "*": return { v: a.v * b.v, int };
    case "/":
      if (b.v === 0) throw new EvalError("division by zero");
      return { v: int ? Math.trunc(a.v / b.v) : a.v / b.v, int };
    case "%":
      if (b.v === 0) throw new EvalError("division by zero");
      return { v: a.v % b.v, int: true };
    case "<<": return { v: a.v * 2 ** b.v, int: true };
    case ">>": return { v: Math.floor(a.v / 2 ** b.v), int: true };
    case "<": return { v: Number(a.v < b.v), int: true };
    case ">": return { v: Number(a.v > b.v), int: true };
    case "<=": return { v: Number(a.v <= b.v), int: true };
    case ">=": return { v: Number(a.v >= b.v), int: true };
    case "==": return { v: Number(a.v === b.v), int: true };
    case "!=": return { v: Number(a.v !== b.v), int: true };
    case "&&": return { v: Number(Boolean(a.v) && Boolean(b.v)), int: true };
    case "||": return { v: Number(Boolean(a.v) || Boolean(b.v)), int: true };
    case "&": return { v: Number(BigInt(Math.trunc(a.v)) & BigInt(Math.trunc(b.v))), int: true };
    case "|": return { v: Number(BigInt(Math.trunc(a.v)) | BigInt(Math.trunc(b.v))), int: true };
    case "^": return { v: Number(BigInt(Math.trunc(a.v)) ^ BigInt(Math.trunc(b.v))), int: true };
  }
  throw new EvalError(`unsupported operator ${op}`);
}

const PRECEDENCE: Array<string[]> = [
  ["||"], ["&&"], ["|"], ["^"], ["&"], ["==", "!="], ["<", ">", "<=", ">="], ["<<", ">>"], ["+", "-"], ["*", "/", "%"],
];

const FUNCTIONS: Record<string, (args: CValue[]) => CValue> = {
  min: (a) => (a[0].v <= a[1].v ? a[0] : a[1]),
  max: (a) => (a[0].v >= a[1].v ? a[0] : a[1]),
  ceil: (a) => ({ v: Math.ceil(a[0].v), int: false }),
  floor: (a) => ({ v: Math.floor(a[0].v), int: false }),
  sqrt: (a) => ({ v: Math.sqrt(a[0].v), int: false }),
  pow: (a) => ({ v: a[0].v ** a[1].v, int: false }),
  abs: (a) => ({ v: Math.abs(a[0].v), int: a[0].int }),
};
const FUNCTION_ALIASES: Record<string, string> = {
  "std::min": "min", "std::max": "max", fmin: "min", fmax: "max", fminf: "min", fmaxf: "max", MIN: "min",
  MAX: "max", "std::ceil": "ceil", ceilf: "ceil", "std::floor": "floor", floorf: "floor", sqrtf: "sqrt",
  "std::sqrt": "sqrt", powf: "pow", "std::pow": "pow", "std::abs": "abs",
};

class Parser {
  private pos = 0;
  constructor(private readonly toks: Tok[], private readonly resolve: Resolver) {}

  parse(): CValue {
    const v = this.ternary();
    if (this.pos < this.toks.length) throw new EvalError(`unexpected '${this.toks[this.pos].v}'`);
    return v;
  }

  private peek(): Tok | undefined {
    return this.toks[this.pos];
  }

  private isOp(v: string): boolean {
    const t = this.peek();
    return t !== undefined && t.t === "op" && t.v === v;
  }

  private expect(v: string): void {
    if (!this.isOp(v)) throw new EvalError(`expected '${v}'`);
    this.pos++;
  }

  private ternary(): CValue {
    const cond = this.binary(0);
    if (!this.isOp("?")) return cond;
    this.pos++;
    const a = this.ternary();
    this.expect(":");
    const b = this.ternary();
    return cond.v ? a : b;
  }

  private binary(level: number): CValue {
    if (level >= PRECEDENCE.length) return this.unary();
    let left = this.binary(level + 1);
    for (;;) {
      const t = this.peek();
      if (!t || t.t !== "op" || !PRECEDENCE[level].includes(t.v)) return left;
      this.pos++;
      left = arith(t.v, left, this.binary(level + 1));
    }
  }

  private unary(): CValue {
    const t = this.peek();
    if (t?.t === "op" && (t.v === "-" || t.v === "+" || t.v === "!" || t.v === "~")) {
      this.pos++;
      const x = this.unary();
      if (t.v === "-") return { v: -x.v, int: x.int };
      if (t.v === "!") return { v: Number(!x.v), int: true };
      if (t.v === "~") return { v: -Math.trunc(x.v) - 1, int: true };
      return x;
    }
    if (t?.t === "op" && t.v === "(") {
      const cast = this.tryCast();
      if (cast) return cast;
    }
    return this.primary();
  }

  /** `(int) x`, `(float)(n)`, `(unsigned int) y`: a parenthesised type name then an operand. */
  private tryCast(): CValue | undefined {
    let j = this.pos + 1;
    const words: string[] = [];
    while (j < this.toks.length && this.toks[j].t === "id") words.push(this.toks[j++].v as string);
    const close = this.toks[j];
    if (words.length === 0 || !close || close.t !== "op" || close.v !== ")") return undefined;
    const type = words.join(" ");
    if (!INT_TYPES.test(type) && !FLOAT_TYPES.test(type)) return undefined;
    this.pos = j + 1;
    const x = this.unary();
    return INT_TYPES.test(type) ? toInt(x) : { v: x.v, int: false };
  }

  private args(): CValue[] {
    this.expect("(");
    const out: CValue[] = [];
    if (this.isOp(")")) {
      this.pos++;
      return out;
    }
    for (;;) {
      out.push(this.ternary());
      if (this.isOp(",")) {
        this.pos++;
        continue;
      }
      this.expect(")");
      return out;
    }
  }

  private primary(): CValue {
    const t = this.peek();
    if (!t) throw new EvalError("expression ends early");
    this.pos++;
    if (t.t === "num") return t.v;
    if (t.t === "op") {
      if (t.v !== "(") throw new EvalError(`unexpected '${t.v}'`);
      const v = this.ternary();
      this.expect(")");
      return v;
    }
    const name = t.v;
    if (name === "sizeof") return this.sizeofExpr();
    if (/^(static_cast|reinterpret_cast)$/.test(name) && this.isOp("<")) {
      this.pos++;
      const words: string[] = [];
      while (this.peek()?.t === "id") words.push(this.toks[this.pos++].v as string);
      this.expect(">");
      const [x] = this.args();
      const type = words.join(" ");
      return FLOAT_TYPES.test(type) ? { v: x.v, int: false } : toInt(x);
    }
    if (this.isOp("(")) {
      const fn = FUNCTIONS[FUNCTION_ALIASES[name] ?? name];
      if (INT_TYPES.test(name)) return toInt(this.args()[0]); // functional cast int(x)
      if (FLOAT_TYPES.test(name)) return { v: this.args()[0].v, int: false };
      if (!fn) throw new EvalError(`calls ${name}(), which kernelcast cannot evaluate`);
      return fn(this.args());
    }
    if (name === "true") return { v: 1, int: true };
    if (name === "false") return { v: 0, int: true };
    const v = this.resolve(name);
    if (v === undefined) throw new EvalError(`uses '${name}', whose value is not in the file (a parameter or run-time value)`);
    return v;
  }

  private sizeofExpr(): CValue {
    this.expect("(");
    const words: string[] = [];
    while (this.peek()?.t === "id") words.push(this.toks[this.pos++].v as string);
    const type = words.filter((w) => w !== "const").join(" ");
    if (!this.isOp(")") || !(type in SIZEOF)) throw new EvalError(`sizeof(${type || "..."}) is not a known type size`);
    this.pos++;
    return { v: SIZEOF[type], int: true };
  }
}

/** Evaluate a C expression; throws EvalError with a reason a user can act on. */
export function evalC(expr: string, resolve: Resolver): CValue {
  return new Parser(tokenize(expr), resolve).parse();
}
