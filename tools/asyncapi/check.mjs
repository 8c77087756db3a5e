// Parses an AsyncAPI document with the official parser (@asyncapi/parser, pinned in
// package-lock.json) and prints one JSON object: whether it parsed, and every diagnostic
// with its code, severity (0 error, 1 warning, 2 information, 3 hint), path and message.
// Used by tests/events/test_asyncapi.py: node check.mjs FILE
import { readFileSync } from "node:fs";
import { Parser } from "@asyncapi/parser";

const text = readFileSync(process.argv[2], "utf8");
const { document, diagnostics } = await new Parser().parse(text);
process.stdout.write(JSON.stringify({
  parsed: document !== undefined,
  diagnostics: diagnostics.map((d) => ({
    code: String(d.code), severity: d.severity, path: d.path.join("/"), message: d.message,
  })),
}));
