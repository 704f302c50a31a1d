// `node scripts/clean.mjs DIR...`: remove the build folders named (npm scripts run in sh or cmd: no `rm -rf`).
import { rmSync } from "node:fs";

for (const dir of process.argv.slice(2)) rmSync(dir, { recursive: true, force: true });
