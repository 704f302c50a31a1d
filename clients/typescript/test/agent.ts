// A TypeScript agent process for the stack tests (stack.e2e.ts), which SIGKILL or SIGTERM it mid-item.
// `node agent.js MODE KEY` (AGENT_STOP_MS: how long a stop waits for its handlers): serves KEY with the mode's handler and prints what it does, a line each:
//   hang      prints "LEASED <run_id> <attempt>" and never returns (killed between lease and complete)
//   tool-hang prints "TOOL <run_id>" inside a `never` tool call that never returns (killed between intent and outcome)
//   finish    prints "LEASED <run_id> <attempt>", then completes once it got SIGTERM (a graceful stop)
import { complete, worker, type Handler } from "@parkway/client";

const [mode, key] = process.argv.slice(2);
const forever = new Promise<never>(() => undefined);
const say = (line: string): void => void process.stdout.write(`${line}\n`);

const handlers: Record<string, Handler> = {
  hang: async (ctx) => {
    say(`LEASED ${ctx.runId} ${ctx.attempt}`);
    return forever;
  },
  "tool-hang": async (ctx) => {
    await ctx.tool("charge", { key: "charge-card", args: { cents: 500 }, replay: "never", run: () => (say(`TOOL ${ctx.runId}`), forever) });
    return complete({ charged: true });
  },
  finish: async (ctx) => {
    say(`LEASED ${ctx.runId} ${ctx.attempt}`);
    await new Promise((resolve) => process.once("SIGTERM", resolve));
    say(`FINISHING ${ctx.runId}`);
    return complete({ finished: ctx.runId, attempt: ctx.attempt });
  },
};

const handler = mode ? handlers[mode] : undefined;
if (!handler || !key) throw new Error(`usage: agent.js ${Object.keys(handlers).join("|")} KEY`);
const running = worker({
  url: process.env.PARKWAY_URL!,
  token: process.env.PARKWAY_WORKER_TOKEN!,
  name: `ts-agent-${mode}-${process.pid}`,
  serves: { [key]: handler },
  waitS: 1,
  leaseS: 5,
  stopTimeoutMs: Number(process.env.AGENT_STOP_MS ?? 20_000),
});
say("STARTED");
const stopped = await running.done;
say(`STOPPED completed=${stopped.completed} abandoned=${stopped.abandoned}`);
