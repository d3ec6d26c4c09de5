/**
 * What the model cache's safety costs a download: `ModelCache.download` (streamed SHA-256 while
 * writing, size and digest verified, fsync, atomic rename, meta file, format validation) against
 * a plain `fetch` piped to a file, both from the same loopback HTTP server in the same run, and
 * `importFile` (a local copy, hashed) against `Deno.copyFile`. Also a resumed download: the first
 * half is on disk, the rest comes with `Range`. And what verification on load costs (F28):
 * `verifyBlob` of a cached blob by a fresh cache (a new boot: the blob is hashed) beside a raw
 * streamed SHA-256 of the same file, in MiB/s and seconds per GB.
 *
 *   deno task bench:download [--mib N] [--runs N]
 *
 * Prints per variant the median MiB/s over the runs and its ratio to the raw baseline of the same
 * run (the number to compare across machines). The body is random bytes: the cache sniffs
 * `other` and validates nothing format-specific, so the ratio is the cost of hashing, fsync and
 * the bookkeeping.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { createHash } from "node:crypto";
import { ModelCache } from "../lib/cache/model_cache.ts";

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    mib: { type: "string", default: "256" },
    runs: { type: "string", default: "5" },
  },
  strict: true,
});
const size = Number(args.mib) * 1024 * 1024;
const runs = Number(args.runs);

const body = new Uint8Array(size);
for (let o = 0; o < size; o += 65536) crypto.getRandomValues(body.subarray(o, o + 65536));
const digest = `sha256:${createHash("sha256").update(body).digest("hex")}` as const;

const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
  const range = req.headers.get("range")?.match(/^bytes=(\d+)-$/);
  if (range) {
    const from = Number(range[1]);
    return new Response(body.subarray(from), {
      status: 206,
      headers: { "content-range": `bytes ${from}-${size - 1}/${size}` },
    });
  }
  return new Response(body);
});
const url = `http://127.0.0.1:${server.addr.port}/blob.bin`;
const work = await Deno.makeTempDir({ prefix: "synapse-bench-download-" });
const source = `${work}/source.bin`;
await Deno.writeFile(source, body);

async function timed(fn: () => Promise<void>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

const results: Record<string, number[]> = {
  "raw fetch → file": [],
  "cache.download": [],
  "cache.download (resume half)": [],
  "raw copyFile": [],
  "cache.importFile": [],
  "raw sha256 (file)": [],
  "verify on load": [],
};

/** A streamed SHA-256 of a file: the floor of any verification. */
async function rawSha256(path: string): Promise<void> {
  const hash = createHash("sha256");
  using f = await Deno.open(path, { read: true });
  const buf = new Uint8Array(8 * 1024 * 1024);
  for (let n = await f.read(buf); n !== null; n = await f.read(buf)) {
    hash.update(buf.subarray(0, n));
  }
  hash.digest("hex");
}

for (let r = 0; r < runs; r++) {
  const root = `${work}/cache-${r}`;
  results["raw fetch → file"]!.push(
    await timed(async () => {
      const res = await fetch(url);
      using f = await Deno.open(`${work}/raw-${r}.bin`, { create: true, write: true });
      await res.body!.pipeTo(f.writable, { preventClose: true });
    }),
  );
  results["cache.download"]!.push(
    await timed(async () => {
      await new ModelCache({ root }).download(url, { sha256: digest, size });
    }),
  );
  // A resume: the first half as a partial left by an interrupted download.
  const root2 = `${work}/cache-resume-${r}`;
  const c2 = new ModelCache({ root: root2 });
  await Deno.mkdir(`${root2}/tmp`, { recursive: true });
  await Deno.writeFile(`${root2}/tmp/${digest.slice(7)}.partial`, body.subarray(0, size >> 1));
  results["cache.download (resume half)"]!.push(
    await timed(async () => {
      await c2.download(url, { sha256: digest, size });
    }),
  );
  results["raw copyFile"]!.push(
    await timed(async () => {
      await Deno.copyFile(source, `${work}/copy-${r}.bin`);
    }),
  );
  results["cache.importFile"]!.push(
    await timed(async () => {
      await new ModelCache({ root: `${work}/cache-import-${r}` }).importFile(source);
    }),
  );
  // Verification on load: a fresh cache (a new boot) over the blob just downloaded.
  const blob = new ModelCache({ root }).blobPath(digest);
  results["raw sha256 (file)"]!.push(await timed(() => rawSha256(blob)));
  results["verify on load"]!.push(
    await timed(async () => {
      const check = await new ModelCache({ root }).verifyBlob(digest);
      if (!check.hashed) throw new Error("a fresh cache must hash the blob");
    }),
  );
  for (const p of [root, root2, `${work}/cache-import-${r}`]) {
    await Deno.remove(p, { recursive: true });
  }
  for (const p of [`${work}/raw-${r}.bin`, `${work}/copy-${r}.bin`]) await Deno.remove(p);
}

await server.shutdown();
await Deno.remove(work, { recursive: true });

const mibs = (ms: number) => (size / 1024 / 1024) / (ms / 1000);
const base = {
  fetch: median(results["raw fetch → file"]!),
  copy: median(results["raw copyFile"]!),
};
console.log(`download bench: ${args.mib} MiB body, ${runs} runs, loopback HTTP, medians`);
console.log(
  "variant                        MiB/s   s/GB    ×raw (time ratio, lower is better)",
);
const hashBase = median(results["raw sha256 (file)"]!);
for (const [name, ms] of Object.entries(results)) {
  const m = median(ms);
  const raw = name.includes("copy") || name.includes("import")
    ? base.copy
    : name.includes("sha256") || name.includes("verify")
    ? hashBase
    : base.fetch;
  const sPerGb = (m / 1000) / (size / 1e9);
  console.log(
    `${name.padEnd(30)} ${mibs(m).toFixed(0).padStart(6)}  ${sPerGb.toFixed(2).padStart(5)}    ${
      (m / raw).toFixed(2)
    }`,
  );
}
