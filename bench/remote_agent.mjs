// The bench's pull agent (bench/cases/remote.py): the TypeScript client's `worker()` serving one continuation
// key as `bench.done@1` does in Python (complete with the answer). It counts its HTTP requests by route and
// notes when each handler started; on SIGUSR2 it writes both to BENCH_STATS (the starts since the last dump).
//
//   node bench/remote_agent.mjs   with PARKWAY_URL, PARKWAY_TOKEN, BENCH_KEY, BENCH_CONCURRENCY, BENCH_STATS

import { writeFileSync } from "node:fs";
import { Parkway, complete, worker } from "../clients/typescript/dist/index.js";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`remote_agent.mjs needs ${name}`);
  return value;
};

const requests = {};
const leased = { calls: 0, empty: 0, items: 0, chained: 0 }; // chained: items a completion's answer carried
let starts = [];
const platformFetch = globalThis.fetch.bind(globalThis);

async function countingFetch(url, init) {
  const route = new URL(url).pathname.replace(/\/leases\/[^/]+\//, "/leases/*/");
  requests[route] = (requests[route] ?? 0) + 1;
  const response = await platformFetch(url, init);
  if (route === "/v1/worker/lease" && response.ok) {
    const body = await response.clone().json();
    leased.calls += 1;
    leased.items += body.items.length;
    if (body.items.length === 0) leased.empty += 1;
  }
  if (route === "/v1/worker/leases/*/complete" && response.ok) {
    leased.chained += ((await response.clone().json()).items ?? []).length;
  }
  return response;
}

const client = new Parkway({ url: env("PARKWAY_URL"), token: env("PARKWAY_TOKEN"), fetch: countingFetch });
const key = env("BENCH_KEY");
const agent = worker({
  client,
  name: "bench-node",
  concurrency: Number(env("BENCH_CONCURRENCY")),
  waitS: 20,
  leaseS: 60,
  serves: {
    [key]: (ctx, snapshot, answers) => {
      starts.push(`${ctx.stepId} ${Date.now() / 1000}`);
      return complete({ go: answers.go.value });
    },
  },
});

process.on("SIGUSR2", () => {
  writeFileSync(env("BENCH_STATS"), JSON.stringify({ requests, leased, starts }));
  starts = [];
});
await agent.ready;
console.log("ready");
const stopped = await agent.done;
console.log(`stopped: ${JSON.stringify(stopped)}`);
