/**
 * `ck-synapse embed --file` and `ck-synapse job status|pages` through the real launcher, with a
 * config that turns a batch of more than 8 items into a durable job with small result pages.
 */
import assert from "node:assert/strict";
import { cliIn, isolatedEnv, serve } from "./_launcher.ts";
import type { Home } from "./_launcher.ts";

const JOB_CONFIG = {
  SYNAPSE_CONFIG_JSON: '{"inline":{"max_items":8},"jobs":{"result_page_bytes":4096}}',
};

async function withHome(fn: (home: Home) => Promise<void>): Promise<void> {
  const home = await isolatedEnv(JOB_CONFIG);
  try {
    await fn(home);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
}

function docs(n: number): string {
  return Array.from({ length: n }, (_, i) => JSON.stringify({ id: `doc-${i}`, text: `doc ${i}` }))
    .join("\n") + "\n";
}

// deno-lint-ignore no-explicit-any
function jsonl(text: string): any[] {
  return text.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));
}

function jobIdOf(stderr: string): string {
  const id = /job (job_[0-9a-f]+) /.exec(stderr)?.[1];
  assert.ok(id, `no job id in: ${stderr}`);
  return id;
}

Deno.test("embed --file runs a job and writes one line per item in file order; job status/pages read it back", async () => {
  await withHome(async (home) => {
    const file = `${home.dir}/in.jsonl`;
    await Deno.writeTextFile(file, docs(100));
    const out = `${home.dir}/out.jsonl`;
    const r = await cliIn(home, ["embed", "--file", file, "--request-key", "k", "--out", out]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "");
    const id = jobIdOf(r.stderr);
    assert.match(r.stderr, new RegExp(`job ${id} done: 100/100 items .* fingerprint [0-9a-f]{64}`));
    const lines = jsonl(await Deno.readTextFile(out));
    assert.deepEqual(lines.map((l) => l.id), Array.from({ length: 100 }, (_, i) => `doc-${i}`));
    for (const l of lines) {
      assert.deepEqual(
        Object.keys(l).sort(),
        ["content_sha256", "id", "kept_chars", "submitted_sha256", "tokens", "truncated", "vector"],
      );
      assert.equal(l.vector.length, 32);
      assert.equal(l.truncated, false);
      // F26: an uncut item keeps all of its text, so the two hashes agree.
      assert.ok(Number.isInteger(l.kept_chars) && l.kept_chars > 0, JSON.stringify(l));
      assert.equal(l.content_sha256, l.submitted_sha256);
      assert.ok(l.tokens > 0);
    }

    // A later embedded instance in the same data home sees the job in its store (one at a
    // time: embedded instances of one data home take its lease).
    const status = await cliIn(home, ["job", "status", id, "--json"]);
    assert.equal(status.code, 0, status.stderr);
    const s = JSON.parse(status.stdout);
    assert.equal(s.state, "done");
    assert.equal(s.items_done, 100);
    assert.ok(s.page_count > 1, `expected several pages, got ${s.page_count}`);
    const paged = await cliIn(home, ["job", "pages", id]);
    assert.equal(paged.code, 0, paged.stderr);
    const pagedLines = jsonl(paged.stdout);
    assert.equal(pagedLines.length, 100);
    assert.deepEqual(
      new Map(pagedLines.map((l) => [l.id, l.vector])),
      new Map(lines.map((l) => [l.id, l.vector])),
    );
  });
});

Deno.test("embed --file exits 1 with an error line for a refused item, 2 naming a malformed line", async () => {
  await withHome(async (home) => {
    const withEmpty = `${home.dir}/empty.jsonl`;
    await Deno.writeTextFile(
      withEmpty,
      docs(12) + JSON.stringify({ id: "blank", text: "" }) + "\n" + JSON.stringify("bare") + "\n",
    );
    const malformed = `${home.dir}/bad.jsonl`;
    await Deno.writeTextFile(malformed, '{"id":"a","text":"x"}\n\n{"id":"b","text":\n');
    const refused = await cliIn(home, [
      "embed",
      "--file",
      withEmpty,
      "--request-key",
      "e",
      "--no-progress",
    ]);
    assert.equal(refused.code, 1, refused.stderr);
    const lines = jsonl(refused.stdout);
    assert.equal(lines.length, 14);
    const blank = lines.find((l) => l.id === "blank");
    assert.deepEqual(Object.keys(blank).sort(), ["error", "id"]);
    assert.equal(blank.error.code, "invalid_request");
    assert.equal(typeof blank.error.message, "string");
    assert.equal(lines.at(-1).id, "13"); // a bare string's id is its item number
    assert.equal(lines.at(-1).vector.length, 32);
    assert.match(refused.stderr, /1 refused/);
    assert.match(refused.stderr, /error: item blank: invalid_request/);

    const [bad, noKey, stray] = await Promise.all([
      cliIn(home, ["embed", "--file", malformed, "--request-key", "m"]),
      cliIn(home, ["embed", "--file", malformed]),
      cliIn(home, ["embed", "--out", `${home.dir}/o.jsonl`, "x"]),
    ]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /bad\.jsonl line 3: not JSON/);
    assert.equal(noKey.code, 2);
    assert.match(noKey.stderr, /--request-key/);
    assert.equal(stray.code, 2);
    assert.match(stray.stderr, /--out without --file/);
  });
});

Deno.test("serve + embed --file --url + job status/pages --url agree; a re-run attaches", async () => {
  await withHome(async (home) => {
    const file = `${home.dir}/in.jsonl`;
    await Deno.writeTextFile(file, docs(40));
    const server = await serve(home);
    try {
      const url = server.url;
      const out = `${home.dir}/out.jsonl`;
      const args = ["embed", "--file", file, "--request-key", "u", "--url", url, "--out", out];
      const r = await cliIn(home, args);
      assert.equal(r.code, 0, r.stderr);
      const id = jobIdOf(r.stderr);
      const [status, pages, again] = await Promise.all([
        cliIn(home, ["job", "status", id, "--url", url]),
        cliIn(home, ["job", "pages", id, "--url", url, "--out", `${home.dir}/pages.jsonl`]),
        cliIn(home, [...args.slice(0, -1), `${home.dir}/again.jsonl`]),
      ]);
      assert.equal(status.code, 0, status.stderr);
      assert.match(status.stdout, new RegExp(`job +${id}\\n`));
      assert.match(status.stdout, /state +done\n/);
      assert.match(status.stdout, /items +40\/40 done\n/);
      assert.equal(pages.code, 0, pages.stderr);
      assert.equal(again.code, 0, again.stderr);
      assert.match(again.stderr, new RegExp(`job ${id} attached`));

      const embedded = jsonl(await Deno.readTextFile(out));
      const paged = jsonl(await Deno.readTextFile(`${home.dir}/pages.jsonl`));
      assert.deepEqual(embedded.map((l) => l.id), Array.from({ length: 40 }, (_, i) => `doc-${i}`));
      assert.deepEqual(paged.map((l) => l.id).sort(), embedded.map((l) => l.id).sort());
      assert.equal(
        await Deno.readTextFile(`${home.dir}/again.jsonl`),
        await Deno.readTextFile(out),
      );

      const unknown = await cliIn(home, ["job", "status", "job_nope", "--url", url]);
      assert.equal(unknown.code, 1);
      assert.match(unknown.stderr, /unknown job 'job_nope'/);
    } finally {
      const { code, stderr } = await server.stop();
      assert.equal(code, 0, stderr);
    }
  });
});
