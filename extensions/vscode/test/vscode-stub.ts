/**
 * A stand-in for the `vscode` module (no VS Code runs here): just enough of the API for
 * extension.ts to activate, so its wiring -- providers, commands, settings -- runs in Node.
 * Documents are plain text; settings come from the `settings` object the test fills.
 */
import Module from "node:module";
import * as path from "node:path";

export const settings: Record<string, unknown> = {};
export const registered = { commands: new Map<string, (...args: unknown[]) => unknown>(), codeLens: [] as unknown[], hover: [] as unknown[] };
export const messages: string[] = [];

class Position {
  constructor(readonly line: number, readonly character: number) {}
}
class Range {
  constructor(readonly start: Position, readonly end: Position) {}
}
class EventEmitter<T> {
  private listeners: Array<(e: T) => void> = [];
  event = (l: (e: T) => void): { dispose(): void } => {
    this.listeners.push(l);
    return { dispose: () => undefined };
  };
  fire(e: T): void {
    this.listeners.forEach((l) => l(e));
  }
  dispose(): void {
    this.listeners = [];
  }
}
class CodeLens {
  command?: { title: string; command: string; tooltip?: string; arguments?: unknown[] };
  constructor(readonly range: Range, command?: CodeLens["command"]) {
    this.command = command;
  }
}
class MarkdownString {
  constructor(readonly value: string) {}
}
class Hover {
  constructor(readonly contents: MarkdownString) {}
}

export interface StubDocument {
  uri: { scheme: string; fsPath: string; toString(): string };
  fileName: string;
  languageId: string;
  getText(): string;
  positionAt(offset: number): Position;
  offsetAt(p: Position): number;
}

export function document(text: string, fileName: string, languageId: string): StubDocument {
  const lineStarts = [0];
  for (let i = 0; i < text.length; i++) if (text[i] === "\n") lineStarts.push(i + 1);
  return {
    uri: { scheme: "file", fsPath: fileName, toString: () => `file://${fileName}` },
    fileName,
    languageId,
    getText: () => text,
    positionAt: (offset: number) => {
      let line = 0;
      while (line + 1 < lineStarts.length && lineStarts[line + 1] <= offset) line++;
      return new Position(line, offset - lineStarts[line]);
    },
    offsetAt: (p: Position) => lineStarts[p.line] + p.character,
  };
}

const disposable = { dispose: () => undefined };
const state = new Map<string, unknown>();

export const vscodeStub = {
  Position, Range, EventEmitter, CodeLens, MarkdownString, Hover,
  ConfigurationTarget: { Global: 1, Workspace: 2 },
  ProgressLocation: { Notification: 15 },
  languages: {
    registerCodeLensProvider: (_sel: unknown, p: unknown) => (registered.codeLens.push(p), disposable),
    registerHoverProvider: (_sel: unknown, p: unknown) => (registered.hover.push(p), disposable),
  },
  commands: {
    registerCommand: (id: string, fn: (...a: unknown[]) => unknown) => (registered.commands.set(id, fn), disposable),
  },
  workspace: {
    getConfiguration: (section: string) => ({
      get: <T>(key: string, dflt?: T): T => (`${section}.${key}` in settings ? settings[`${section}.${key}`] as T : dflt as T),
      update: async (key: string, value: unknown) => {
        settings[`${section}.${key}`] = value;
      },
    }),
    onDidChangeConfiguration: () => disposable,
  },
  window: {
    createOutputChannel: () => ({ appendLine: (l: string) => messages.push(l), dispose: () => undefined }),
    showErrorMessage: async (m: string) => (messages.push(`error: ${m}`), undefined),
    showWarningMessage: async (m: string) => (messages.push(`warning: ${m}`), undefined),
    showInformationMessage: async (m: string) => (messages.push(`info: ${m}`), undefined),
    activeTextEditor: undefined,
    /** What the user "picks": set by a test; gets the items offered. */
    pick: undefined as undefined | ((items: Array<{ label: string; picked?: boolean }>) => Array<{ label: string }>),
    showQuickPick: async (items: Array<{ label: string; picked?: boolean }>) => vscodeStub.window.pick?.(items),
  },
};

export function stubContext(): { subscriptions: unknown[]; workspaceState: { get: <T>(k: string, d: T) => T; update: (k: string, v: unknown) => Promise<void> } } {
  return {
    subscriptions: [],
    workspaceState: {
      get: <T>(k: string, d: T): T => (state.has(k) ? (state.get(k) as T) : d),
      update: async (k: string, v: unknown) => void state.set(k, v),
    },
  };
}

// Route `require("vscode")` to the stand-in before extension.js is loaded.
const mod = Module as unknown as { _load: (request: string, parent: unknown, isMain: boolean) => unknown };
const originalLoad = mod._load;
mod._load = function (request: string, parent: unknown, isMain: boolean): unknown {
  return request === "vscode" ? vscodeStub : originalLoad.call(this, request, parent, isMain);
};

export function loadExtension(): { activate: (ctx: unknown) => void } {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require(path.resolve(__dirname, "..", "src", "extension.js"));
}
