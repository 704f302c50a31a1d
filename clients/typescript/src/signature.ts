/** Standard Webhooks signatures (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64>`), with
 * Web Crypto only, so the same code runs in Node and in fetch-style runtimes. */

/** Raised when a request's signature does not verify (or its timestamp is out of tolerance). */
export class WebhookVerificationError extends Error {
  override name = "WebhookVerificationError";
}

export interface SignedHeaders {
  id: string | null;
  timestamp: string | null;
  signature: string | null;
}

const encoder = new TextEncoder();

/** `v1,` + base64 HMAC-SHA256 of `id.timestamp.body`, keyed with the bytes of the `whsec_` secret. */
export async function sign(secret: string, id: string, timestamp: number, body: string | Uint8Array): Promise<string> {
  const key = await hmacKey(secret);
  const digest = await crypto.subtle.sign("HMAC", key, signedContent(id, String(timestamp), body));
  return `v1,${toBase64(new Uint8Array(digest))}`;
}

/** Verify a request's signature against one secret or several (a rotation's overlap); any `v1` signature of
 * the space-separated list may match. Throws `WebhookVerificationError`. */
export async function verify(
  secrets: string | string[],
  headers: SignedHeaders,
  body: string | Uint8Array,
  options: { toleranceS?: number; now?: number } = {},
): Promise<void> {
  const { id, timestamp, signature } = headers;
  if (!id || !timestamp || !signature) throw new WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature");
  if (!/^\d{1,15}$/.test(timestamp)) throw new WebhookVerificationError("webhook-timestamp is not a number of seconds");
  const now = options.now ?? Math.floor(Date.now() / 1000);
  const tolerance = options.toleranceS ?? 300;
  if (Math.abs(now - Number(timestamp)) > tolerance) throw new WebhookVerificationError("webhook-timestamp is outside the tolerance");
  const content = signedContent(id, timestamp, body);
  const offered = signature
    .split(" ")
    .filter((part) => part.startsWith("v1,"))
    .map((part) => fromBase64(part.slice(3)))
    .filter((bytes): bytes is Uint8Array => bytes !== null);
  for (const secret of Array.isArray(secrets) ? secrets : [secrets]) {
    const key = await hmacKey(secret);
    for (const candidate of offered) {
      // subtle.verify compares in constant time
      if (await crypto.subtle.verify("HMAC", key, candidate, content)) return;
    }
  }
  throw new WebhookVerificationError("no signature matches");
}

type HmacKey = Awaited<ReturnType<typeof crypto.subtle.importKey>>;

async function hmacKey(secret: string): Promise<HmacKey> {
  const raw = fromBase64(secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret);
  if (!raw || raw.length === 0) throw new Error("a webhook secret is `whsec_` + base64");
  return crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["sign", "verify"]);
}

function signedContent(id: string, timestamp: string, body: string | Uint8Array): Uint8Array {
  const head = encoder.encode(`${id}.${timestamp}.`);
  const tail = typeof body === "string" ? encoder.encode(body) : body;
  const content = new Uint8Array(head.length + tail.length);
  content.set(head);
  content.set(tail, head.length);
  return content;
}

function toBase64(bytes: Uint8Array): string {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

function fromBase64(text: string): Uint8Array | null {
  try {
    return Uint8Array.from(atob(text), (char) => char.charCodeAt(0));
  } catch {
    return null;
  }
}
