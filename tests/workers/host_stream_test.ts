/**
 * TEXT_PART against a real llama worker: a GENERATE sent with `stream: true` gets one TEXT_PART
 * per generated token, routed to the request's `onPart` while it runs (never answering it), and
 * its TEXT still holds every id; a TEXT_PART for another req_id is ignored and logged at debug.
 * The worker's `--test-wait-cancel-after N` hook holds the generation, so "while it runs" is an
 * event, never a time.
 */
import assert from "node:assert/strict";
import { WorkerConnection } from "../../lib/workers/host.ts";
import { encodeI32LE } from "../../lib/workers/codec.ts";
import type { LoadedMessage, TextMessage, TextPartMessage } from "../../lib/workers/messages.ts";
import type { LogSink } from "../../lib/log/log.ts";
import {
  assertGone,
  logLine,
  runtimeDir,
  TINY_LLAMA_GGUF,
  workerOptions,
} from "./_worker_helpers.ts";

const PROMPT = encodeI32LE(Int32Array.of(1, 10, 20, 30, 40));

async function load(conn: WorkerConnection): Promise<string> {
  const r = await conn.request<LoadedMessage>(
    {
      type: "LOAD",
      req_id: 1,
      artifact_path: TINY_LLAMA_GGUF,
      artifact_digest: "sha256:test",
      format: "gguf",
      runtime_config: { mode: "generate", context_size: 1024, threads: 1 },
    },
    undefined,
    120_000,
  );
  return r.msg.model_ref;
}

Deno.test("a streamed GENERATE: TEXT_PARTs reach onPart while it runs, then TEXT answers; a stray TEXT_PART is ignored", async () => {
  await using dir = await runtimeDir();
  const held = logLine(/waiting for CANCEL after 3 tokens/);
  const debug: { message: string; fields: Record<string, unknown> }[] = [];
  const log: LogSink = (level, _target, message, fields) => {
    if (level === "debug") debug.push({ message, fields: { ...fields } });
  };
  const conn = await WorkerConnection.start(
    workerOptions(dir.path, ["--test-wait-cancel-after", "3", "--test-stray-part"], {
      onLogLine: held.onLogLine,
      log,
    }),
  );
  try {
    const ref = await load(conn);
    // Unstreamed first: the same greedy ids, no parts.
    const plain = await conn.request<TextMessage>(
      { type: "GENERATE", req_id: 2, model_ref: ref, max_tokens: 3 },
      PROMPT,
      120_000,
      () => assert.fail("a GENERATE without stream gets no TEXT_PART"),
    );
    assert.equal(plain.msg.n_gen, 3);

    const parts: TextPartMessage[] = [];
    let answered = false;
    const streamed = conn.request<TextMessage>(
      { type: "GENERATE", req_id: 3, model_ref: ref, max_tokens: 400, stream: true },
      PROMPT,
      120_000,
      (part) => parts.push(part),
    );
    void streamed.then(() => answered = true, () => answered = true);
    await held.seen;
    // Held after 3 tokens: their parts came in, the request is not answered.
    while (parts.length < 3) await new Promise((r) => setTimeout(r, 5));
    assert.equal(answered, false);
    assert.deepEqual(parts.map((p) => p.req_id), [3, 3, 3]);
    assert.deepEqual(parts.flatMap((p) => p.token_ids), plain.msg.generated_token_ids);
    await conn.cancel(3);
    const text = (await streamed).msg;
    assert.equal(text.finish_reason, "cancelled");
    assert.deepEqual(text.generated_token_ids, plain.msg.generated_token_ids);
    assert.equal(parts.length, 3, "one part per token, none after the answer");
    // The part the worker sent for req_id 1000003 went nowhere but the debug log.
    const stray = debug.filter((d) => d.message.includes("TEXT_PART for no pending request"));
    assert.equal(stray.length, 1);
    assert.equal(stray[0]!.fields.req_id, 1_000_003);
    assert.equal(stray[0]!.fields.pending_req_id, 3);
    // The connection serves on.
    const again = await conn.request<TextMessage>(
      { type: "GENERATE", req_id: 4, model_ref: ref, max_tokens: 2, stream: true },
      PROMPT,
      120_000,
    );
    assert.equal(again.msg.n_gen, 2);
    assert.equal(conn.dead, undefined);
  } finally {
    await conn.shutdown();
  }
  assertGone(conn.pid);
});
