// Generates TypeScript models from an AsyncAPI document with Modelina's defaults (pinned in
// package-lock.json), one file of them all: node modelina.mjs ASYNCAPI.json OUT.ts
// Prints the number of models. Used by tests/events/test_generators.py.
import { readFileSync, writeFileSync } from "node:fs";
import { TypeScriptGenerator } from "@asyncapi/modelina";

const document = JSON.parse(readFileSync(process.argv[2], "utf8"));
const models = await new TypeScriptGenerator().generate(document);
writeFileSync(process.argv[3], models.map((m) => `export ${m.result}`).join("\n\n") + "\n");
process.stdout.write(JSON.stringify({ models: models.map((m) => m.modelName) }));
