/** Serving an item: find its handler, run it, turn what it returned or threw into an outcome. */

import type { Context } from "./context.js";
import { errorText, systemFault } from "./context.js";
import { fail, isOutcome, type Outcome } from "./outcomes.js";
import type { Answers, Item } from "./protocol.js";

/** A step (`(ctx, payload)`) or a continuation (`(ctx, snapshot, answers)`). */
export type Handler = (ctx: Context, input: any, answers: Answers) => Outcome | Promise<Outcome>;

/** What a process serves: bare step names and `name@version` continuation keys, each with its handler. */
export type Serves = Record<string, Handler>;

/** Raised when an item names nothing this process serves. */
export class NotServed extends Error {}

/** Run the item's handler: its outcome, or `fail` with the error it threw (the workflow's verdict); a
 * `SystemFault` it threw (or caused what it threw) is thrown on: the system's, never committed as `fail`. */
export async function runHandler(serves: Serves, item: Item, ctx: Context): Promise<Outcome> {
  const handler = serves[item.key];
  if (!handler) throw new NotServed(`${item.key} is not served here (serves: ${Object.keys(serves).join(", ")})`);
  try {
    const outcome = await (item.kind === "start" ? handler(ctx, item.payload, {}) : handler(ctx, item.snapshot, item.answers ?? {}));
    return isOutcome(outcome) ? outcome : fail(`${item.key} returned no outcome (park, next, complete or fail)`);
  } catch (error) {
    if (systemFault(error)) throw error;
    return fail(errorText(error));
  }
}
