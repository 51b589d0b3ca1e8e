/**
 * The VS Code side: wires the plain modules (extract, launch, request, client, format, service)
 * to a CodeLens above every `__global__` kernel, a hover on its signature, and the commands
 * "kernelcast.predictKernel" and "kernelcast.pickDevices". No logic worth testing lives here.
 */
import * as fs from "fs";
import * as path from "path";
import * as vscode from "vscode";

import { KernelcastClient, KernelcastError, Prediction } from "./client";
import { findKernels, kernelAt, KernelInfo } from "./extract";
import { hoverMarkdown, lensTitle, summaryLine } from "./format";
import { Dim3, parseDim3 } from "./launch";
import { cmaskCache } from "./memo";
import { buildModuleKernel, buildPredictBody, InputError, moduleProblem, normalizeDefines, normalizeDevices } from "./request";
import { askKernel, KernelPlan, planKernel, PredictionCache, predictBody, Settings } from "./service";

const SELECTOR: vscode.DocumentSelector = [
  { language: "cuda-cpp" },
  { language: "cuda" },
  { language: "hip" },
  { pattern: "**/*.{cu,cuh,hip}" },
];
const PYTHON: vscode.DocumentSelector = [{ language: "python" }];
const MAX_INCLUDE_BYTES = 1_000_000;
const SETTLE_MS = 400;
const SOURCE_FILE = /\.(cu|cuh|hip|cpp|cc|cxx|c|h|hpp)$/i;
const MAX_SIBLINGS = 40;

interface Overrides {
  [key: string]: { grid: Dim3; block: Dim3 };
}

class KernelcastExtension implements vscode.CodeLensProvider, vscode.HoverProvider {
  private readonly changed = new vscode.EventEmitter<void>();
  readonly onDidChangeCodeLenses = this.changed.event;
  private readonly cache = new PredictionCache();
  private readonly output = vscode.window.createOutputChannel("kernelcast");

  constructor(private readonly context: vscode.ExtensionContext) {}

  dispose(): void {
    this.changed.dispose();
    this.output.dispose();
  }

  refresh(): void {
    this.cache.clear();
    this.changed.fire();
  }

  // ---- settings -------------------------------------------------------------------------
  settings(): Settings {
    const cfg = vscode.workspace.getConfiguration("kernelcast");
    return {
      serverUrl: cfg.get<string>("serverUrl", "http://127.0.0.1:8000"),
      apiKey: cfg.get<string>("apiKey", "") || undefined,
      devices: normalizeDevices(cfg.get<unknown>("devices", ["H100"])),
      dtype: cfg.get<string>("dtype", "") || undefined,
      defines: normalizeDefines(cfg.get<unknown>("defines", {}), "kernelcast.defines"),
      values: normalizeDefines(cfg.get<unknown>("launchValues", {}), "kernelcast.launchValues"),
      grid: parseDim3(cfg.get<number[] | null>("launch.grid", null)),
      block: parseDim3(cfg.get<number[] | null>("launch.block", null)),
      model: cfg.get<string>("model", "") || undefined,
    };
  }

  client(settings: Settings): KernelcastClient {
    const timeout = vscode.workspace.getConfiguration("kernelcast").get<number>("timeoutSeconds", 30);
    return new KernelcastClient({ serverUrl: settings.serverUrl, apiKey: settings.apiKey, timeoutMs: timeout * 1000 });
  }

  private overrides(): Overrides {
    return this.context.workspaceState.get<Overrides>("kernelcast.launchOverrides", {});
  }

  private overrideKey(doc: vscode.TextDocument, kernel: KernelInfo): string {
    return `${doc.uri.toString()}#${kernel.name}`;
  }

  private plan(doc: vscode.TextDocument, kernel: KernelInfo, settings: Settings): KernelPlan {
    const dir = doc.uri.scheme === "file" ? path.dirname(doc.uri.fsPath) : undefined;
    const readInclude = dir
      ? (name: string): string | undefined => {
          // Beside the file first, then the include/ folders projects pass with -I.
          for (const base of [dir, path.join(dir, "include"), path.join(dir, "..", "include")]) {
            const file = path.resolve(base, name);
            try {
              if (fs.statSync(file).size <= MAX_INCLUDE_BYTES) return fs.readFileSync(file, "utf8");
            } catch {
              // not there: next place
            }
          }
          return undefined;
        }
      : undefined;
    return planKernel(doc.getText(), kernel, settings, {
      fileName: doc.fileName,
      languageId: doc.languageId,
      readInclude,
      siblings: dir ? () => siblingSources(dir, doc.uri.fsPath) : undefined,
      override: this.overrides()[this.overrideKey(doc, kernel)],
    });
  }

  // ---- CodeLens -------------------------------------------------------------------------
  provideCodeLenses(doc: vscode.TextDocument): vscode.CodeLens[] {
    if (!vscode.workspace.getConfiguration("kernelcast").get<boolean>("codeLens", true)) return [];
    if (doc.languageId === "python") {
      const m = /^class\s+Model\s*\(/m.exec(doc.getText());
      if (!m || moduleProblem(doc.getText())) return [];
      const pos = doc.positionAt(m.index);
      return [new vscode.CodeLens(new vscode.Range(pos, pos), {
        title: "kernelcast: predict this module",
        command: "kernelcast.predictKernel",
        arguments: [doc.uri],
      })];
    }
    const text = doc.getText();
    return findKernels(text, cmaskCache(text)).map((k) => {
      const pos = doc.positionAt(k.start);
      const lens = new vscode.CodeLens(new vscode.Range(pos, pos));
      (lens as LensWithKernel).kernel = k;
      (lens as LensWithKernel).doc = doc;
      return lens;
    });
  }

  async resolveCodeLens(lens: vscode.CodeLens, token?: vscode.CancellationToken): Promise<vscode.CodeLens> {
    const { kernel, doc } = lens as LensWithKernel;
    const retry = { command: "kernelcast.predictKernel", arguments: [doc.uri, kernel.start] };
    try {
      const settings = this.settings();
      const plan = this.plan(doc, kernel, settings);
      if (!plan.ok) {
        lens.command = plan.needsLaunch
          ? { title: `kernelcast: ${kernel.name} needs a launch config — click to enter grid/block`, tooltip: plan.reason, ...retry }
          : { title: `kernelcast: ${plan.reason.slice(0, 110)}`, tooltip: plan.reason, command: "kernelcast.refresh", arguments: [] };
        return lens;
      }
      if (!this.cache.has(this.client(settings), predictBody(plan.query, settings))) {
        // A kernel being typed changes on every keystroke: ask only once the text has settled.
        await new Promise((r) => setTimeout(r, SETTLE_MS));
        if (token?.isCancellationRequested) {
          lens.command = { title: "kernelcast: …", ...retry };
          return lens;
        }
      }
      const { answer, note } = await askKernel(this.cache, this.client(settings), plan.query, settings);
      const tooltip = `${plan.launchFrom}${note ? `; ${note}` : ""}; hover the kernel for details`;
      lens.command = { title: lensTitle(answer.predictions), tooltip, ...retry };
    } catch (err) {
      lens.command = { title: `kernelcast: ${shortError(err)}`, tooltip: errorText(err), command: "kernelcast.refresh", arguments: [] };
    }
    return lens;
  }

  // ---- hover ----------------------------------------------------------------------------
  async provideHover(doc: vscode.TextDocument, position: vscode.Position): Promise<vscode.Hover | undefined> {
    const offset = doc.offsetAt(position);
    const text = doc.getText();
    const kernel = kernelAt(findKernels(text, cmaskCache(text)), offset);
    // Only on the signature: a hover over every line of the body would drown the language server's.
    if (!kernel || offset > kernel.bodyOpen) return undefined;
    try {
      const settings = this.settings();
      const plan = this.plan(doc, kernel, settings);
      if (!plan.ok) return new vscode.Hover(new vscode.MarkdownString(`**kernelcast**: ${plan.reason}`));
      const { answer, note } = await askKernel(this.cache, this.client(settings), plan.query, settings);
      const md = hoverMarkdown(answer.predictions, { title: kernel.name, launch: plan.launch, launchFrom: plan.launchFrom, modelVersion: answer.model_version, note });
      return new vscode.Hover(new vscode.MarkdownString(md));
    } catch (err) {
      return new vscode.Hover(new vscode.MarkdownString(`**kernelcast**: ${errorText(err)}`));
    }
  }

  // ---- commands -------------------------------------------------------------------------
  async predictCommand(uri?: vscode.Uri, offset?: number): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    const doc = uri ? await vscode.workspace.openTextDocument(uri) : editor?.document;
    if (!doc) {
      void vscode.window.showErrorMessage("kernelcast: open a CUDA/HIP file or a PyTorch module first");
      return;
    }
    try {
      const settings = this.settings();
      if (doc.languageId === "python") {
        await this.predictModule(doc, editor, settings);
        return;
      }
      const at = offset ?? (editor && editor.document === doc ? doc.offsetAt(editor.selection.active) : -1);
      const text = doc.getText();
      const kernel = kernelAt(findKernels(text, cmaskCache(text)), at);
      if (!kernel) {
        void vscode.window.showErrorMessage("kernelcast: put the cursor inside a __global__ kernel (its signature or body)");
        return;
      }
      let plan = this.plan(doc, kernel, settings);
      if (!plan.ok && !plan.needsLaunch) throw new InputError(`kernelcast: ${plan.reason}`);
      if (!plan.ok || offset !== undefined) {
        // Asked from the lens (or no launch known): let the user confirm or enter grid/block.
        const entered = await this.askLaunch(kernel, plan.ok ? plan.launch.grid : settings.grid, plan.ok ? plan.launch.block : settings.block, plan.ok ? undefined : plan.reason);
        if (!entered) return;
        const overrides = { ...this.overrides() };
        const key = this.overrideKey(doc, kernel);
        const same = plan.ok && sameDims(plan.launch.grid, entered.grid) && sameDims(plan.launch.block, entered.block);
        // Accepting what the file's launch site says stores nothing: edits to that site still count.
        if (!(same && plan.ok && !overrides[key])) overrides[key] = entered;
        await this.context.workspaceState.update("kernelcast.launchOverrides", overrides);
        plan = this.plan(doc, kernel, settings);
        if (!plan.ok) throw new InputError(plan.reason);
      }
      const { answer, note } = await askKernel(this.cache, this.client(settings), plan.query, settings);
      this.report(`${kernel.name} (grid ${plan.launch.grid.join("×")}, block ${plan.launch.block.join("×")})${note ? ` [${note}]` : ""}`, answer.predictions);
      this.changed.fire();
    } catch (err) {
      void vscode.window.showErrorMessage(errorText(err));
    }
  }

  private async predictModule(doc: vscode.TextDocument, editor: vscode.TextEditor | undefined, settings: Settings): Promise<void> {
    const selection = editor && editor.document === doc && !editor.selection.isEmpty ? doc.getText(editor.selection) : undefined;
    const text = selection ?? doc.getText();
    const body = buildPredictBody([buildModuleKernel(text, settings.dtype)], settings.devices, settings.model);
    const answer = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: "kernelcast: predicting the module…" },
      () => this.cache.get(this.client(settings), body),
    );
    this.report(path.basename(doc.fileName) + (selection ? " (selection)" : ""), answer.predictions);
  }

  private async askLaunch(kernel: KernelInfo, grid: Dim3 | undefined, block: Dim3 | undefined, reason?: string): Promise<{ grid: Dim3; block: Dim3 } | undefined> {
    const validate = (v: string): string | undefined => (parseDim3(v) ? undefined : "1-3 positive integers, e.g. 1024 or 64,64 or 32x8x1");
    const g = await vscode.window.showInputBox({
      title: `kernelcast: launch of ${kernel.name}`,
      prompt: `grid (blocks)${reason ? ` — ${reason}` : ""}`,
      value: grid ? grid.join(",") : "",
      validateInput: validate,
    });
    if (g === undefined) return undefined;
    const b = await vscode.window.showInputBox({
      title: `kernelcast: launch of ${kernel.name}`,
      prompt: "block (threads per block)",
      value: block ? block.join(",") : "256",
      validateInput: validate,
    });
    if (b === undefined) return undefined;
    return { grid: parseDim3(g)!, block: parseDim3(b)! };
  }

  async pickDevices(): Promise<void> {
    const cfg = vscode.workspace.getConfiguration("kernelcast");
    const current = new Set(cfg.get<string[]>("devices", ["H100"]).map((d) => d.toLowerCase()));
    let items: vscode.QuickPickItem[];
    try {
      const devices = await this.client(this.settings()).devices();
      items = devices.map((d) => ({
        label: d.id,
        description: [d.name, d.vendor, d.arch].filter(Boolean).join(" · "),
        // "H100" in the settings is an alias of catalog id h100-sxm: tick it by any of its names.
        picked: [d.id, d.name, ...(Array.isArray(d.aliases) ? d.aliases : [])].some((n) => typeof n === "string" && current.has(n.toLowerCase())),
      }));
    } catch (err) {
      void vscode.window.showErrorMessage(errorText(err));
      return;
    }
    const picked = await vscode.window.showQuickPick(items, { canPickMany: true, title: "kernelcast: devices to predict for" });
    if (!picked) return;
    if (picked.length === 0) {
      void vscode.window.showWarningMessage("kernelcast: no device picked; kernelcast.devices is unchanged");
      return;
    }
    await cfg.update("devices", picked.map((p) => p.label), vscode.ConfigurationTarget.Global);
  }

  private report(title: string, predictions: Prediction[]): void {
    const line = summaryLine(title, predictions);
    this.output.appendLine(line);
    void vscode.window.showInformationMessage(line);
  }
}

interface LensWithKernel extends vscode.CodeLens {
  kernel: KernelInfo;
  doc: vscode.TextDocument;
}

/** Source files beside `self` (a kernel in kernels.cu is often launched from main.cu). */
function siblingSources(dir: string, self: string): Array<{ name: string; text: string }> {
  const out: Array<{ name: string; text: string }> = [];
  let names: string[];
  try {
    names = fs.readdirSync(dir).filter((n) => SOURCE_FILE.test(n)).sort().slice(0, MAX_SIBLINGS);
  } catch {
    return out;
  }
  for (const name of names) {
    const file = path.join(dir, name);
    if (file === self) continue;
    try {
      if (fs.statSync(file).size <= MAX_INCLUDE_BYTES) out.push({ name, text: fs.readFileSync(file, "utf8") });
    } catch {
      // unreadable: skipped
    }
  }
  return out;
}

function sameDims(a: Dim3, b: Dim3): boolean {
  return a.every((v, i) => v === b[i]);
}

function errorText(err: unknown): string {
  if (err instanceof KernelcastError || err instanceof InputError) return err.message;
  return `kernelcast: unexpected error: ${err instanceof Error ? err.message : String(err)}`;
}

function shortError(err: unknown): string {
  if (err instanceof KernelcastError) {
    switch (err.kind) {
      case "unreachable": return "server unreachable — click to retry";
      case "timeout": return "server timed out — click to retry";
      case "auth": return "API key needed or refused (kernelcast.apiKey)";
      case "not_ready": return "server has no model loaded yet — click to retry";
      case "rejected": return `rejected: ${err.message.replace(/^kernelcast server rejected the request/, "").replace(/^[^:]*: /, "").slice(0, 80)}`;
      default: return err.message.slice(0, 100);
    }
  }
  return errorText(err).slice(0, 100);
}

export function activate(context: vscode.ExtensionContext): void {
  const ext = new KernelcastExtension(context);
  context.subscriptions.push(
    ext,
    vscode.languages.registerCodeLensProvider([...(SELECTOR as vscode.DocumentFilter[]), ...(PYTHON as vscode.DocumentFilter[])], ext),
    vscode.languages.registerHoverProvider(SELECTOR, ext),
    vscode.commands.registerCommand("kernelcast.predictKernel", (uri?: vscode.Uri, offset?: number) => ext.predictCommand(uri, offset)),
    vscode.commands.registerCommand("kernelcast.pickDevices", () => ext.pickDevices()),
    vscode.commands.registerCommand("kernelcast.refresh", () => ext.refresh()),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration("kernelcast")) ext.refresh();
    }),
  );
}

export function deactivate(): void {}
