/**
 * Blank out C/C++ comments and string/char literals while keeping every offset and newline.
 *
 * Every later scan (kernel signatures, braces, launch sites) runs on the masked text, so a brace
 * in a string or a `__global__` in a comment can never be mistaken for code, and offsets found in
 * the masked text index the original text unchanged.
 */
export function maskCode(text: string): string {
  const out: string[] = [];
  let i = 0;
  const n = text.length;
  const blank = (ch: string): string => (ch === "\n" || ch === "\r" ? ch : " ");
  while (i < n) {
    const ch = text[i];
    const next = i + 1 < n ? text[i + 1] : "";
    if (ch === "/" && next === "/") {
      // Line comment: runs to the end of the line (a trailing backslash continues it, as in C).
      while (i < n && text[i] !== "\n") {
        if (text[i] === "\\" && text[i + 1] === "\n") {
          out.push(" ", "\n");
          i += 2;
          continue;
        }
        out.push(blank(text[i]));
        i++;
      }
    } else if (ch === "/" && next === "*") {
      out.push("  ");
      i += 2;
      while (i < n && !(text[i] === "*" && text[i + 1] === "/")) {
        out.push(blank(text[i]));
        i++;
      }
      if (i < n) {
        out.push("  ");
        i += 2;
      }
    } else if (ch === "R" && next === '"' && !isIdentChar(text[i - 1] ?? "")) {
      // Raw string literal R"delim( ... )delim".
      const open = text.indexOf("(", i + 2);
      const delim = open >= 0 ? text.slice(i + 2, open) : "";
      const close = open >= 0 ? text.indexOf(")" + delim + '"', open) : -1;
      const end = close >= 0 ? close + delim.length + 2 : n;
      out.push("R");
      for (let j = i + 1; j < end; j++) out.push(blank(text[j]));
      i = end;
    } else if (ch === '"' || (ch === "'" && !isDigitSeparator(text, i))) {
      const quote = ch;
      out.push(" ");
      i++;
      while (i < n && text[i] !== quote && text[i] !== "\n") {
        if (text[i] === "\\" && i + 1 < n) {
          out.push(" ", blank(text[i + 1]));
          i += 2;
          continue;
        }
        out.push(" ");
        i++;
      }
      if (i < n && text[i] === quote) {
        out.push(" ");
        i++;
      }
    } else {
      out.push(ch);
      i++;
    }
  }
  return out.join("");
}

export function isIdentChar(ch: string): boolean {
  return /[A-Za-z0-9_]/.test(ch);
}

/** C++14 digit separators (1'000'000) are not char literals. */
function isDigitSeparator(text: string, i: number): boolean {
  return /[0-9A-Fa-f]/.test(text[i - 1] ?? "") && /[0-9A-Fa-f]/.test(text[i + 1] ?? "") && /\d/.test(precedingNumberStart(text, i));
}

function precedingNumberStart(text: string, i: number): string {
  let j = i - 1;
  while (j >= 0 && /[0-9A-Fa-fxX']/.test(text[j])) j--;
  return text[j + 1] ?? "";
}

/** Offset of the bracket matching the one at `open` in masked text, or -1 when unbalanced. */
export function matchBracket(masked: string, open: number): number {
  const pairs: Record<string, string> = { "(": ")", "{": "}", "[": "]", "<": ">" };
  const openCh = masked[open];
  const closeCh = pairs[openCh];
  if (!closeCh) return -1;
  let depth = 0;
  for (let i = open; i < masked.length; i++) {
    const c = masked[i];
    if (c === openCh) depth++;
    else if (c === closeCh) {
      depth--;
      if (depth === 0) return i;
    }
  }
  return -1;
}

/** Split `text` on commas at bracket depth 0 ((), [], {}, <<< >>> are not split inside). */
export function splitTopLevel(text: string, sep = ","): string[] {
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === "(" || c === "[" || c === "{") depth++;
    else if (c === ")" || c === "]" || c === "}") depth--;
    else if (c === sep && depth === 0) {
      parts.push(text.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(text.slice(start));
  return parts.map((p) => p.trim());
}

/** 0-based line number of `offset` in `text`. */
export function lineOf(text: string, offset: number): number {
  let line = 0;
  for (let i = 0; i < offset && i < text.length; i++) if (text[i] === "\n") line++;
  return line;
}
