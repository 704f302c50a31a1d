// The client without a stack: errors by status (503 with Retry-After), and the event stream reconnecting by
// itself with Last-Event-ID after a dropped connection, against a local server that plays the API.
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, test } from "node:test";
import { Conflict, Gone, Invalid, Parkway, ParkwayError, Unavailable } from "@parkway/client";

const servers: Server[] = [];
after(() => Promise.all(servers.map((server) => new Promise((resolve) => (server.closeAllConnections(), server.close(resolve))))));

async function serve(handler: (req: IncomingMessage, res: ServerResponse) => void, retryForMs = 0): Promise<Parkway> {
  const server = createServer(handler);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return new Parkway({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, token: "pk_test", retryForMs });
}

function event(seq: number): string {
  return `id: ${seq}\ndata: ${JSON.stringify({ seq, run_id: "r1", type: "step.parked", at: "2026-01-01T00:00:00Z", data: {} })}\n\n`;
}

test("errors: each status its class, with the API's code, detail and state; 503 with Retry-After", async () => {
  const answers: Record<string, [number, Record<string, string>, string]> = {
    "/v1/runs/conflict": [409, {}, JSON.stringify({ error: "conflict", detail: "another won", state: { status: "answered" } })],
    "/v1/runs/gone": [410, {}, JSON.stringify({ error: "gone", detail: "ended", state: { status: "expired" } })],
    "/v1/runs/invalid": [422, {}, JSON.stringify({ error: "invalid", detail: "bad", errors: ["payload"] })],
    "/v1/runs/down": [503, { "retry-after": "3" }, JSON.stringify({ error: "unavailable", detail: "the database is unavailable" })],
    "/v1/runs/proxy": [502, {}, "<html>bad gateway</html>"],
  };
  const client = await serve((req, res) => {
    assert.equal(req.headers.authorization, "Bearer pk_test");
    const [status, headers, body] = answers[req.url ?? ""]!;
    res.writeHead(status, { "content-type": "application/json", ...headers }).end(body);
  });
  await assert.rejects(client.getRun("conflict"), (e: unknown) => e instanceof Conflict && e.status === 409 && (e.state as { status: string }).status === "answered");
  await assert.rejects(client.getRun("gone"), (e: unknown) => e instanceof Gone && e.code === "gone" && e.detail === "ended");
  await assert.rejects(client.getRun("invalid"), (e: unknown) => e instanceof Invalid && (e.body.errors as string[])[0] === "payload");
  await assert.rejects(client.getRun("down"), (e: unknown) => e instanceof Unavailable && e.retryAfterS === 3);
  await assert.rejects(client.getRun("proxy"), (e: unknown) => e instanceof ParkwayError && e.status === 502 && e.code === "http_502");
});

test("retries: a 503 and a request that got no answer are sent again as they are; a start without a key gets one, kept on each retry", async () => {
  const asked: Array<[string | undefined, string]> = [];
  const client = await serve((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => {
      asked.push([req.headers["idempotency-key"] as string | undefined, body]);
      if (asked.length === 1) return void res.writeHead(503, { "retry-after": "0" }).end('{"error":"unavailable","detail":"restarting"}');
      if (asked.length === 2) return void res.socket?.destroy(); // no answer at all
      res.writeHead(201, { "content-type": "application/json" }).end('{"id":"r1","status":"running"}');
    });
  }, 10_000);
  assert.deepEqual(await client.startRun({ workflow: "w", target: "t", payload: { n: 1 } }), { id: "r1", status: "running" });
  assert.equal(asked.length, 3);
  assert.ok(asked[0]![0], "a key was sent");
  assert.deepEqual(asked.slice(1), [asked[0], asked[0]]);
});

test("retries: bounded by retryForMs, then the last error; a request that may not be repeated is not sent again unanswered", async () => {
  let asked = 0;
  const client = await serve((req, res) => {
    asked += 1;
    if (req.url === "/v1/handlers") return void res.socket?.destroy();
    res.writeHead(503, { "retry-after": "1" }).end('{"error":"unavailable","detail":"restarting"}');
  }, 3_000); // a second ask at 1 s even when the first answer is slow (a loaded host), none past 3 s
  await assert.rejects(client.getRun("down"), Unavailable);
  assert.ok(asked > 1, `asked ${asked} times`);
  asked = 0;
  await assert.rejects(client.createPushHandler("http://example.com/hook", ["w"]), TypeError);
  assert.equal(asked, 1);
});

test("stream: a dropped connection is resumed with Last-Event-ID, a 503 waited out; no event lost or repeated", async () => {
  const asked: Array<string | undefined> = [];
  const client = await serve((req, res) => {
    asked.push(req.headers["last-event-id"] as string | undefined);
    assert.equal(req.headers.authorization, "Bearer pk_test");
    assert.match(req.url ?? "", /^\/v1\/events\/stream\?run_id=r1$/);
    if (asked.length === 2) {
      res.writeHead(503, { "retry-after": "0" }).end(JSON.stringify({ error: "unavailable", detail: "restarting" }));
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream" });
    const after = Number(req.headers["last-event-id"] ?? 0);
    res.write("retry: 10\n\n: keep-alive\n\n");
    res.write(event(after + 1) + event(after + 2).slice(0, 20)); // the second arrives in two chunks
    setTimeout(() => {
      // the first connection drops (once its two events went out): no end of stream, a broken socket
      res.write(event(after + 2).slice(20), () => after === 0 && res.socket?.destroy());
    }, 20);
  });
  const seen: number[] = [];
  for await (const message of client.stream({ runId: "r1" })) {
    assert.equal(message.event.seq, message.id);
    seen.push(message.id);
    if (seen.length === 4) break;
  }
  assert.deepEqual(seen, [1, 2, 3, 4]);
  assert.deepEqual(asked, [undefined, "2", "2"]);
});
