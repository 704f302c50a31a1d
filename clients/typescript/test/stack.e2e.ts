// The client against a real stack (uvicorn, a Celery worker and beat, PostgreSQL), started by
// tests/acceptance/test_typescript_client.py, which passes the URL and the tokens in the environment.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, test as nodeTest } from "node:test";
import {
  complete,
  nodeListener,
  park,
  pushHandler,
  Conflict,
  Forbidden,
  Gone,
  NotFound,
  Invalid,
  next,
  Parkway,
  PossiblyRan,
  Unauthorized,
  worker,
  type Item,
  type StreamedEvent,
} from "@parkway/client";
import {
  admin,
  agent,
  AgentProcess,
  answerAll,
  BASE_URL,
  human,
  HUMAN_NAME,
  killAgents,
  runReaches,
  startParkedWhenServed,
  TARGET,
  unique,
  waitFor,
  WINDOW,
  WORKER_TOKEN,
  workerClient,
} from "./helpers.js";

/** A worker of this test process (no signal handlers: the test runner owns the process). */
function inProcess(serves: Parameters<typeof worker>[0]["serves"]) {
  return worker({ client: workerClient, serves, name: unique("ts-test"), waitS: 1, leaseS: 5, handleSignals: false, log: () => undefined });
}

/** Lease until an item of `key` comes (the long poll advertises `key` too). */
function leaseOne(key: string, leaseS = 5): Promise<Item> {
  return waitFor(async () => (await workerClient.lease({ worker: unique("ts-manual"), serves: [key], wait_s: 1, lease_s: leaseS }))[0], `an item of ${key}`);
}

// Each test within a minute and a half; no agent process outlives the file.
const test = (name: string, fn: () => Promise<void>) => nodeTest(name, { timeout: 90_000 }, fn);
after(killAgents);

let parkedRunId = "";

test("a TypeScript agent parks a question, a person answers, the worker resumes it once and completes", async () => {
  const plan = unique("ts.plan");
  const calls: string[] = [];
  const running = inProcess({
    [`${plan}.decide@1`]: (ctx, snapshot: { cmd: string }, answers) => {
      calls.push(`decide:${ctx.attempt}`);
      return next(`${plan}.execute`, { cmd: snapshot.cmd, window: answers.window?.value, by: answers.window?.answered_by });
    },
    [`${plan}.execute`]: (ctx, payload: { cmd: string; window: string; by: string }) => {
      calls.push(`execute:${ctx.attempt}`);
      return complete({ ran: payload.cmd, when: payload.window, by: payload.by });
    },
  });
  try {
    const parked = await startParkedWhenServed({
      workflow: plan, target: TARGET, payload: { service: "billing" }, idempotencyKey: unique("park"),
      park: { continuation: `${plan}.decide@1`, snapshot: { cmd: "deploy billing" }, interactions: [WINDOW] },
    });
    assert.equal(parked.status, "waiting");
    assert.deepEqual(parked.interactions.map((i) => i.key), ["window"]);
    const pending = await human.listInteractions({ status: "pending", run_id: parked.id });
    assert.deepEqual(pending.items.map((i) => [i.key, i.prompt]), [["window", "When?"]]);

    await answerAll(parked, { window: "tonight" });
    const done = await runReaches(parked.id, "completed");
    assert.deepEqual(done.result, { ran: "deploy billing", when: "tonight", by: HUMAN_NAME });
    assert.deepEqual(calls, ["decide:1", "execute:1"]);
    assert.deepEqual(done.steps.map((s) => [s.name, s.status]), [[plan, "completed"], [`${plan}.execute`, "completed"]]);
    const types = await waitFor(async () => {
      const events = (await human.runEvents(parked.id, { limit: 500 })).items.map((e) => e.type);
      return events.includes("run.completed") ? events : null;
    }, "the run's events through run.completed");
    for (const [before, after] of [["step.parked", "interaction.answered"], ["interaction.answered", "step.resumed"], ["step.resumed", "run.completed"]]) {
      assert.ok(types.indexOf(before!) >= 0 && types.indexOf(before!) < types.indexOf(after!), `${before} before ${after}: ${types}`);
    }
    assert.equal(types.filter((t) => t === "run.completed").length, 1);
    const listed = await agent.listRuns({ workflow: plan, status: "completed" });
    assert.deepEqual(listed.items.map((r) => r.id), [parked.id]);
    parkedRunId = parked.id;
  } finally {
    await running.stop();
  }
});

test("the README's agent (examples/park-and-resume.ts) parks its question and is resumed once answered", async () => {
  const example = new AgentProcess("", "", { AGENT_TOKEN: process.env.PARKWAY_AGENT_TOKEN!, WORKER_TOKEN: process.env.PARKWAY_WORKER_TOKEN! }, "../examples/park-and-resume.js");
  const [, runId] = await example.line(/^run (\S+) is waiting$/, "the example's run waiting");
  const [asked] = (await human.listInteractions({ run_id: runId!, status: "pending" })).items;
  assert.equal(asked?.prompt, "Priority of ticket 4711?");
  await human.answer(asked.id, { responseId: "readme", value: "high" });
  assert.deepEqual((await runReaches(runId!, "completed")).result, { ticket: 4711, priority: "high", by: HUMAN_NAME });
  example.proc.kill("SIGTERM");
  assert.equal(await example.exited, 0);
});

test("the event stream resumes with Last-Event-ID where it broke off: no event lost or repeated", async () => {
  assert.ok(parkedRunId, "needs the run of the first test");
  const all = (await human.runEvents(parkedRunId, { limit: 500 })).items.map((e) => e.seq);
  const seen: StreamedEvent[] = [];
  for await (const message of human.stream({ runId: parkedRunId })) {
    if (message.event.run_id !== parkedRunId) continue;
    seen.push(message);
    if (seen.length === 3) break; // the connection is dropped here
  }
  for await (const message of human.stream({ lastEventId: String(seen.at(-1)!.id), runId: parkedRunId })) {
    if (message.event.run_id !== parkedRunId) continue;
    seen.push(message);
    if (message.event.type === "run.completed") break;
  }
  assert.deepEqual(seen.map((m) => m.id), all);
  assert.deepEqual(seen.map((m) => m.event.seq), all);
});

test("an agent SIGKILLed between lease and complete: re-leased after its lease, completed once", async () => {
  const key = `${unique("ts.kill")}@1`;
  const doomed = new AgentProcess("hang", key);
  const parked = await startParkedWhenServed({ workflow: unique("ts.kill"), target: TARGET, park: { continuation: key, snapshot: { n: 1 }, interactions: [WINDOW] } });
  await answerAll(parked, { window: "now" });
  const leased = await doomed.line(/^LEASED (\S+) (\d+)$/, "the doomed agent leasing the resume");
  assert.deepEqual([leased[1], leased[2]], [parked.id, "1"]);
  await doomed.kill();

  const attempts: number[] = [];
  const running = inProcess({ [key]: (ctx, snapshot: { n: number }) => (attempts.push(ctx.attempt), complete({ n: snapshot.n, attempt: ctx.attempt })) });
  try {
    const done = await runReaches(parked.id, "completed");
    assert.deepEqual(attempts, [2]);
    assert.deepEqual(done.result, { n: 1, attempt: 2 });
  } finally {
    await running.stop();
  }
  const types = (await human.runEvents(parked.id, { limit: 500 })).items.map((e) => e.type);
  assert.equal(types.filter((t) => t === "run.completed").length, 1);
});

test("a handler running past its lease keeps it by heartbeats (run once, while a second worker waits for the same key), and its busy worker stays listed", async () => {
  const key = `${unique("ts.long")}@1`;
  const runs: number[] = [];
  const listed: boolean[] = [];
  const slow = (name: string) => async (ctx: { attempt: number; signal: AbortSignal }) => {
    runs.push(ctx.attempt);
    // longer than its 5 s lease: without heartbeats the other worker would lease the item again; and
    // longer than the API's PARKWAY_REMOTE_WORKER_TTL_S (4 s here): a busy worker stays listed by advertising
    await new Promise((resolve) => setTimeout(resolve, 7_000));
    listed.push((await admin.listWorkers()).items.some((w) => w.node === name && w.remote));
    return complete({ attempt: ctx.attempt, lost: ctx.signal.aborted });
  };
  const names = [unique("ts-busy"), unique("ts-busy")];
  const workers = names.map((name) =>
    worker({ client: workerClient, serves: { [key]: slow(name) }, name, waitS: 1, leaseS: 5, advertiseS: 1, handleSignals: false, log: () => undefined }),
  );
  try {
    const parked = await startParkedWhenServed({ workflow: unique("ts.long"), target: TARGET, park: { continuation: key, interactions: [WINDOW] } });
    await answerAll(parked, { window: "now" });
    assert.deepEqual((await runReaches(parked.id, "completed")).result, { attempt: 1, lost: false });
    assert.deepEqual(runs, [1]);
    assert.deepEqual(listed, [true]);
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
  }
});

test("a busy worker gets each next item in its completion's answer: one request per item after its first lease", async () => {
  const key = `${unique("ts.busy")}@1`;
  await workerClient.lease({ worker: unique("ts-advertiser"), serves: [key], max: 0, wait_s: 0 }); // served: parks accepted
  const runIds: string[] = [];
  for (let i = 0; i < 4; i++) {
    const parked = await startParkedWhenServed({ workflow: unique("ts.busy"), target: TARGET, park: { continuation: key, interactions: [WINDOW] } });
    await answerAll(parked, { window: "now" });
    runIds.push(parked.id);
  }
  const counted = { leaseCalls: 0, leased: 0, completions: 0, chained: 0 };
  const counting: typeof fetch = async (url, init) => {
    const response = await fetch(url, init);
    const path = new URL(String(url)).pathname;
    if (response.ok && (path === "/v1/worker/lease" || path.endsWith("/complete"))) {
      const items = ((await response.clone().json()) as { items?: unknown[] }).items ?? [];
      if (path === "/v1/worker/lease") (counted.leaseCalls += 1), (counted.leased += items.length);
      else (counted.completions += 1), (counted.chained += items.length);
    }
    return response;
  };
  const client = new Parkway({ url: BASE_URL, token: WORKER_TOKEN, fetch: counting });
  const served: string[] = [];
  const running = worker({
    client, serves: { [key]: (ctx) => (served.push(ctx.runId), complete({ attempt: ctx.attempt })) }, name: unique("ts-busy"),
    concurrency: 1, waitS: 1, leaseS: 5, handleSignals: false, log: () => undefined,
  });
  try {
    for (const runId of runIds) assert.deepEqual((await runReaches(runId, "completed")).result, { attempt: 1 });
  } finally {
    await running.stop();
  }
  assert.deepEqual([...served].sort(), [...runIds].sort());
  // The first item came by a lease call; each next one in the answer of the completion before it.
  assert.deepEqual([counted.leased, counted.completions, counted.chained], [1, 4, 3]);
});

test("the exact retry of a completion gets the same receipt; another outcome for it is 409", async () => {
  const key = `${unique("ts.retry")}@1`;
  const leasing = leaseOne(key); // advertises the key, then waits for the item
  const parked = await startParkedWhenServed({ workflow: unique("ts.retry"), target: TARGET, park: { continuation: key, interactions: [WINDOW] } });
  await answerAll(parked, { window: "now" });
  const item = await leasing;
  assert.equal(item.run_id, parked.id);
  assert.equal(item.answers?.window?.value, "now");
  const first = await workerClient.completeLease(item.lease_id, complete({ ok: 1 }));
  assert.equal(first.outcome, "complete");
  assert.equal(first.run_status, "completed");
  const again = await workerClient.completeLease(item.lease_id, complete({ ok: 1 }));
  assert.deepEqual(again, first);
  await assert.rejects(workerClient.completeLease(item.lease_id, complete({ ok: 2 })), Conflict);
  assert.deepEqual((await human.getRun(parked.id)).result, { ok: 1 });
});

test("a late completion of a lost lease is 409 with the state, and commits nothing", async () => {
  const key = `${unique("ts.late")}@1`;
  const leasing = leaseOne(key);
  const parked = await startParkedWhenServed({ workflow: unique("ts.late"), target: TARGET, park: { continuation: key, interactions: [WINDOW] } });
  await answerAll(parked, { window: "tonight" });
  const lost = await leasing;
  // no heartbeat: after its 5 s the item is leased again
  const second = await leaseOne(key);
  assert.equal(second.run_id, parked.id);
  assert.equal(second.attempt, lost.attempt + 1);
  const late = await workerClient.completeLease(lost.lease_id, complete({ from: "the lost lease" })).then(
    () => assert.fail("a lost lease completed"),
    (error: unknown) => error,
  );
  assert.ok(late instanceof Conflict, String(late));
  assert.ok(late.state, "a 409 carries the state");
  assert.equal((await human.getRun(parked.id)).status, "running");
  await assert.rejects(workerClient.heartbeat(lost.lease_id), Conflict);
  await workerClient.completeLease(second.lease_id, complete({ from: "the second lease" }));
  assert.deepEqual((await runReaches(parked.id, "completed")).result, { from: "the second lease" });
});

test("a never tool interrupted between intent and outcome settles possibly_ran and is not run again", async () => {
  const key = `${unique("ts.tool")}@1`;
  const doomed = new AgentProcess("tool-hang", key);
  const parked = await startParkedWhenServed({ workflow: unique("ts.tool"), target: TARGET, park: { continuation: key, interactions: [WINDOW] } });
  await answerAll(parked, { window: "now" });
  await doomed.line(new RegExp(`^TOOL ${parked.id}$`), "the tool running in the doomed agent");
  await doomed.kill();

  let ranAgain = 0;
  const running = inProcess({
    [key]: async (ctx) => {
      try {
        await ctx.tool("charge", { key: "charge-card", args: { cents: 500 }, replay: "never", run: () => (ranAgain += 1) });
        return complete({ charged: "again" });
      } catch (error) {
        if (error instanceof PossiblyRan) return complete({ possiblyRan: error.key, attempt: ctx.attempt });
        throw error;
      }
    },
  });
  try {
    const done = await runReaches(parked.id, "completed");
    assert.equal(ranAgain, 0);
    assert.deepEqual(done.result, { possiblyRan: "charge-card", attempt: 2 });
    const call = done.tool_calls.find((c) => c.key === "charge-card");
    assert.equal(call?.possibly_ran, true);
  } finally {
    await running.stop();
  }
});

test("SIGTERM: the agent stops leasing, its running handler finishes and completes, and it exits", async () => {
  const key = `${unique("ts.term")}@1`;
  const agentProcess = new AgentProcess("finish", key);
  const parked = await startParkedWhenServed({ workflow: unique("ts.term"), target: TARGET, park: { continuation: key, interactions: [WINDOW] } });
  await answerAll(parked, { window: "now" });
  await agentProcess.line(/^LEASED /, "the agent leasing the resume");
  agentProcess.proc.kill("SIGTERM");
  assert.equal(await agentProcess.exited, 0);
  assert.ok(agentProcess.lines.includes("STOPPED completed=1 abandoned=0"), agentProcess.lines.join(" | "));
  assert.deepEqual((await human.getRun(parked.id)).result, { finished: parked.id, attempt: 1 });
});

test("SIGTERM past the stop's deadline: the agent exits completing nothing, the item is re-driven after its lease", async () => {
  const key = `${unique("ts.stuck")}@1`;
  const stuck = new AgentProcess("hang", key, { AGENT_STOP_MS: "300" });
  const parked = await startParkedWhenServed({ workflow: unique("ts.stuck"), target: TARGET, park: { continuation: key, interactions: [WINDOW] } });
  await answerAll(parked, { window: "now" });
  await stuck.line(/^LEASED /, "the stuck agent leasing the resume");
  stuck.proc.kill("SIGTERM");
  assert.equal(await stuck.exited, 0);
  assert.ok(stuck.lines.includes("STOPPED completed=0 abandoned=1"), stuck.lines.join(" | "));
  assert.equal((await human.getRun(parked.id)).status, "running");

  const running = inProcess({ [key]: (ctx) => complete({ attempt: ctx.attempt }) });
  try {
    assert.deepEqual((await runReaches(parked.id, "completed")).result, { attempt: 2 });
  } finally {
    await running.stop();
  }
});

test("the agent cancels its own parked run: canceled at once, a late answer is 410 Gone with the state", async () => {
  const key = `${unique("ts.cancel")}@1`;
  const running = inProcess({ [key]: () => complete({ resumed: true }) });
  try {
    const parked = await startParkedWhenServed({ workflow: unique("ts.cancel"), target: TARGET, park: { continuation: key, interactions: [WINDOW] } });
    const [asked] = parked.interactions;
    const receipt = await agent.cancel(asked!.id, { responseId: "cancel-1", reason: "the ticket was closed" });
    assert.equal(receipt.status, "canceled");
    assert.equal((await human.getRun(parked.id)).status, "canceled");
    const late = await human.answer(asked!.id, { responseId: "late", value: "now" }).then(() => null, (error: unknown) => error);
    assert.ok(late instanceof Gone && late.status === 410, String(late));
    assert.equal((late.state as { status: string }).status, "canceled");
  } finally {
    await running.stop();
  }
});

test("the API's errors arrive typed, with their status, code and state", async () => {
  await assert.rejects(new Parkway({ url: BASE_URL, token: "not-a-token" }).listRuns(), (e: unknown) => e instanceof Unauthorized && e.status === 401);
  const unserved = unique("ts.nobody");
  await assert.rejects(agent.startRun({ workflow: unserved, target: TARGET }), (e: unknown) => e instanceof Invalid && e.detail.includes(unserved));
  // the run of the first test is completed: its answered question is a 409 for another response, and
  // agents may not answer at all
  const [answered] = (await human.listInteractions({ run_id: parkedRunId })).items;
  assert.ok(answered);
  await assert.rejects(human.answer(answered.id, { responseId: "another", value: "now" }), (e: unknown) => e instanceof Conflict && e.code === "conflict" && !!e.state);
  await assert.rejects(agent.answer(answered.id, { responseId: "agent", value: "now" }), Forbidden);
  await assert.rejects(workerClient.heartbeat(`${"0".repeat(32)}.${"0".repeat(16)}`), NotFound);
  await assert.rejects(human.lease({ worker: "a-person", serves: ["ts.anything"], wait_s: 0 }), Forbidden);
});

test("a push handler on Node's http server: Parkway POSTs the step and its continuation, each committed once", async () => {
  const step = unique("ts.pushed");
  const got: string[] = [];
  let handle: ReturnType<typeof pushHandler> = async () => new Response(null, { status: 503 });
  const server = createServer(nodeListener((request) => handle(request)));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/parkway`;
  try {
    const made = await admin.createPushHandler(url, [step, `${step}.after@1`]);
    assert.match(made.secret, /^whsec_/);
    handle = pushHandler({
      secret: made.secret,
      serves: {
        [step]: (ctx, payload: { n: number }) => {
          got.push(`start:${ctx.attempt}:${payload.n}`);
          return park({ continuation: `${step}.after@1`, snapshot: { n: payload.n }, interactions: [WINDOW] });
        },
        [`${step}.after@1`]: (ctx, snapshot: { n: number }, answers) => {
          got.push(`resume:${ctx.attempt}:${snapshot.n}`);
          return complete({ n: snapshot.n, when: answers.window?.value });
        },
      },
    });
    const run = await agent.startRun({ workflow: step, target: TARGET, payload: { n: 7 } });
    const parked = await runReaches(run.id, "waiting");
    const pending = await human.listInteractions({ status: "pending", run_id: parked.id });
    assert.deepEqual(pending.items.map((i) => i.key), ["window"]);
    await answerAll({ id: parked.id, status: "waiting", interactions: pending.items }, { window: "now" });
    assert.deepEqual((await runReaches(run.id, "completed")).result, { n: 7, when: "now" });
    assert.deepEqual(got, ["start:1:7", "resume:1:7"]);
    const listed = (await admin.listPushHandlers()).items.find((h) => h.id === made.id);
    assert.deepEqual([listed?.attempts, listed?.failures], [2, 0]);
    await admin.deletePushHandler(made.id);
  } finally {
    server.close();
  }
});
