// The bench's push handler (bench/cases/remote.py): the TypeScript client's `pushHandler` + `nodeListener`
// on `http.createServer`, serving one continuation key as `bench.done@1` does in Python (complete with the
// answer). It verifies the signature (the client does) and nothing else. It counts the POSTs it answered and
// notes when each handler started; on SIGUSR2 it writes both to BENCH_STATS, in the pull agent's format
// (bench/remote_agent.mjs: the starts since the last dump).
//
//   node bench/push_handler.mjs   with BENCH_PORT, BENCH_SECRET, BENCH_KEY, BENCH_STATS

import { createServer } from "node:http";
import { writeFileSync } from "node:fs";
import { complete, nodeListener, pushHandler } from "../clients/typescript/dist/index.js";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`push_handler.mjs needs ${name}`);
  return value;
};

const requests = {};
const leased = { calls: 0, empty: 0, items: 0 };
let starts = [];
const key = env("BENCH_KEY");
const handler = pushHandler({
  secret: env("BENCH_SECRET"),
  serves: {
    [key]: (ctx, snapshot, answers) => {
      starts.push(`${ctx.stepId} ${Date.now() / 1000}`);
      return complete({ go: answers.go.value });
    },
  },
});
const listener = nodeListener(handler);
const server = createServer({ keepAliveTimeout: 30_000 }, (req, res) => {
  res.on("finish", () => {
    const route = `push ${res.statusCode}`;
    requests[route] = (requests[route] ?? 0) + 1;
  });
  listener(req, res);
});

process.on("SIGUSR2", () => {
  writeFileSync(env("BENCH_STATS"), JSON.stringify({ requests, leased, starts }));
  starts = [];
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
server.listen(Number(env("BENCH_PORT")), "127.0.0.1", () => console.log("ready"));
