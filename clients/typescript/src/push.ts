/** Push mode: Parkway POSTs an item to the handler's URL, signed like its webhooks; the response is the
 * outcome JSON. `pushHandler()` is a fetch-style `(Request) => Promise<Response>`; `nodeListener()` adapts
 * it to Node's `http.createServer`. */

import type { IncomingMessage, ServerResponse } from "node:http";
import type { Parkway } from "./client.js";
import { Context, systemFault } from "./context.js";
import { NotServed, runHandler, type Serves } from "./handlers.js";
import type { Item } from "./protocol.js";
import { verify, WebhookVerificationError } from "./signature.js";

export interface PushOptions {
  /** the `whsec_` secret, or several during a rotation */
  secret: string | string[];
  serves: Serves;
  /** a client with a worker token, for `ctx.tool` (the tool journal is reached over the API) */
  client?: Parkway;
  /** how old (or how far ahead) a `webhook-timestamp` may be, in seconds (default 300) */
  toleranceS?: number;
}

export type FetchHandler = (request: Request) => Promise<Response>;

/** Verify, parse the item, run its handler, answer its outcome: 200 with the outcome JSON; 401 for a bad
 * signature; 400 for a body that is not an item; 410 when nothing here serves the item's key; 503 when a
 * `ctx.tool` could not be journaled (Parkway sends the item again). */
export function pushHandler(options: PushOptions): FetchHandler {
  return async (request) => {
    if (request.method !== "POST") return problem(405, "method_not_allowed", "POST an item");
    const body = new Uint8Array(await request.arrayBuffer());
    try {
      await verify(options.secret, {
        id: request.headers.get("webhook-id"),
        timestamp: request.headers.get("webhook-timestamp"),
        signature: request.headers.get("webhook-signature"),
      }, body, options.toleranceS === undefined ? {} : { toleranceS: options.toleranceS });
    } catch (error) {
      if (error instanceof WebhookVerificationError) return problem(401, "unauthorized", error.message);
      throw error;
    }
    const item = parseItem(body);
    if (!item) return problem(400, "bad_request", "the body is not a Parkway item");
    try {
      options.client?.continueTraces([item]); // its tool calls continue the trace the push was sent in
      const outcome = await runHandler(options.serves, item, new Context(item, options.client ?? null, request.signal));
      return Response.json(outcome);
    } catch (error) {
      if (error instanceof NotServed) return problem(410, "gone", error.message);
      const fault = systemFault(error);
      if (fault) return problem(503, "unavailable", fault.message);
      throw error;
    }
  };
}

/** `http.createServer(nodeListener(pushHandler({...})))`. */
export function nodeListener(handler: FetchHandler): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    void serveNode(handler, req, res).catch((error: unknown) => {
      if (!res.headersSent) res.writeHead(500, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: "internal", detail: String(error) }));
    });
  };
}

async function serveNode(handler: FetchHandler, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(", ") : value);
  }
  const method = req.method ?? "GET";
  const init: RequestInit = { method, headers };
  if (method !== "GET" && method !== "HEAD") init.body = Buffer.concat(chunks);
  const response = await handler(new Request(`http://${req.headers.host ?? "localhost"}${req.url ?? "/"}`, init));
  res.writeHead(response.status, Object.fromEntries(response.headers));
  res.end(Buffer.from(await response.arrayBuffer()));
}

function parseItem(body: Uint8Array): Item | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder().decode(body));
  } catch {
    return null;
  }
  if (typeof parsed !== "object" || parsed === null) return null;
  const item = parsed as Partial<Item>;
  const fields = [item.lease_id, item.run_id, item.step_id, item.key];
  if (fields.some((field) => typeof field !== "string") || (item.kind !== "start" && item.kind !== "resume")) return null;
  return item as Item;
}

function problem(status: number, error: string, detail: string): Response {
  return Response.json({ error, detail }, { status });
}
