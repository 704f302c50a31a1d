// The remote worker of tests/acceptance/test_tracing.py: the TypeScript client's `worker()` serving
// `trace.remote@1` (a tool call, then complete), as long as the test runs it; it continues the trace of
// each item it leased (the client sends the item's traceparent back on the lease's calls).
//
//   node tests/acceptance/trace_agent.mjs   with PARKWAY_URL, PARKWAY_TOKEN

import { Parkway, complete, worker } from "../../clients/typescript/dist/esm/index.js";

const client = new Parkway({ url: process.env.PARKWAY_URL, token: process.env.PARKWAY_TOKEN });
const agent = worker({
  client,
  name: "trace-node",
  waitS: 2,
  serves: {
    "trace.remote@1": async (ctx, snapshot, answers) => {
      const sent = await ctx.tool("notify", { key: "notify", args: { to: "ana" }, replay: "safe", run: () => "sent" });
      return complete({ user: answers.otp.value.user, sent });
    },
  },
});
await agent.ready;
console.log("ready");
process.on("SIGTERM", () => agent.stop());
await agent.done;
