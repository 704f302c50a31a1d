// The push handler in Node's http server: a signed item runs its handler and answers the outcome; a bad
// signature is 401 and runs nothing; an unserved key is 410; a thrown error is a `fail` outcome, a tool call the
// journal refused a 503 (the system's, retried by Parkway). Registering one at a URL Parkway may not reach is
// refused with the reason.
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { complete, Invalid, nodeListener, Parkway, pushHandler, sign } from "@parkway/client";
import { admin } from "./helpers.js";

const SECRET = "whsec_" + Buffer.from("push handler test secret").toString("base64");
const calls: string[] = [];
let server: Server;
let journal: Server;
let url: string;

before(async () => {
  // the API as a lease no longer held sees it: every journal request is 404
  journal = createServer((_req, res) => res.writeHead(404, { "content-type": "application/json" }).end('{"error":"not_found","detail":"no such lease"}'));
  await new Promise<void>((resolve) => journal.listen(0, "127.0.0.1", resolve));
  const handler = pushHandler({
    secret: SECRET,
    client: new Parkway({ url: `http://127.0.0.1:${(journal.address() as AddressInfo).port}`, token: "pk_test" }),
    serves: {
      "push.greet": (ctx, payload: { name: string }) => {
        calls.push(`${ctx.runId}:${ctx.attempt}`);
        return complete({ hello: payload.name });
      },
      "push.decide@2": (_ctx, snapshot: { n: number }, answers) => complete({ n: snapshot.n, ok: answers.go?.approved }),
      "push.broken": () => {
        throw new Error("no such service");
      },
      "push.charge": async (ctx) => {
        try {
          return complete(await ctx.tool("charge", { key: "charge", replay: "never", run: () => calls.push("charged") }));
        } catch (error) {
          throw new Error("charging failed", { cause: error });
        }
      },
    },
  });
  server = createServer(nodeListener(handler));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/parkway`;
});

after(() => Promise.all([server, journal].map((closing) => new Promise<void>((resolve) => closing.close(() => resolve())))));

function item(key: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const [name, version] = key.split("@");
  return {
    lease_id: "lease-1", kind: version ? "resume" : "start", run_id: "run-1", step_id: "step-1", attempt: 1, name,
    version: version ? Number(version) : null, key, lease_expires_at: new Date().toISOString(), ...extra,
  };
}

async function post(body: string, signature?: string, timestamp = Math.floor(Date.now() / 1000)): Promise<Response> {
  const id = "msg_push_1";
  return fetch(url, {
    method: "POST",
    body,
    headers: {
      "content-type": "application/json",
      "webhook-id": id,
      "webhook-timestamp": String(timestamp),
      "webhook-signature": signature ?? (await sign(SECRET, id, timestamp, body)),
    },
  });
}

test("push: a signed start item runs its step and answers the outcome", async () => {
  const answer = await post(JSON.stringify(item("push.greet", { payload: { name: "ana" } })));
  assert.equal(answer.status, 200);
  assert.deepEqual(await answer.json(), { type: "complete", result: { hello: "ana" } });
  assert.deepEqual(calls, ["run-1:1"]);
});

test("push: a resume item gets its snapshot and answers", async () => {
  const body = item("push.decide@2", { snapshot: { n: 7 }, answers: { go: { status: "answered", value: { approved: true }, approved: true, answered_by: "ana" } } });
  const answer = await post(JSON.stringify(body));
  assert.deepEqual(await answer.json(), { type: "complete", result: { n: 7, ok: true } });
});

test("push: a bad signature is 401 and runs nothing", async () => {
  calls.length = 0;
  const body = JSON.stringify(item("push.greet", { payload: { name: "eve" } }));
  const forged = await sign("whsec_" + Buffer.from("not the secret").toString("base64"), "msg_push_1", Math.floor(Date.now() / 1000), body);
  assert.equal((await post(body, forged)).status, 401);
  assert.equal((await post(body, "v1,")).status, 401);
  const stale = Math.floor(Date.now() / 1000) - 3600;
  assert.equal((await post(body, await sign(SECRET, "msg_push_1", stale, body), stale)).status, 401);
  assert.deepEqual(calls, []);
});

test("push: an unserved key is 410, a thrown error a fail outcome, a body that is no item 400", async () => {
  assert.equal((await post(JSON.stringify(item("push.gone@1")))).status, 410);
  const broken = await post(JSON.stringify(item("push.broken")));
  assert.equal(broken.status, 200);
  assert.deepEqual(await broken.json(), { type: "fail", error: "Error: no such service" });
  assert.equal((await post("[1, 2]")).status, 400);
});

test("push: a tool call the journal refused is the system's: 503 (Parkway sends it again), not a fail outcome, nothing run", async () => {
  calls.length = 0;
  const refused = await post(JSON.stringify(item("push.charge")));
  assert.equal(refused.status, 503, await refused.clone().text());
  assert.match(((await refused.json()) as { detail: string }).detail, /^tool call charge could not be journaled: NotFound: 404 not_found: no such lease$/);
  assert.deepEqual(calls, []);
});

test("push: a handler URL whose host is an IPv6 form of a loopback address is refused with the reason, nothing stored", async () => {
  const url = "http://[64:ff9b::7f00:1]:8000/parkway";
  const refused = await admin.createPushHandler(url, ["push.greet"]).then(() => null, (error: unknown) => error);
  assert.ok(refused instanceof Invalid && refused.status === 422, String(refused));
  assert.match(refused.detail, /resolves to 64:ff9b::7f00:1, the NAT64 form of 127\.0\.0\.1, a loopback address/);
  assert.deepEqual((await admin.listPushHandlers()).items.filter((h) => h.url === url), []);
});
