/** maskCode of the last text seen: CodeLens, hover and command ask about the same file in turn. */
import { maskCode } from "./cmask";

let lastText: string | undefined;
let lastMasked = "";

export function cmaskCache(text: string): string {
  if (text !== lastText) {
    lastMasked = maskCode(text);
    lastText = text;
  }
  return lastMasked;
}
