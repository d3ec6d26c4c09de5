/**
 * CANCEL against a real llama worker (F19): a long GENERATE stops at the token where CANCEL is
 * read and answers TEXT `cancelled` with the tokens so far; an EMBED_BATCH stops between items
 * with ERR `cancelled`; the connection serves the next request at once. The worker's
 * `--test-wait-cancel-after N` hook holds the request after N tokens (items) until the CANCEL is
 * read, so every step waits on an event, never on elapsed time.
 */
import assert from "node:assert/strict";
import { WorkerConnection, WorkerErrReply } from "../../lib/workers/host.ts";
import { encodeI32LE } from "../../lib/workers/codec.ts";
import type { LoadedMessage, TextMessage, VectorsMessage } from "../../lib/workers/messages.ts";
import { SupervisedWorker } from "../../lib/workers/supervisor.ts";
import {
  assertGone,
  logLine,
  rejection,
  runtimeDir,
  TINY_LLAMA_GGUF,
  workerOptions,
} from "./_worker_helpers.ts";

const PROMPT = encodeI32LE(Int32Array.of(1, 10, 20, 30, 40));

async function load(
  conn: WorkerConnection,
  reqId: number,
  mode: "generate" | "embed",
): Promise<string> {
  const r = await conn.request<LoadedMessage>(
    {
      type: "LOAD",
      req_id: reqId,
      artifact_path: TINY_LLAMA_GGUF,
      artifact_digest: "sha256:test",
      format: "gguf",
      runtime_config: { mode, context_size: 1024, threads: 1 },
    },
    undefined,
    120_000,
  );
  return r.msg.model_ref;
}

function generate(
  conn: WorkerConnection,
  reqId: number,
  modelRef: string,
  maxTokens: number,
): Promise<TextMessage> {
  return conn.request<TextMessage>(
    { type: "GENERATE", req_id: reqId, model_ref: modelRef, max_tokens: maxTokens },
    PROMPT,
    120_000,
  ).then((r) => r.msg);
}

Deno.test("WorkerConnection.cancel() stops a GENERATE of 400 tokens after its first tokens; the next request is served", async () => {
  await using dir = await runtimeDir();
  const held = logLine(/waiting for CANCEL after 3 tokens/);
  const conn = await WorkerConnection.start(
    workerOptions(dir.path, ["--test-wait-cancel-after", "3"], { onLogLine: held.onLogLine }),
  );
  try {
    const ref = await load(conn, 1, "generate");
    const long = generate(conn, 2, ref, 400);
    // The worker holds the GENERATE after 3 tokens (the hook): CANCEL reaches it mid-generation.
    const first = await Promise.race([held.seen.then(() => "held"), long.then(() => "answered")]);
    assert.equal(first, "held", "the GENERATE was still generating");
    // A request queued behind the one in flight and cancelled before it is sent: never sent.
    const queued = generate(conn, 3, ref, 400);
    await conn.cancel(3);
    await conn.cancel(2);
    const text = await long;
    assert.equal(text.req_id, 2);
    assert.equal(text.finish_reason, "cancelled");
    assert.equal(text.n_gen, 3, "the tokens generated before the CANCEL");
    assert.equal(text.generated_token_ids?.length, 3);
    assert.ok(text.n_gen < 400, "fewer tokens than asked");
    const none = await queued;
    assert.deepEqual(none, {
      type: "TEXT",
      req_id: 3,
      text: "",
      n_prompt: 5,
      n_gen: 0,
      finish_reason: "cancelled",
      generated_token_ids: [],
    });
    // The slot is free: the same connection answers a GENERATE in full, and greedy decoding of
    // the same prompt starts with the same tokens the cancelled one had.
    const full = await generate(conn, 4, ref, 8);
    assert.equal(full.finish_reason, "max_tokens");
    assert.equal(full.n_gen, 8);
    assert.deepEqual(full.generated_token_ids?.slice(0, 3), text.generated_token_ids);
    // A CANCEL for a request that is over (or never was) is ignored.
    await conn.cancel(2);
    await conn.cancel(99);
    const again = await generate(conn, 5, ref, 8);
    assert.deepEqual(again.generated_token_ids, full.generated_token_ids);
    assert.equal(conn.dead, undefined);
  } finally {
    await conn.shutdown();
  }
  assert.equal(conn.exitStatus?.success, true);
  assertGone(conn.pid);
});

Deno.test("WorkerConnection.cancel() stops an EMBED_BATCH between items with ERR cancelled", async () => {
  await using dir = await runtimeDir();
  const held = logLine(/waiting for CANCEL after 1 items/);
  const conn = await WorkerConnection.start(
    workerOptions(dir.path, ["--test-wait-cancel-after", "1"], { onLogLine: held.onLogLine }),
  );
  try {
    const ref = await load(conn, 1, "embed");
    const batch = (reqId: number) =>
      conn.request<VectorsMessage>(
        {
          type: "EMBED_BATCH",
          req_id: reqId,
          model_ref: ref,
          pooling: "last",
          normalize: true,
          items: [{ id: "a", n_tokens: 3 }, { id: "b", n_tokens: 2 }],
        },
        PROMPT,
        120_000,
      );
    const first = batch(2);
    await held.seen;
    await conn.cancel(2);
    const err = await rejection(first);
    assert.ok(err instanceof WorkerErrReply, `expected WorkerErrReply, got ${err}`);
    assert.equal(err.workerCode, "cancelled");
    assert.match(err.message, /after 1 of 2 items/);
    const next = await batch(3);
    assert.equal(next.msg.n, 2, "the next batch is served in full");
    assert.equal(next.tensor?.length, 2 * next.msg.dims);
  } finally {
    await conn.shutdown();
  }
});

Deno.test("SupervisedWorker.cancel() reaches the live worker and does nothing without one", async () => {
  await using dir = await runtimeDir();
  const held = logLine(/waiting for CANCEL after 2 tokens/);
  const sw = new SupervisedWorker({
    key: "k",
    start: workerOptions(dir.path, ["--test-wait-cancel-after", "2"], {
      onLogLine: held.onLogLine,
    }),
  });
  try {
    await sw.cancel(1); // no worker yet: nothing to do, no worker started
    assert.equal(sw.status().state, "idle");
    const conn = await sw.connection();
    const ref = await load(conn, 1, "generate");
    const long = sw.call<TextMessage>(
      { type: "GENERATE", req_id: 2, model_ref: ref, max_tokens: 400 },
      PROMPT,
      120_000,
    );
    await held.seen;
    await sw.cancel(2);
    const text = (await long).msg;
    assert.equal(text.finish_reason, "cancelled");
    assert.equal(text.n_gen, 2);
  } finally {
    await sw.close();
  }
  await sw.cancel(2); // closed: ignored
});
