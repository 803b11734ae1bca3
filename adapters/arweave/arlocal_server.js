#!/usr/bin/env node
// Starts arlocal bound to 127.0.0.1 only.
//
// arlocal's own CLI listens on every interface; a dev node holding test
// wallets has no business being reachable from the network, so this script
// constructs ArLocal itself and replaces Koa's listen() before start().
//
// Usage: node arlocal_server.js <port|0> <db-dir>
// Prints one JSON line {"port": N, "pid": P} on stdout once listening, so the
// parent learns the real port when it asked for 0 (no race on a free port).
"use strict";

const http = require("http");
const path = require("path");

function loadArLocal() {
  // Resolve from the caller's working tree first (ARLOCAL_NODE_MODULES), then
  // from the usual lookup path, so the script works from a temp cwd.
  const roots = [process.env.ARLOCAL_NODE_MODULES, ...module.paths].filter(Boolean);
  const mod = require(require.resolve("arlocal", { paths: roots }));
  return mod.default || mod;
}

async function main() {
  const requested = Number.parseInt(process.argv[2] || "0", 10);
  const dbPath = process.argv[3];
  if (!dbPath || Number.isNaN(requested)) {
    console.error("usage: arlocal_server.js <port|0> <db-dir>");
    process.exit(2);
  }
  const ArLocal = loadArLocal();
  // port is only used by ArLocal for its log line; 0 would become 1984 there.
  const arlocal = new ArLocal(requested || 1984, false, path.resolve(dbPath), false, 0);
  let server;
  let listening;
  // ArLocal passes a callback that only logs a (wrong, for port 0) port: dropped.
  arlocal.app.listen = () => {
    server = http.createServer(arlocal.app.callback());
    listening = new Promise((resolve, reject) => {
      server.once("listening", resolve);
      server.once("error", reject);
    });
    server.listen(requested, "127.0.0.1");
    return server;
  };
  await arlocal.start();
  await listening;
  process.stdout.write(`${JSON.stringify({ port: server.address().port, pid: process.pid })}\n`);
  const stop = () => {
    server.close(() => process.exit(0));
    // Keep-alive sockets would hold close() open; the parent waits on our PID.
    setTimeout(() => process.exit(0), 500).unref();
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : String(err));
  process.exit(1);
});
