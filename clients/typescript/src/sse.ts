/** Follow the server-sent event stream, resuming with `Last-Event-ID` after a dropped connection. */

import { errorFor, Unavailable } from "./errors.js";

/** The part of `Parkway` the stream uses. */
export interface StreamSource {
  readonly url: string;
  readonly fetch: typeof fetch;
  authorization(): Record<string, string>;
}

export interface StreamOptions {
  /** start after this seq (a reconnect sends the last seen one as `Last-Event-ID` instead) */
  after?: number;
  /** only this run's events */
  runId?: string;
  /** resume a stream another process followed: its last `id:` */
  lastEventId?: string;
  /** reconnect when the connection drops or the API answers 503 (default true) */
  reconnect?: boolean;
  signal?: AbortSignal;
}

/** One event of the stream: `id` is its seq (what `Last-Event-ID` resumes after), `event` the JSON object. */
export interface StreamedEvent {
  id: number;
  event: { seq: number; run_id: string; type: string; at: string; data: Record<string, unknown> };
}

interface Message {
  id?: string;
  data?: string;
  retry?: number;
}

export async function* streamEvents(source: StreamSource, options: StreamOptions = {}): AsyncGenerator<StreamedEvent> {
  const reconnect = options.reconnect ?? true;
  const signal = options.signal;
  let last = options.lastEventId;
  let retryMs = 2000;
  while (!signal?.aborted) {
    const headers: Record<string, string> = { ...source.authorization(), accept: "text/event-stream" };
    if (last !== undefined) headers["last-event-id"] = last;
    const query = new URLSearchParams();
    if (options.after !== undefined) query.set("after", String(options.after));
    if (options.runId !== undefined) query.set("run_id", options.runId);
    const suffix = query.size ? `?${query}` : "";
    try {
      const response = await source.fetch(`${source.url}/v1/events/stream${suffix}`, signal ? { headers, signal } : { headers });
      if (!response.ok || !response.body) {
        const error = errorFor(response.status, await response.text(), response.headers);
        if (!(error instanceof Unavailable) || !reconnect) throw error;
        retryMs = (error.retryAfterS ?? retryMs / 1000) * 1000;
      } else {
        for await (const message of messages(response.body)) {
          if (message.retry !== undefined) retryMs = message.retry;
          if (message.data === undefined) continue;
          if (message.id !== undefined) last = message.id;
          yield { id: Number(message.id), event: JSON.parse(message.data) as StreamedEvent["event"] };
        }
      }
    } catch (error) {
      if (signal?.aborted) return;
      if (!reconnect || !isDisconnect(error)) throw error;
    }
    if (!reconnect) return;
    await sleep(retryMs, signal);
  }
}

/** A dropped connection (worth a reconnect), as opposed to an error of the API or of the caller. */
function isDisconnect(error: unknown): boolean {
  return error instanceof TypeError || (error instanceof Error && /terminated|socket|ECONNRE|other side closed/i.test(error.message));
}

/** The stream's messages, as the event-stream format frames them (a blank line ends one). */
async function* messages(body: ReadableStream<Uint8Array>): AsyncGenerator<Message> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let message: Message = {};
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      const lines = buffer.split(/\r\n|\r|\n/);
      buffer = lines.pop() ?? "";
      for (const line of lines) {
        if (line === "") {
          if (message.data !== undefined || message.retry !== undefined) yield message;
          message = {};
          continue;
        }
        if (line.startsWith(":")) continue; // a keep-alive comment
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "data") message.data = message.data === undefined ? value : `${message.data}\n${value}`;
        else if (field === "id") message.id = value;
        else if (field === "retry" && /^\d+$/.test(value)) message.retry = Number(value);
      }
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}

/** Wait `ms`, or less when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}
