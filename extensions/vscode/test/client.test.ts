import assert from "node:assert/strict";
import * as net from "node:net";
import { test } from "node:test";

import { httpError, KernelcastClient, KernelcastError, normalizeServerUrl } from "../src/client";

test("server URL: scheme added, trailing slash dropped, non-http refused", () => {
  assert.equal(normalizeServerUrl("127.0.0.1:8000/"), "http://127.0.0.1:8000");
  assert.equal(normalizeServerUrl("https://kc.example.org/api/"), "https://kc.example.org/api");
  assert.throws(() => normalizeServerUrl(""), /kernelcast.serverUrl is empty/);
  assert.throws(() => normalizeServerUrl("ftp://x"), /must be http/);
  assert.throws(() => normalizeServerUrl("http://"), /is not a URL/);
});

test("the server's error envelope is quoted with its field", () => {
  const e = httpError("http://h/v1/predict", 422, { error: { code: "unknown_device", message: "devices[0]: unknown device 'H1000'", field: "devices[0]" } }, false);
  assert.equal(e.kind, "rejected");
  assert.equal(e.code, "unknown_device");
  assert.equal(e.message, "kernelcast server rejected the request (field devices[0]): devices[0]: unknown device 'H1000'");
});

test("401 says to set the key, or that the key was refused", () => {
  assert.match(httpError("http://h/v1/predict", 401, {}, false).message, /requires an API key: set kernelcast.apiKey/);
  assert.match(httpError("http://h/v1/predict", 401, {}, true).message, /kernelcast.apiKey was refused/);
});

test("404 on /v1 means an old server; 503 not ready; 5xx is a server failure; FastAPI detail lists are read", () => {
  assert.equal(httpError("http://h/v1/predict", 404, { detail: "Not Found" }, false).kind, "protocol");
  assert.match(httpError("http://h/v1/predict", 404, { detail: "Not Found" }, false).message, /not a kernelcast server with the \/v1 API/);
  assert.equal(httpError("http://h/readyz", 503, { error: { code: "not_ready", message: "loading", field: null } }, false).kind, "not_ready");
  assert.equal(httpError("http://h/v1/predict", 500, undefined, false).kind, "server");
  const detail = httpError("http://h/v1/predict", 422, { detail: [{ loc: ["body", "kernels"], msg: "Field required" }] }, false);
  assert.match(detail.message, /body\.kernels: Field required/);
});

test("a closed port is reported as unreachable with what to do", async () => {
  const port = await new Promise<number>((resolve) => {
    const srv = net.createServer();
    srv.listen(0, "127.0.0.1", () => {
      const p = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(p));
    });
  });
  const client = new KernelcastClient({ serverUrl: `http://127.0.0.1:${port}`, timeoutMs: 5000 });
  await assert.rejects(client.ready(), (e: unknown) => {
    assert.ok(e instanceof KernelcastError);
    assert.equal(e.kind, "unreachable");
    assert.match(e.message, new RegExp(`at http://127.0.0.1:${port} is unreachable \\(connection refused\\): start it with \`kernelcast serve\``));
    return true;
  });
});

test("a server that never answers times out with a clear message", async () => {
  const sockets: net.Socket[] = [];
  const srv = net.createServer((s) => sockets.push(s)); // accepts, never replies
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const port = (srv.address() as net.AddressInfo).port;
  try {
    const client = new KernelcastClient({ serverUrl: `127.0.0.1:${port}`, timeoutMs: 300 });
    await assert.rejects(client.devices(), (e: unknown) => e instanceof KernelcastError && e.kind === "timeout" && /did not answer/.test(e.message));
  } finally {
    sockets.forEach((s) => s.destroy());
    srv.close();
  }
});

test("a connection the server drops mid-request is asked again once (stale keep-alive socket)", async () => {
  const http = await import("node:http");
  let requests = 0;
  const srv = http.createServer((req, res) => {
    requests++;
    if (requests === 1) {
      req.socket.destroy(); // what a server closing an idle kept-alive socket looks like to the client
      return;
    }
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify({ status: "ready", model_version: "roofline" }));
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  try {
    const client = new KernelcastClient({ serverUrl: `http://127.0.0.1:${(srv.address() as net.AddressInfo).port}`, timeoutMs: 5000 });
    assert.equal(await client.ready(), "roofline");
    assert.equal(requests, 2);
  } finally {
    srv.close();
  }
});
