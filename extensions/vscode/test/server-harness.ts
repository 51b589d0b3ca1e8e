/**
 * Start and stop a REAL `kernelcast serve --model roofline` for the integration tests: a free port,
 * KERNELCAST_BIN (else the repository's .venv/bin/kernelcast), a throw-away KERNELCAST_HOME, wait
 * for /readyz, and stop the server's whole process group.
 */
import assert from "node:assert/strict";
import { ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";

import { normalizeDevices } from "../src/request";
import { Settings } from "../src/service";

const REPO = path.resolve(__dirname, "..", "..", "..", "..");
const KERNELCAST_BIN = process.env.KERNELCAST_BIN || path.join(REPO, ".venv", "bin", "kernelcast");
const STARTUP_TIMEOUT_MS = 120_000;

export interface Server {
  url: string;
  child: ChildProcess;
  log: string[];
  home: string;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

export async function startServer(extraArgs: string[] = [], extraEnv: Record<string, string> = {}): Promise<Server> {
  assert.ok(fs.existsSync(KERNELCAST_BIN), `kernelcast not found at ${KERNELCAST_BIN}: build the venv or set KERNELCAST_BIN`);
  const port = await freePort();
  const home = fs.mkdtempSync(path.join(os.tmpdir(), "kc-vscode-"));
  const log: string[] = [];
  const child = spawn(KERNELCAST_BIN, ["serve", "--host", "127.0.0.1", "--port", String(port), "--model", "roofline", ...extraArgs], {
    cwd: REPO,
    env: { ...process.env, KERNELCAST_HOME: home, ...extraEnv },
    detached: true, // its own process group, so stopping it stops everything it started
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout!.on("data", (d) => log.push(String(d)));
  child.stderr!.on("data", (d) => log.push(String(d)));
  const server = { url: `http://127.0.0.1:${port}`, child, log, home };
  const deadline = Date.now() + STARTUP_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) break;
    try {
      const r = await fetch(`${server.url}/readyz`, { signal: AbortSignal.timeout(2000) });
      if (r.status === 200) return server;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  await stopServer(server);
  throw new Error(`kernelcast serve did not become ready (exit ${child.exitCode}):\n${log.join("").slice(-3000)}`);
}

export async function stopServer(server: Server): Promise<void> {
  const { child } = server;
  if (child.exitCode === null && child.pid !== undefined) {
    const exited = new Promise<void>((r) => child.once("exit", () => r()));
    try {
      process.kill(-child.pid, "SIGTERM");
    } catch {
      // already gone
    }
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {
        // already gone
      }
    }, 10_000);
    await exited;
    clearTimeout(timer);
  }
  fs.rmSync(server.home, { recursive: true, force: true });
}

export function settingsFor(server: Server, devices: string[] = ["H100"]): Settings {
  return { serverUrl: server.url, devices: normalizeDevices(devices), defines: {} };
}
