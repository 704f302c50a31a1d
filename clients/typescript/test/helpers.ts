// What the stack tests share: clients for each principal from the environment the pytest module sets, unique
// names, waiting for a condition, and agent processes to kill.
import { spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { Invalid, Parkway, question, type ParkedRun, type StartParked } from "@parkway/client";

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: the stack tests run from tests/acceptance/test_typescript_client.py`);
  return value;
}

export const BASE_URL = env("PARKWAY_URL");
export const TARGET = env("PARKWAY_TARGET");
export const HUMAN_NAME = env("PARKWAY_HUMAN_NAME");
export const agent = new Parkway({ url: BASE_URL, token: env("PARKWAY_AGENT_TOKEN") });
export const human = new Parkway({ url: BASE_URL, token: env("PARKWAY_HUMAN_TOKEN") });
export const admin = new Parkway({ url: BASE_URL, token: env("PARKWAY_ADMIN_TOKEN") });
export const workerClient = new Parkway({ url: BASE_URL, token: env("PARKWAY_WORKER_TOKEN") });
export const WORKER_TOKEN = env("PARKWAY_WORKER_TOKEN");

/** The question the stack tests park. */
export const WINDOW = question({ key: "window", prompt: "When?", schema: { type: "string", enum: ["now", "tonight"] }, target: TARGET });

/** A name of this test's own, so no other test's worker serves it. */
export function unique(prefix: string): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

export async function waitFor<T>(condition: () => Promise<T | null | undefined | false>, what: string, timeoutMs = 40_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await condition();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Start a parked run once a worker advertises its continuation (until then the API answers 422). */
export function startParkedWhenServed(run: StartParked): Promise<ParkedRun> {
  return waitFor(async () => {
    try {
      return await agent.startParked(run);
    } catch (error) {
      if (error instanceof Invalid && error.detail.includes(run.park.continuation)) return null;
      throw error;
    }
  }, `a worker serving ${run.park.continuation}`);
}

/** A run's status once it is `status`. */
export function runReaches(runId: string, status: string) {
  return waitFor(async () => {
    const run = await human.getRun(runId);
    return run.status === status ? run : null;
  }, `run ${runId} ${status}`);
}

const ENDED = new Set(["completed", "failed", "interrupted", "canceled"]);

/** A run once it ended, whatever its end (a test asserts which, and sees the error of the wrong one). */
export function runEnds(runId: string) {
  return waitFor(async () => {
    const run = await human.getRun(runId);
    return ENDED.has(run.status) ? run : null;
  }, `run ${runId} to end`);
}

/** Answer every pending interaction of a parked run with `values[key]`. */
export async function answerAll(parked: ParkedRun, values: Record<string, unknown>): Promise<void> {
  for (const { id, key } of parked.interactions) {
    await human.answer(id, { responseId: `${key}-${parked.id}`, value: values[key] });
  }
}

const agents = new Set<AgentProcess>();

/** SIGKILL every agent process still running (a failed test must not leave one holding the runner open). */
export async function killAgents(): Promise<void> {
  await Promise.all([...agents].map((agent) => agent.kill()));
}

/** An agent process (build-test/agent.js) whose output lines are watched. */
export class AgentProcess {
  readonly proc: ChildProcess;
  readonly lines: string[] = [];
  readonly exited: Promise<number | null>;

  /** `node agent.js MODE KEY`, or another `script` (relative to this file's folder) with its arguments. */
  constructor(mode: string, key: string, env: Record<string, string> = {}, script = "./agent.js") {
    const path = fileURLToPath(new URL(script, import.meta.url));
    const args = script === "./agent.js" ? [path, mode, key] : [path];
    this.proc = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let partial = "";
    this.proc.stdout!.on("data", (chunk: Buffer) => {
      const text = partial + chunk.toString();
      const lines = text.split("\n");
      partial = lines.pop() ?? "";
      this.lines.push(...lines);
    });
    this.proc.stderr!.on("data", (chunk: Buffer) => process.stderr.write(`agent ${mode}: ${chunk}`));
    this.exited = new Promise((resolve) => this.proc.once("exit", (code) => (agents.delete(this), resolve(code))));
    agents.add(this);
  }

  line(pattern: RegExp, what: string): Promise<RegExpMatchArray> {
    return waitFor(async () => {
      for (const line of this.lines) {
        const match = line.match(pattern);
        if (match) return match;
      }
      if (this.proc.exitCode !== null) throw new Error(`agent exited (${this.proc.exitCode}) before ${what}: ${this.lines.join(" | ")}`);
      return null;
    }, what);
  }

  async kill(): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill("SIGKILL");
    await this.exited;
  }
}

// What fetch already undid (a chunked or compressed body) or what belongs to one connection.
const HOP = new Set(["connection", "content-encoding", "content-length", "keep-alive", "transfer-encoding"]);

/** One fault a `FaultProxy` answers instead of forwarding, to the first request it matches (then never again). */
export interface Fault {
  matches: (method: string, path: string, body: string) => boolean;
  status: number;
  error: string;
  detail: string;
  headers?: Record<string, string>;
}

/** A proxy in front of the real API: each request is forwarded as it is, except that each fault answers the first
 * request it matches (nothing reaches the API then); `answered` lists what it answered instead, in order. */
export class FaultProxy {
  readonly answered: string[] = [];
  readonly #pending: Fault[];
  readonly #server = createServer((req, res) => void this.#handle(req, res).catch(() => res.destroy()));

  private constructor(faults: Fault[]) {
    this.#pending = [...faults];
  }

  static async start(faults: Fault[]): Promise<FaultProxy> {
    const proxy = new FaultProxy(faults);
    await new Promise<void>((resolve) => proxy.#server.listen(0, "127.0.0.1", resolve));
    return proxy;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  close(): Promise<void> {
    this.#server.closeAllConnections();
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    const method = req.method ?? "GET";
    const path = new URL(req.url ?? "/", this.url).pathname;
    const at = this.#pending.findIndex((fault) => fault.matches(method, path, body.toString()));
    if (at >= 0) {
      const [fault] = this.#pending.splice(at, 1);
      this.answered.push(`${fault!.status} ${method} ${path}`);
      res.writeHead(fault!.status, { "content-type": "application/json", ...fault!.headers });
      res.end(JSON.stringify({ error: fault!.error, detail: fault!.detail }));
      return;
    }
    const headers: Record<string, string> = {};
    for (const name of ["authorization", "content-type", "accept", "idempotency-key", "last-event-id"]) {
      const value = req.headers[name];
      if (typeof value === "string") headers[name] = value;
    }
    const init: RequestInit = { method, headers };
    if (body.length) init.body = body;
    const answer = await fetch(BASE_URL + (req.url ?? "/"), init);
    const passed = [...answer.headers].filter(([name]) => !HOP.has(name));
    res.writeHead(answer.status, Object.fromEntries(passed));
    res.end(Buffer.from(await answer.arrayBuffer()));
  }
}
