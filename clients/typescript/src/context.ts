/** What a handler gets beside its input: the item's identity and `tool()`, the journaled side effect. */

import type { Parkway } from "./client.js";
import { Invalid } from "./errors.js";
import type { Item } from "./protocol.js";

/** Raised by `ctx.tool` when a `never` call may have run under a lost lease: it is never run again. */
export class PossiblyRan extends Error {
  readonly key: string;

  constructor(key: string, detail: string | null | undefined) {
    super(`tool call ${key} possibly ran and is not run again${detail ? `: ${detail}` : ""}`);
    this.name = "PossiblyRan";
    this.key = key;
  }
}

/** Raised by `ctx.tool` when the call had settled with an error: the recorded error, not run again. */
export class ToolFailed extends Error {
  readonly key: string;

  constructor(key: string, error: string) {
    super(error);
    this.name = "ToolFailed";
    this.key = key;
  }
}

/** Raised by `ctx.tool` when its journal request failed for a reason of the system (no answer after the client's
 * retries, a lost lease, ...): never the workflow's verdict. A worker leaves the item to its lease (Parkway
 * re-drives it); a push handler answers 503. Also when it is the `cause` of what a handler throws. */
export class SystemFault extends Error {
  readonly key: string;

  constructor(key: string, cause: unknown) {
    super(`tool call ${key} could not be journaled: ${errorText(cause)}`, { cause });
    this.name = "SystemFault";
    this.key = key;
  }
}

/** The `SystemFault` that `error` is, or was caused by (its `cause`, that one's, ...). */
export function systemFault(error: unknown): SystemFault | undefined {
  for (let seen = error; seen instanceof Error; seen = seen.cause) if (seen instanceof SystemFault) return seen;
  return undefined;
}

export interface ToolCall<T> {
  /** unique within the step: the journal's key */
  key: string;
  args?: unknown;
  /** `safe`: an exact observation, may run again; `never`: anything with an effect (at most once) */
  replay: "safe" | "never";
  /** the effect; its result must be JSON */
  run: () => T | Promise<T>;
}

export class Context {
  readonly runId: string;
  readonly stepId: string;
  /** 1 on the first execution, +1 on each re-execution */
  readonly attempt: number;
  readonly leaseId: string;
  /** `start` (a step) or `resume` (a continuation) */
  readonly kind: Item["kind"];
  readonly name: string;
  readonly version: number | null;
  /** aborted when the lease is lost (another worker may have the item now): stop, nothing will commit */
  readonly signal: AbortSignal;
  readonly #client: Parkway | null;

  constructor(item: Item, client: Parkway | null, signal: AbortSignal) {
    this.runId = item.run_id;
    this.stepId = item.step_id;
    this.attempt = item.attempt;
    this.leaseId = item.lease_id;
    this.kind = item.kind;
    this.name = item.name;
    this.version = item.version;
    this.signal = signal;
    this.#client = client;
  }

  /** Run `call.run` under the journal: the intent is durable before it runs, the outcome after. A call that
   * already settled returns its recorded result without running (or throws `ToolFailed`/`PossiblyRan`). */
  async tool<T>(name: string, call: ToolCall<T>): Promise<T> {
    const client = this.#client;
    if (!client) throw new Error("ctx.tool needs a client: pass `client` to pushHandler()");
    const intent = { name, key: call.key, args: call.args ?? null, replay: call.replay };
    const state = await journaled(call.key, () => client.toolIntent(this.leaseId, intent));
    if (state.state === "settled") {
      if (state.possibly_ran) throw new PossiblyRan(call.key, state.error);
      if (state.error) throw new ToolFailed(call.key, state.error);
      return state.result as T;
    }
    let result: T;
    try {
      result = await call.run();
    } catch (error) {
      await journaled(call.key, () => client.toolOutcome(this.leaseId, call.key, { error: errorText(error) }));
      throw error;
    }
    await journaled(call.key, () => client.toolOutcome(this.leaseId, call.key, { result: result === undefined ? null : result }));
    return result;
  }
}

/** A journal request; any failure but the call's own invalidity (422: other arguments) is a `SystemFault`. */
async function journaled<T>(key: string, request: () => Promise<T>): Promise<T> {
  try {
    return await request();
  } catch (error) {
    if (error instanceof Invalid) throw error;
    throw new SystemFault(key, error);
  }
}

export function errorText(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
