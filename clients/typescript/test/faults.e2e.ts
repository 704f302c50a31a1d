// The worker against a real stack behind a proxy that answers a fault once (started by
// tests/acceptance/test_typescript_client.py, like stack.e2e.ts): what the system could not do is retried or left
// to the item's lease, never committed as the workflow's `fail`.
import assert from "node:assert/strict";
import { test as nodeTest } from "node:test";
import { complete, park, Parkway, worker } from "@parkway/client";
import { agent, answerAll, FaultProxy, human, runEnds, runReaches, startParkedWhenServed, TARGET, unique, waitFor, WINDOW, WORKER_TOKEN } from "./helpers.js";

const test = (name: string, fn: () => Promise<void>) => nodeTest(name, { timeout: 90_000 }, fn);

// What the API answers while its database restarts (api/errors.py), and what an older server answers to a park on a
// version nobody serves during a rollout: each once, by a proxy in front of the real API.
const UNAVAILABLE = { status: 503, error: "unavailable", headers: { "retry-after": "1" },
  detail: "the database cannot be reached just now; retry the request as it is (an exact retry is safe)" };
const isPost = (suffix: RegExp) => (method: string, path: string) => method === "POST" && suffix.test(path);

/** A worker of this test process whose every request goes through `proxy`. */
function behind(proxy: FaultProxy, serves: Parameters<typeof worker>[0]["serves"]) {
  const client = new Parkway({ url: proxy.url, token: WORKER_TOKEN });
  return worker({ client, serves, name: unique("ts-proxied"), waitS: 1, leaseS: 5, handleSignals: false, log: () => undefined });
}

test("ctx.tool meets a 503 on its intent and on its outcome: each retried as it is, the effect runs once, the run completes", async () => {
  const key = `${unique("ts.tool503")}@1`;
  const proxy = await FaultProxy.start([
    { ...UNAVAILABLE, matches: isPost(/\/tools$/) },
    { ...UNAVAILABLE, matches: isPost(/\/tools\/charge-card\/outcome$/) },
  ]);
  let effects = 0;
  const running = behind(proxy, {
    [key]: async (ctx) => complete({ charged: await ctx.tool("charge", { key: "charge-card", args: { cents: 500 }, replay: "never", run: () => (effects += 1) }) }),
  });
  try {
    const parked = await startParkedWhenServed({ workflow: unique("ts.tool503"), target: TARGET, park: { continuation: key, interactions: [WINDOW] } });
    await answerAll(parked, { window: "now" });
    const ended = await runEnds(parked.id);
    assert.equal(ended.status, "completed", `the run ended ${ended.status}: ${ended.error}`);
    assert.deepEqual(ended.result, { charged: 1 });
    assert.equal(effects, 1);
    const call = ended.tool_calls.find((c) => c.key === "charge-card");
    assert.deepEqual([call?.phase, call?.possibly_ran], ["settled", false]);
    assert.equal(proxy.answered.length, 2, proxy.answered.join(", "));
  } finally {
    await running.stop();
    await proxy.close();
  }
});

test("a park refused with 422 (an older server mid-rollout) is not committed as fail: left to its lease, it parks on the next attempt", async () => {
  const step = unique("ts.rollout");
  const proxy = await FaultProxy.start([{
    status: 422, error: "invalid_outcome", detail: `park on ${step}.after@1: no live worker serves it`,
    matches: (method, path, body) => isPost(/\/complete$/)(method, path) && body.includes('"type":"park"'),
  }]);
  const attempts: number[] = [];
  const running = behind(proxy, {
    [step]: (ctx) => (attempts.push(ctx.attempt), park({ continuation: `${step}.after@1`, interactions: [WINDOW] })),
    [`${step}.after@1`]: (ctx, _snapshot, answers) => complete({ when: answers.window?.value }),
  });
  try {
    await running.ready;
    const run = await agent.startRun({ workflow: step, target: TARGET });
    const parked = await waitFor(async () => {
      const now = await human.getRun(run.id);
      return now.status === "running" ? null : now;
    }, `run ${run.id} to park or end`);
    assert.equal(parked.status, "waiting", `the run is ${parked.status}: ${parked.error}`);
    assert.deepEqual(attempts, [1, 2]);
    assert.deepEqual(proxy.answered.map((line) => line.replace(/leases\/[^/]+/, "leases/ID")), ["422 POST /v1/worker/leases/ID/complete"]);
    const pending = await human.listInteractions({ status: "pending", run_id: run.id });
    await answerAll({ id: run.id, status: "waiting", interactions: pending.items }, { window: "tonight" });
    assert.deepEqual((await runReaches(run.id, "completed")).result, { when: "tonight" });
  } finally {
    await running.stop();
    await proxy.close();
  }
});
