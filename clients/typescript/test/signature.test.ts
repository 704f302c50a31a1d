// Standard Webhooks signatures: the specification's own example, tampering, a rotation's two signatures,
// and stale or future timestamps.
import assert from "node:assert/strict";
import { test } from "node:test";
import { sign, verify, WebhookVerificationError } from "@parkway/client";

// The example of the Standard Webhooks specification (also what Parkway's tasks/webhook_http.py computes).
const SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const ID = "msg_p5jXN8AQM9LWM0D4loKWxJek";
const TIMESTAMP = 1614265330;
const BODY = '{"test": 2432232314}';
const EXPECTED = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
const OTHER = "whsec_" + Buffer.from("another secret of 24 bytes").toString("base64");

const headers = (signature: string, timestamp = TIMESTAMP) => ({ id: ID, timestamp: String(timestamp), signature });

test("sign: the specification's example signature", async () => {
  assert.equal(await sign(SECRET, ID, TIMESTAMP, BODY), EXPECTED);
});

test("verify: a valid signature passes", async () => {
  await verify(SECRET, headers(EXPECTED), BODY, { now: TIMESTAMP + 10 });
  await verify(SECRET, headers(EXPECTED), new TextEncoder().encode(BODY), { now: TIMESTAMP });
});

test("verify: a tampered body, id, timestamp or signature is refused", async () => {
  const refused = { name: "WebhookVerificationError" };
  await assert.rejects(verify(SECRET, headers(EXPECTED), '{"test": 2432232315}', { now: TIMESTAMP }), refused);
  await assert.rejects(verify(SECRET, { ...headers(EXPECTED), id: "msg_other" }, BODY, { now: TIMESTAMP }), refused);
  await assert.rejects(verify(SECRET, headers(EXPECTED, TIMESTAMP + 1), BODY, { now: TIMESTAMP }), refused);
  const flipped = EXPECTED.slice(0, -3) + (EXPECTED.at(-3) === "A" ? "B" : "A") + EXPECTED.slice(-2);
  await assert.rejects(verify(SECRET, headers(flipped), BODY, { now: TIMESTAMP }), refused);
  await assert.rejects(verify(OTHER, headers(EXPECTED), BODY, { now: TIMESTAMP }), refused);
  await assert.rejects(verify(SECRET, headers("v1,not base64!"), BODY, { now: TIMESTAMP }), refused);
  await assert.rejects(verify(SECRET, { id: ID, timestamp: null, signature: EXPECTED }, BODY, { now: TIMESTAMP }), refused);
});

test("verify: a rotated secret, two signatures: either secret verifies, a third does not", async () => {
  const both = `${await sign(OTHER, ID, TIMESTAMP, BODY)} ${EXPECTED}`;
  await verify(SECRET, headers(both), BODY, { now: TIMESTAMP });
  await verify(OTHER, headers(both), BODY, { now: TIMESTAMP });
  await verify([OTHER, SECRET], headers(EXPECTED), BODY, { now: TIMESTAMP });
  const third = "whsec_" + Buffer.from("a third secret, not sent").toString("base64");
  await assert.rejects(verify(third, headers(both), BODY, { now: TIMESTAMP }), WebhookVerificationError);
  // a signature of another version is not a v1 signature
  await assert.rejects(verify(SECRET, headers(EXPECTED.replace("v1,", "v2,")), BODY, { now: TIMESTAMP }), WebhookVerificationError);
});

test("verify: a stale or future timestamp is refused even with a valid signature", async () => {
  await assert.rejects(verify(SECRET, headers(EXPECTED), BODY, { now: TIMESTAMP + 301 }), /outside the tolerance/);
  await assert.rejects(verify(SECRET, headers(EXPECTED), BODY, { now: TIMESTAMP - 301 }), /outside the tolerance/);
  await verify(SECRET, headers(EXPECTED), BODY, { now: TIMESTAMP + 3600, toleranceS: 3601 });
  // the default clock is now: the example of 2021 is stale
  await assert.rejects(verify(SECRET, headers(EXPECTED), BODY), /outside the tolerance/);
});
