import { Parkway, complete, question, worker } from "@parkway/client";

const url = process.env.PARKWAY_URL ?? "http://127.0.0.1:8000";
const agent = new Parkway({ url, token: process.env.AGENT_TOKEN! });

// The continuation, served by this process: resumed once, with the answers, after a person answers
// (on the Decisions page or over the API), even if this process restarted in between.
const serving = worker({
  url, token: process.env.WORKER_TOKEN!,
  serves: {
    "triage.decide@1": (ctx, snapshot: { ticket: number }, answers) =>
      complete({ ticket: snapshot.ticket, priority: answers.priority?.value, by: answers.priority?.answered_by }),
  },
});
await serving.ready; // the API now knows this process serves triage.decide@1

// Park a question of the agent's own: the run waits in Parkway's database, not in this process.
const run = await agent.startParked({
  workflow: "triage", target: "team:ops", idempotencyKey: "ticket-4711",
  park: {
    continuation: "triage.decide@1", snapshot: { ticket: 4711 },
    interactions: [question({ key: "priority", prompt: "Priority of ticket 4711?", schema: { enum: ["low", "high"] }, target: "team:ops" })],
  },
});
console.log(`run ${run.id} is ${run.status}`); // waiting

// Follow the run's events until it ends: once answered, the continuation above completes it.
const ends = new Set(["run.completed", "run.failed", "run.canceled", "run.interrupted"]);
for await (const { event } of agent.stream({ runId: run.id })) if (ends.has(event.type)) break;
const done = await agent.getRun(run.id);
console.log(`run ${done.id} is ${done.status}: ${JSON.stringify(done.result ?? done.error)}`);
await serving.stop();
