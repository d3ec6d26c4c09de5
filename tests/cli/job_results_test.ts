/**
 * The CLI's job helpers without a process: the items file parser, the progress line, and
 * followJob() against a fake client whose job commits pages over time.
 */
import assert from "node:assert/strict";
import { UsageError } from "../../lib/cli/_command.ts";
import { parseItemsJsonl } from "../../lib/cli/_items_jsonl.ts";
import { followJob, readCommittedPages, resultRecords } from "../../lib/cli/_job_results.ts";
import type { ResultPage } from "../../lib/cli/_job_results.ts";
import { formatDuration, formatProgress } from "../../lib/cli/_progress.ts";
import type { ClientOutcome, SynapseClient } from "../../lib/cli/client.ts";

Deno.test("parseItemsJsonl() reads objects and bare strings, skipping blank lines", () => {
  const items = parseItemsJsonl('{"id":"a","text":"x"}\n\n"y"\r\n{"id":7,"text":"z"}\n', "f");
  assert.deepEqual(items, [
    { id: "a", text: "x", line: 1 },
    { id: "1", text: "y", line: 3 },
    { id: "7", text: "z", line: 4 },
  ]);
});

Deno.test("parseItemsJsonl() names the line of a bad item", () => {
  const cases: [string, RegExp][] = [
    ['"ok"\n{bad\n', /f line 2: not JSON/],
    ["[1]\n", /f line 1: give \{"id"/],
    ['{"id":"a","text":"x","lang":"en"}\n', /f line 1: unknown field 'lang'/],
    ['{"id":1.5,"text":"x"}\n', /f line 1: field 'id'/],
    ['{"id":"a"}\n', /f line 1: field 'text'/],
    ['{"id":"a","text":"x"}\n{"id":"a","text":"y"}\n', /f line 2: id 'a' already used on line 1/],
    ["\n\n", /holds no items/],
  ];
  for (const [text, re] of cases) {
    assert.throws(
      () => parseItemsJsonl(text, "f"),
      (e) => e instanceof UsageError && re.test(e.message),
    );
  }
});

Deno.test("formatProgress() shows done/total, percent, rate and ETA", () => {
  assert.equal(
    formatProgress({ done: 50, total: 200, rate: 25 }, 10),
    "[###.......]  50/200 items  25%  25.0 items/s  ETA 6s",
  );
  assert.equal(formatProgress({ done: 0, total: 10 }, 0), "0/10 items  0%  -- items/s  ETA --");
  assert.equal(formatDuration(184), "3m04s");
  assert.equal(formatDuration(3720), "1h02m");
});

Deno.test("resultRecords() writes vectors with tokens and truncation, then refused items", () => {
  const records = resultRecords({
    vectors: [{ id: "a", vector: [1, 0], content_sha256: "c", submitted_sha256: "s" }],
    real_token_counts: [3],
    truncation_disclosures: [{
      submitted_tokens: 9,
      effective_tokens: 3,
      truncated: true,
      kept_chars: 5,
    }],
    item_errors: [{
      id: "b",
      index: 1,
      error: {
        code: "invalid_request",
        class: "permanent",
        safe_to_retry_same_request: false,
        message: "empty",
      },
    }],
  });
  assert.deepEqual(records.map((r) => r.line), [
    {
      id: "a",
      vector: [1, 0],
      content_sha256: "c",
      submitted_sha256: "s",
      tokens: 3,
      truncated: true,
      kept_chars: 5,
    },
    { id: "b", error: { code: "invalid_request", message: "empty" } },
  ]);
});

/** A job of `pages` one-item pages; each call commits one more page every `every` calls. */
class FakeJobClient implements SynapseClient {
  calls: number[] = [];
  #n = 0;
  constructor(readonly pages: number, readonly every = 2) {}

  committed(): number {
    return Math.min(this.pages, Math.floor(this.#n / this.every));
  }

  call(_method: string, params: unknown): Promise<ClientOutcome> {
    this.#n++;
    const { page = 0 } = params as { page?: number };
    this.calls.push(page);
    const count = this.committed();
    const state = count === this.pages ? "done" : "running";
    if (page >= count && !(page === 0 && count === 0)) {
      const error = {
        code: "invalid_request",
        message: "not committed",
        details: { field: "page", page, pages_available: count, state },
      };
      return Promise.resolve({
        kind: "semantic",
        body: { result: { module_generation: 1, error } },
      });
    }
    const real = page < count;
    const result: Partial<ResultPage> = {
      job_id: "job_1",
      state,
      page_count: count,
      pages_available: count,
      page,
      items_total: this.pages,
      items_done: count,
      vectors: real
        ? [{ id: `i${page}`, vector: [page], content_sha256: "c", submitted_sha256: "s" }]
        : [],
      real_token_counts: real ? [1] : [],
      truncation_disclosures: real
        ? [{ submitted_tokens: 1, effective_tokens: 1, truncated: false }]
        : [],
    };
    return Promise.resolve({ kind: "result", body: { result } });
  }

  close(): Promise<void> {
    return Promise.resolve();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

Deno.test("followJob() hands over every page once, in order, and ends when the job is done", async () => {
  const client = new FakeJobClient(5);
  const seen: number[] = [];
  const out = await followJob(
    client,
    { job_id: "job_1", state: "queued", items_total: 5, pages_available: 0 },
    { intervalMs: 0, statusEveryMs: 0, onPage: (p) => seen.push(p.page) },
  );
  assert.equal(out.kind, "ended");
  assert.deepEqual(seen, [0, 1, 2, 3, 4]);
  assert.equal(out.status.state, "done");
  assert.equal(out.status.itemsDone, 5);

  const all: string[] = [];
  const read = await readCommittedPages(client, "job_1", (p) => {
    all.push(...resultRecords(p).map((r) => r.id));
  });
  assert.equal(read.kind, "status");
  assert.deepEqual(all, ["i0", "i1", "i2", "i3", "i4"]);
});

Deno.test("followJob() stops at once when its signal aborts", async () => {
  const client = new FakeJobClient(100, 1000);
  const stop = new AbortController();
  const following = followJob(
    client,
    { job_id: "job_1", state: "queued", items_total: 100, pages_available: 0 },
    { intervalMs: 10_000, signal: stop.signal, onPage: () => {} },
  );
  await new Promise((r) => setTimeout(r, 20));
  stop.abort();
  const out = await following;
  assert.equal(out.kind, "interrupted");
  assert.equal(out.status.jobId, "job_1");
});
