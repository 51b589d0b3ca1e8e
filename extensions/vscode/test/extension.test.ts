/** extension.ts wired to a stand-in vscode API (no VS Code here): activation, lenses, hover, errors. */
import assert from "node:assert/strict";
import * as net from "node:net";
import * as path from "node:path";
import { before, test } from "node:test";

import { FIXTURES, fixture } from "./helpers";
import { document, loadExtension, messages, registered, settings, stubContext } from "./vscode-stub";

type Lens = { range: { start: { line: number } }; command?: { title: string; command: string; tooltip?: string } };
type LensProvider = { provideCodeLenses(d: unknown): Lens[]; resolveCodeLens(l: Lens): Promise<Lens> };
type HoverProvider = { provideHover(d: unknown, p: unknown): Promise<{ contents: { value: string } } | undefined> };

let closedPort = 0;

before(async () => {
  closedPort = await new Promise<number>((resolve) => {
    const srv = net.createServer();
    srv.listen(0, "127.0.0.1", () => {
      const p = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(p));
    });
  });
  settings["kernelcast.serverUrl"] = `http://127.0.0.1:${closedPort}`;
  loadExtension().activate(stubContext());
});

test("activation registers the commands, a CodeLens and a hover provider (stand-in vscode API)", () => {
  assert.deepEqual([...registered.commands.keys()].sort(), ["kernelcast.pickDevices", "kernelcast.predictKernel", "kernelcast.refresh"]);
  assert.equal(registered.codeLens.length, 1);
  assert.equal(registered.hover.length, 1);
});

test("a lens above every kernel; unreachable server and missing launch each say what to do (stand-in vscode API)", async () => {
  const text = fixture("saxpy.cu");
  const doc = document(text, path.join(FIXTURES, "saxpy.cu"), "cuda-cpp");
  const provider = registered.codeLens[0] as LensProvider;
  const lenses = provider.provideCodeLenses(doc);
  assert.deepEqual(lenses.map((l) => text.split("\n")[l.range.start.line].split("(")[0]), [
    "__global__ void saxpy", "__global__ void __launch_bounds__", "template <typename T, int UNROLL = 4>", "__global__ void transpose", "__global__ void runtime_sized",
  ]);
  const resolved = await Promise.all(lenses.map((l) => provider.resolveCodeLens(l)));
  assert.equal(resolved[0].command?.title, "kernelcast: server unreachable — click to retry");
  assert.match(resolved[0].command?.tooltip ?? "", new RegExp(`127.0.0.1:${closedPort} is unreachable`));
  assert.equal(resolved[4].command?.title, "kernelcast: runtime_sized needs a launch config — click to enter grid/block");
  assert.match(resolved[4].command?.tooltip ?? "", /uses 'm' \(= atoi\(argv\[1\]\)\)/);
});

test("hover on a kernel signature only, with the error when there is no answer (stand-in vscode API)", async () => {
  const text = fixture("saxpy.cu");
  const doc = document(text, path.join(FIXTURES, "saxpy.cu"), "cuda-cpp");
  const hover = registered.hover[0] as HoverProvider;
  const onName = await hover.provideHover(doc, doc.positionAt(text.indexOf("saxpy(int n")));
  assert.match(onName?.contents.value ?? "", /unreachable \(connection refused\)/);
  assert.equal(await hover.provideHover(doc, doc.positionAt(text.indexOf("y[i] = fma_helper"))), undefined);
  assert.equal(await hover.provideHover(doc, doc.positionAt(text.indexOf("int main"))), undefined);
});

test("bad settings are reported, not thrown (stand-in vscode API)", async () => {
  const doc = document(fixture("saxpy.cu"), path.join(FIXTURES, "saxpy.cu"), "cuda-cpp");
  settings["kernelcast.devices"] = [];
  try {
    const provider = registered.codeLens[0] as LensProvider;
    const [lens] = provider.provideCodeLenses(doc);
    const resolved = await provider.resolveCodeLens(lens);
    assert.match(resolved.command?.title ?? "", /kernelcast.devices is empty/);
    messages.length = 0;
    await registered.commands.get("kernelcast.predictKernel")!(undefined, undefined);
    assert.match(messages.join("\n"), /open a CUDA\/HIP file or a PyTorch module first/);
  } finally {
    delete settings["kernelcast.devices"];
  }
});

test("a KernelBench module gets a 'predict this module' lens; other Python files none (stand-in vscode API)", () => {
  const provider = registered.codeLens[0] as LensProvider;
  const lenses = provider.provideCodeLenses(document(fixture("model.py"), path.join(FIXTURES, "model.py"), "python"));
  assert.equal(lenses.length, 1);
  assert.equal(lenses[0].command?.title, "kernelcast: predict this module");
  assert.equal(provider.provideCodeLenses(document("import os\n", "/tmp/x.py", "python")).length, 0);
});

test("a template kernel with deduced arguments: the lens says why, without asking for a launch (stand-in vscode API)", async () => {
  const text = "template <typename T>\n__global__ void t(T *x) { x[0] = 1; }\nvoid h(float *p) { t<<<1, 32>>>(p); }\n";
  const provider = registered.codeLens[0] as LensProvider;
  const [lens] = provider.provideCodeLenses(document(text, "/tmp/t.cu", "cuda-cpp"));
  const resolved = await provider.resolveCodeLens(lens);
  assert.match(resolved.command?.title ?? "", /^kernelcast: t is a template and no launch spells its arguments/);
  assert.equal(resolved.command?.command, "kernelcast.refresh");
});
