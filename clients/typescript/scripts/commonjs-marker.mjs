// dist/cjs holds CommonJS inside a `"type": "module"` package: this marker tells Node and TypeScript so.
import { writeFileSync } from "node:fs";

writeFileSync(new URL("../dist/cjs/package.json", import.meta.url), '{ "type": "commonjs" }\n');
