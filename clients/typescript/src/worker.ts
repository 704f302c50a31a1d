/** `worker()`: the pull loop. Long poll a lease, heartbeat while the handler runs, complete with its outcome;
 * on SIGTERM/SIGINT stop leasing and let running handlers finish, never completing anything half done. */

import { hostname } from "node:os";
import { Parkway } from "./client.js";
import { Context, errorText } from "./context.js";
import { Conflict, Forbidden, Gone, Invalid, Unauthorized, Unavailable } from "./errors.js";
import { runHandler, type Serves } from "./handlers.js";
import type { Outcome } from "./outcomes.js";
import type { Item, NextLease, Receipt } from "./protocol.js";
import { sleep } from "./sse.js";

export interface WorkerOptions {
  /** what this process serves: `{"deploy.plan": handler, "deploy.decide@1": handler}` */
  serves: Serves;
  /** a client with a `worker` (or admin) token, or `url` and `token` to make one */
  client?: Parkway;
  url?: string;
  token?: string;
  /** a stable name of this process (GET /v1/workers shows it); host and pid by default */
  name?: string;
  /** how many items run at once (default 1) */
  concurrency?: number;
  /** how long a lease call waits for work, 0..30 s (default 20) */
  waitS?: number;
  /** the lease, 5..600 s (default 30); a heartbeat every third of it while a handler runs */
  leaseS?: number;
  /** while every slot is busy, advertise `serves` this often (a lease call with `max` 0) so the API keeps
   * counting them as served (default 20 s, a third of the API's default PARKWAY_REMOTE_WORKER_TTL_S) */
  advertiseS?: number;
  /** stop gracefully on SIGTERM and SIGINT (default true) */
  handleSignals?: boolean;
  /** how long a stop waits for running handlers before it gives up on them (default: the lease) */
  stopTimeoutMs?: number;
  /** told about what the loop survives (a refused completion, a lost lease, the API unreachable) */
  log?: (message: string) => void;
}

export interface Worker {
  /** settles once the first lease call was answered: from then on the API knows what this worker serves
   * (a parked start on one of its continuations is accepted) */
  readonly ready: Promise<void>;
  /** settles when the loop has stopped: `abandoned` handlers were still running at the stop's deadline */
  readonly done: Promise<{ completed: number; abandoned: number }>;
  /** stop leasing, let running handlers finish and complete (until the deadline), then settle `done` */
  stop(): Promise<{ completed: number; abandoned: number }>;
}

/** Start the pull loop (it runs until `stop()` or a signal). */
export function worker(options: WorkerOptions): Worker {
  return new PullLoop(options).start();
}

class PullLoop implements Worker {
  readonly #client: Parkway;
  readonly #serves: Serves;
  readonly #name: string;
  readonly #concurrency: number;
  readonly #waitS: number;
  readonly #leaseS: number;
  readonly #advertiseS: number;
  readonly #stopTimeoutMs: number;
  readonly #log: (message: string) => void;
  readonly #handleSignals: boolean;
  readonly #running = new Set<Promise<void>>();
  readonly #stopping = new AbortController();
  readonly #abandon = new AbortController();
  #completed = 0;
  #advertised!: () => void;
  readonly ready = new Promise<void>((resolve) => (this.#advertised = resolve));
  #done!: Promise<{ completed: number; abandoned: number }>;
  readonly #stopped = aborted(this.#stopping.signal);
  // Past the deadline a handler still running would hold the process: the signal's stop exits it.
  readonly #onSignal = (): void =>
    void this.stop().then((stopped) => stopped.abandoned > 0 && process.exit(0));

  constructor(options: WorkerOptions) {
    this.#client = options.client ?? new Parkway({ url: required(options.url, "url"), token: required(options.token, "token") });
    this.#serves = options.serves;
    this.#name = options.name ?? `${hostname()}-${process.pid}`;
    this.#concurrency = options.concurrency ?? 1;
    this.#waitS = options.waitS ?? 20;
    this.#leaseS = options.leaseS ?? 30;
    this.#advertiseS = options.advertiseS ?? 20;
    this.#stopTimeoutMs = options.stopTimeoutMs ?? this.#leaseS * 1000;
    this.#log = options.log ?? ((message) => console.error(`parkway worker ${this.#name}: ${message}`));
    this.#handleSignals = options.handleSignals ?? true;
    if (Object.keys(this.#serves).length === 0) throw new Error("worker() needs at least one handler in `serves`");
  }

  get done(): Promise<{ completed: number; abandoned: number }> {
    return this.#done;
  }

  start(): this {
    if (this.#handleSignals) {
      process.once("SIGTERM", this.#onSignal);
      process.once("SIGINT", this.#onSignal);
    }
    this.#done = this.#loop().finally(() => {
      this.#advertised(); // nobody waits for a stopped worker's first lease
      process.removeListener("SIGTERM", this.#onSignal);
      process.removeListener("SIGINT", this.#onSignal);
    });
    return this;
  }

  stop(): Promise<{ completed: number; abandoned: number }> {
    this.#stopping.abort();
    return this.#done;
  }

  async #loop(): Promise<{ completed: number; abandoned: number }> {
    const stopping = this.#stopping.signal;
    let backoffMs = 500;
    let waitS = 0; // the first call comes back at once: `ready` then says the API knows what is served
    while (!stopping.aborted) {
      if (this.#running.size >= this.#concurrency) {
        await this.#busy();
        continue;
      }
      let items: Item[];
      try {
        items = await this.#client.lease(
          { worker: this.#name, serves: Object.keys(this.#serves), max: this.#concurrency - this.#running.size,
            wait_s: waitS, lease_s: this.#leaseS },
          stopping,
        );
        this.#advertised();
        waitS = this.#waitS;
        backoffMs = 500;
      } catch (error) {
        if (stopping.aborted) break; // an item leased in that answer comes back when its lease expires
        if (error instanceof Unauthorized || error instanceof Forbidden || error instanceof Invalid) throw error;
        const waitMs = error instanceof Unavailable && error.retryAfterS !== null ? error.retryAfterS * 1000 : backoffMs;
        this.#log(`lease failed (${errorText(error)}); again in ${waitMs} ms`);
        await sleep(waitMs, stopping);
        backoffMs = Math.min(backoffMs * 2, 10_000);
        continue;
      }
      for (const item of items) this.#track(this.#serve(item));
    }
    return this.#drain();
  }

  /** Every slot busy: wait for one to free (or a stop), advertising `serves` meanwhile. */
  async #busy(): Promise<void> {
    const tick = new AbortController();
    const ticked = sleep(this.#advertiseS * 1000, tick.signal).then(() => !tick.signal.aborted);
    const advertise = await Promise.race([...this.#running, this.#stopped, ticked]);
    tick.abort();
    if (advertise !== true || this.#stopping.signal.aborted) return;
    try {
      await this.#client.lease({ worker: this.#name, serves: Object.keys(this.#serves), max: 0, wait_s: 0, lease_s: this.#leaseS });
    } catch (error) {
      this.#log(`advertising failed (${errorText(error)}); again in ${this.#advertiseS} s`);
    }
  }

  #track(work: Promise<void>): void {
    const tracked = work.finally(() => this.#running.delete(tracked));
    this.#running.add(tracked);
  }

  /** After a stop: wait for running handlers until the deadline; past it, complete nothing of theirs. */
  async #drain(): Promise<{ completed: number; abandoned: number }> {
    const waited = new AbortController(); // its timer must not hold the process once the handlers finished
    const deadline = sleep(this.#stopTimeoutMs, waited.signal).then(() => "deadline" as const);
    const finished = Promise.all(this.#running).then(() => "finished" as const);
    const first = await Promise.race([finished, deadline]);
    waited.abort();
    if (first === "finished") return { completed: this.#completed, abandoned: 0 };
    const abandoned = this.#running.size;
    this.#abandon.abort(); // their leases expire and the server re-drives them
    this.#log(`stopped with ${abandoned} handler(s) still running: left to their leases`);
    return { completed: this.#completed, abandoned };
  }

  /** One slot: serve the item, then each next item its completion leased (one request per item while busy). */
  async #serve(first: Item): Promise<void> {
    for (let item: Item | undefined = first; item; ) item = await this.#serveOne(item);
  }

  /** One item: heartbeat while its handler runs, then complete with its outcome unless the lease was lost;
   * the completion asks for the next item, returned to serve in this slot (given back if the loop stopped).
   * Whatever fails on the way (a `SystemFault`, a refused completion) leaves the item to its lease. */
  async #serveOne(item: Item): Promise<Item | undefined> {
    const lost = new AbortController();
    const gone = AbortSignal.any([lost.signal, this.#abandon.signal]);
    const served = new AbortController();
    void this.#keepLease(item, lost, AbortSignal.any([gone, served.signal]));
    try {
      const outcome = await runHandler(this.#serves, item, new Context(item, this.#client, gone));
      if (gone.aborted) return undefined;
      const receipt = await this.#complete(item, outcome);
      if (!receipt) return undefined;
      this.#completed += 1;
      const items = receipt.items ?? [];
      const kept = this.#stopping.signal.aborted ? 0 : 1; // it asked for one, while not stopping
      for (const extra of items.slice(kept)) void this.#giveBack(extra);
      return items.slice(0, kept)[0];
    } catch (error) {
      this.#log(`${item.key} of run ${item.run_id}: ${errorText(error)}; left to its lease`);
    } finally {
      served.abort();
    }
    return undefined;
  }

  /** An item leased after the stop began: given back at once rather than left to its lease. */
  async #giveBack(item: Item): Promise<void> {
    try {
      await this.#client.releaseLease(item.lease_id, "the worker is stopping");
    } catch (error) {
      this.#log(`giving back ${item.key} of run ${item.run_id} failed (${errorText(error)}): it comes back after its lease`);
    }
  }

  /** A heartbeat every third of the lease, one at a time, until `done`; a 409/410 aborts `lost`. */
  async #keepLease(item: Item, lost: AbortController, done: AbortSignal): Promise<void> {
    for (;;) {
      await sleep((this.#leaseS * 1000) / 3, done);
      if (done.aborted) return;
      try {
        await this.#client.heartbeat(item.lease_id, this.#leaseS);
      } catch (error) {
        if (error instanceof Conflict || error instanceof Gone) {
          this.#log(`lease of ${item.key} for run ${item.run_id} lost (${error.status}): its outcome will not be sent`);
          lost.abort();
        } else {
          this.#log(`heartbeat of ${item.key} failed (${errorText(error)}); the next one retries`);
        }
      }
    }
  }

  /** A completion's `lease`: the next item for the slot it frees, unless the loop is stopping. */
  #nextLease(): NextLease | undefined {
    if (this.#stopping.signal.aborted) return undefined;
    return { worker: this.#name, serves: Object.keys(this.#serves), max: 1, lease_s: this.#leaseS };
  }

  /** Complete (the client sends it again while the API cannot answer; the exact retry gets the same receipt).
   * Refused — 409/410: another worker or the run's end won; a 422: this server cannot commit it now (a park on
   * a version mid-rollout, on an older server) — or never answered: no receipt, and the item is left to its
   * lease (Parkway re-drives it, spaced by the lease), never turned into a `fail` of the workflow. */
  async #complete(item: Item, outcome: Outcome): Promise<Receipt | null> {
    try {
      return await this.#client.completeLease(item.lease_id, outcome, this.#nextLease());
    } catch (error) {
      const won = error instanceof Conflict || error instanceof Gone;
      this.#log(`completion of ${item.key} for run ${item.run_id} not committed (${errorText(error)}): ${won ? "another worker or the run's end won" : "left to its lease"}`);
      return null;
    }
  }
}

function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => (signal.aborted ? resolve() : signal.addEventListener("abort", () => resolve(), { once: true })));
}

function required(value: string | undefined, name: string): string {
  if (!value) throw new Error(`worker() needs \`client\`, or \`url\` and \`token\` (missing ${name})`);
  return value;
}
