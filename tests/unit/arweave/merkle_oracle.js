// Oracle for tests/unit/arweave/test_merkle.py: arweave-js's own chunking.
// Reads a JSON list of file paths on stdin and prints, for each file, the
// data_root, chunk ranges and proofs from arweave-js generateTransactionChunks.
"use strict";

const fs = require("fs");
const { generateTransactionChunks } = require(
  require.resolve("arweave/node/lib/merkle", { paths: [process.env.SWF_NODE_MODULES || process.cwd()] })
);

const b64url = (buf) => Buffer.from(buf).toString("base64url");

async function main() {
  const paths = JSON.parse(fs.readFileSync(0, "utf8"));
  const out = [];
  for (const p of paths) {
    const r = await generateTransactionChunks(new Uint8Array(fs.readFileSync(p)));
    out.push({
      data_root: b64url(r.data_root),
      chunks: r.chunks.map((c) => [c.minByteRange, c.maxByteRange, b64url(c.dataHash)]),
      proofs: r.proofs.map((pr) => [pr.offset, b64url(pr.proof)]),
    });
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : String(err));
  process.exit(1);
});
