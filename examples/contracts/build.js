#!/usr/bin/env node
// Rebuilds each <Name>.json (ABI + bytecode) from <Name>.sol with the pinned solcjs.
// Run from the repo root: `npm run build:contracts`.
//
// Why the JS API and not the `solcjs` CLI: the CLI has no --evm-version flag, and its
// --standard-json stdout may start with a non-JSON line; the API takes the same
// standard-json input and returns clean JSON.
"use strict";
const fs = require("fs");
const path = require("path");
const crypto = require("crypto");
const solc = require("solc");

// "paris" (no PUSH0) runs on anvil's default hardfork, on py-evm's EthereumTesterProvider,
// and on chains that never adopted Shanghai; the contract needs nothing newer.
const EVM_VERSION = "paris";
const NAMES = ["ChaosChain", "PayoutToken"];
const dir = __dirname;
for (const NAME of NAMES) {
  const source = fs.readFileSync(path.join(dir, `${NAME}.sol`), "utf8");

  const input = {
    language: "Solidity",
    sources: { [`${NAME}.sol`]: { content: source } },
    settings: {
      evmVersion: EVM_VERSION,
      optimizer: { enabled: true, runs: 200 },
      outputSelection: { "*": { "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] } },
    },
  };

  const output = JSON.parse(solc.compile(JSON.stringify(input)));
  const errors = (output.errors || []).filter((e) => e.severity === "error");
  for (const e of output.errors || []) process.stderr.write(e.formattedMessage + "\n");
  if (errors.length > 0) process.exit(1);

  const contract = output.contracts[`${NAME}.sol`][NAME];
  const artifact = {
    contractName: NAME,
    compiler: `solc ${solc.version()}`,
    evmVersion: EVM_VERSION,
    sourceSha256: crypto.createHash("sha256").update(source).digest("hex"),
    abi: contract.abi,
    bytecode: "0x" + contract.evm.bytecode.object,
    deployedBytecode: "0x" + contract.evm.deployedBytecode.object,
  };
  fs.writeFileSync(path.join(dir, `${NAME}.json`), JSON.stringify(artifact, null, 2) + "\n");
  process.stdout.write(`wrote ${NAME}.json (${solc.version()}, evm ${EVM_VERSION})\n`);
}
