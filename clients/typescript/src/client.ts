/** `Parkway`: the HTTP API's calls, typed, with the API's errors as exceptions (errors.ts). */

import type {
  AnswerReceiptOut,
  CancelReceiptOut,
  EventPage,
  HandlerCreated,
  HandlerList,
  InteractionOut,
  InteractionPage,
  RunOut,
  RunPage,
  WorkerPage,
} from "./api-types.js";
import { errorFor, Unavailable } from "./errors.js";
import type { Interaction } from "./outcomes.js";
import type { Item, LeaseRequest, NextLease, Receipt, ToolIntent, ToolState } from "./protocol.js";
import type { Outcome } from "./outcomes.js";
import { sleep, streamEvents, type StreamedEvent, type StreamOptions } from "./sse.js";

export interface ParkwayOptions {
  /** the API's base URL, e.g. `http://127.0.0.1:8000` */
  url: string;
  /** a bearer token (`parkway token create ...`) */
  token: string;
  /** another fetch (a test double, a proxy-aware one); the platform's by default */
  fetch?: typeof fetch;
  /** how long a request is sent again, as it is, while the API cannot answer it — a 503 (after its
   * `Retry-After`) or no answer at all — in ms (default 30 000, about a lease; 0: never) */
  retryForMs?: number;
}

export interface StartRun {
  workflow: string;
  payload?: unknown;
  target: string;
  /** makes a retry return the same run (the same key with another body: 409) */
  idempotencyKey?: string;
}

export interface StartParked extends StartRun {
  /** the first step is parked at once on these interactions; `continuation` (`name@version`) resumes it */
  park: { continuation: string; snapshot?: unknown; interactions: Interaction[] };
}

/** 201 of a parked start: the run waits on these interactions. */
export interface ParkedRun {
  id: string;
  status: string;
  interactions: Array<{ id: string; key: string }>;
}

export interface RunFilter {
  status?: string;
  workflow?: string;
  target?: string;
  cursor?: string;
  limit?: number;
}

export interface InteractionFilter {
  status?: string;
  target?: string;
  run_id?: string;
  cursor?: string;
  limit?: number;
}

type Query = Record<string, string | number | undefined | null>;

interface RequestOptions {
  body?: unknown;
  query?: Query;
  headers?: Record<string, string>;
  signal?: AbortSignal;
  /** false: a lost answer is not retried (nothing makes a second request the same one), only a 503 */
  idempotent?: boolean;
}

export class Parkway {
  readonly url: string;
  readonly #token: string;
  readonly #fetch: typeof fetch;
  readonly #retryForMs: number;
  /** Each held lease's trace context (`Item.traceparent`, when Parkway traces): sent back as the `traceparent`
   * header of the lease's calls, so its heartbeats, tool calls and completion continue the trace it was
   * handed out in. Forgotten once the lease is completed or released. */
  readonly #traces = new Map<string, string>();

  constructor(options: ParkwayOptions) {
    this.url = options.url.replace(/\/+$/, "");
    this.#token = options.token;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.#retryForMs = options.retryForMs ?? 30_000;
  }

  /** One call: JSON in and out; a non-2xx answer throws the status's `ParkwayError`. A 503 and a request
   * that got no answer are sent again, byte for byte (the API's idempotency makes that safe), with a bounded
   * backoff or the `Retry-After` it asked for, for up to `retryForMs`; then the last error is thrown. */
  async request<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.#token}`, accept: "application/json", ...options.headers };
    let body: string | undefined;
    if (options.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    const init: RequestInit = { method, headers, body };
    if (options.signal) init.signal = options.signal;
    const url = this.url + path + queryString(options.query);
    const deadline = Date.now() + this.#retryForMs;
    for (let backoffMs = 250; ; backoffMs = Math.min(backoffMs * 2, 5_000)) {
      try {
        return await this.#send<T>(url, init);
      } catch (error) {
        const retried = error instanceof Unavailable || (isNetworkError(error) && options.idempotent !== false);
        const waitMs = error instanceof Unavailable && error.retryAfterS !== null ? error.retryAfterS * 1000 : backoffMs;
        if (!retried || options.signal?.aborted || Date.now() + waitMs > deadline) throw error;
        await sleep(waitMs, options.signal);
      }
    }
  }

  async #send<T>(url: string, init: RequestInit): Promise<T> {
    const response = await this.#fetch(url, init);
    const text = await response.text();
    if (!response.ok) throw errorFor(response.status, text, response.headers);
    return (text ? JSON.parse(text) : undefined) as T;
  }

  /** The request headers a raw call needs (the SSE stream builds its own requests). */
  authorization(): Record<string, string> {
    return { authorization: `Bearer ${this.#token}` };
  }

  get fetch(): typeof fetch {
    return this.#fetch;
  }

  // ------------------------------------------------------------------ runs

  /** Start a run of a workflow (the name of its first step) → `{id, status}`. Without an `idempotencyKey`
   * the call makes one, so its own retries start one run. */
  startRun(run: StartRun): Promise<{ id: string; status: string }> {
    return this.request("POST", "/v1/runs", { body: runBody(run), headers: idempotency(run) });
  }

  /** Start a run whose first step is already parked on `park.interactions` (one transaction). */
  startParked(run: StartParked): Promise<ParkedRun> {
    return this.request("POST", "/v1/runs", { body: { ...runBody(run), park: run.park }, headers: idempotency(run) });
  }

  getRun(runId: string): Promise<RunOut> {
    return this.request("GET", `/v1/runs/${encodeURIComponent(runId)}`);
  }

  /** The runs the caller may read, newest first; pass `next` back as `cursor`. */
  listRuns(filter: RunFilter = {}): Promise<RunPage> {
    return this.request("GET", "/v1/runs", { query: { ...filter } });
  }

  /** A run's events with `seq > after`, in order. */
  runEvents(runId: string, options: { after?: number; limit?: number } = {}): Promise<EventPage> {
    return this.request("GET", `/v1/runs/${encodeURIComponent(runId)}/events`, { query: { ...options } });
  }

  /** Follow `GET /v1/events/stream`, reconnecting with `Last-Event-ID` where it broke off. */
  stream(options: StreamOptions = {}): AsyncGenerator<StreamedEvent> {
    return streamEvents(this, options);
  }

  // ------------------------------------------------------------------ interactions

  listInteractions(filter: InteractionFilter = {}): Promise<InteractionPage> {
    return this.request("GET", "/v1/interactions", { query: { ...filter } });
  }

  getInteraction(interactionId: string): Promise<InteractionOut> {
    return this.request("GET", `/v1/interactions/${encodeURIComponent(interactionId)}`);
  }

  /** First response wins; the exact retry (same `responseId`) gets the same receipt; else 409/410/422. */
  answer(interactionId: string, answer: { responseId: string; value: unknown }): Promise<AnswerReceiptOut> {
    return this.request("POST", `/v1/interactions/${encodeURIComponent(interactionId)}/answer`, {
      body: { response_id: answer.responseId, value: answer.value },
    });
  }

  /** Cancel the whole parked step (and its run). */
  cancel(interactionId: string, cancel: { responseId: string; reason?: string }): Promise<CancelReceiptOut> {
    return this.request("POST", `/v1/interactions/${encodeURIComponent(interactionId)}/cancel`, {
      body: { response_id: cancel.responseId, reason: cancel.reason ?? null },
    });
  }

  /** The live workers, Celery and remote (admin). */
  listWorkers(): Promise<WorkerPage> {
    return this.request("GET", "/v1/workers");
  }

  /** Register a push handler (admin): Parkway POSTs the items of `serves` to `url`; its `secret` (for
   * `pushHandler`) is in this answer only. */
  createPushHandler(url: string, serves: string[]): Promise<HandlerCreated> {
    return this.request("POST", "/v1/handlers", { body: { url, serves }, idempotent: false });
  }

  /** The push handlers (admin), never a secret. */
  listPushHandlers(): Promise<HandlerList> {
    return this.request("GET", "/v1/handlers");
  }

  /** Remove a push handler (admin). */
  async deletePushHandler(handlerId: string): Promise<void> {
    await this.request("DELETE", `/v1/handlers/${encodeURIComponent(handlerId)}`);
  }

  // ------------------------------------------------------------------ the worker protocol

  /** Long poll for up to `max` due items of what `serves` names; advertises `serves` for `worker`. */
  async lease(request: LeaseRequest, signal?: AbortSignal): Promise<Item[]> {
    const leased = await this.request<{ items: Item[] }>("POST", "/v1/worker/lease", { body: request, signal });
    return this.continueTraces(leased.items);
  }

  /** Remember the trace context of items handed out (by a lease, a completion's next lease, a push), for the
   * calls on their leases. */
  continueTraces<T extends Pick<Item, "lease_id" | "traceparent">>(items: T[]): T[] {
    for (const item of items) if (item.traceparent) this.#traces.set(item.lease_id, item.traceparent);
    return items;
  }

  /** A call on one lease, in the trace its item was handed out in. */
  #onLease<T>(leaseId: string, path: string, body: unknown, done = false): Promise<T> {
    const traceparent = this.#traces.get(leaseId);
    const sent = this.request<T>("POST", `${leasePath(leaseId)}${path}`, { body, headers: traceparent ? { traceparent } : {} });
    return done ? sent.finally(() => this.#traces.delete(leaseId)) : sent;
  }

  heartbeat(leaseId: string, leaseS?: number): Promise<{ lease_expires_at: string }> {
    return this.#onLease(leaseId, "/heartbeat", leaseS === undefined ? {} : { lease_s: leaseS });
  }

  /** Commit the outcome once; the exact retry gets the same receipt; a lost lease 409, an ended run 410.
   * With `lease`, the receipt's `items` are the next items due now, leased by the call that committed (none
   * on the exact retry, nor with a 409/410/422). */
  async completeLease(leaseId: string, outcome: Outcome, lease?: NextLease): Promise<Receipt> {
    const receipt = await this.#onLease<Receipt>(leaseId, "/complete", lease === undefined ? { outcome } : { outcome, lease }, true);
    this.continueTraces(receipt.items ?? []);
    return receipt;
  }

  /** Give the item back (counted as an attempt). */
  releaseLease(leaseId: string, reason?: string): Promise<unknown> {
    return this.#onLease(leaseId, "/release", reason === undefined ? {} : { reason }, true);
  }

  /** Record a tool call's intent before its effect. */
  toolIntent(leaseId: string, intent: ToolIntent): Promise<ToolState> {
    return this.#onLease(leaseId, "/tools", intent);
  }

  /** Record a tool call's outcome after its effect. */
  toolOutcome(leaseId: string, key: string, outcome: { result: unknown } | { error: string }): Promise<unknown> {
    return this.#onLease(leaseId, `/tools/${encodeURIComponent(key)}/outcome`, outcome);
  }
}

function leasePath(leaseId: string): string {
  return `/v1/worker/leases/${encodeURIComponent(leaseId)}`;
}

function runBody(run: StartRun): Record<string, unknown> {
  return { workflow: run.workflow, payload: run.payload ?? {}, target: run.target };
}

function idempotency(run: StartRun): Record<string, string> {
  return { "idempotency-key": run.idempotencyKey ?? globalThis.crypto.randomUUID() };
}

/** No answer at all (the fetch standard's network error: refused, reset, cut off mid-body). */
function isNetworkError(error: unknown): boolean {
  return error instanceof TypeError;
}

function queryString(query: Query | undefined): string {
  if (!query) return "";
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== null) params.set(name, String(value));
  }
  const text = params.toString();
  return text ? `?${text}` : "";
}
