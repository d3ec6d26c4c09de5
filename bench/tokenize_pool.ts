/**
 * What a tokenizer call costs the calling thread, inline against the worker pool, by batch
 * size: the numbers behind `TokenizerPoolOptions.inlineMaxChars`.
 *
 *   deno task bench:tokenize-pool [--quick]
 *
 * For 64-item batches of real text (bench/corpus.ts) whose total length is about N UTF-16 code
 * units, prints per call:
 *   inline     ms of `encodeMany` on the calling thread (all of it blocks the event loop)
 *   pool-sync  ms the calling thread spends handing the batch over (planning, posting)
 *   pool-recv  ms to read the answer back (a structured clone of the outcomes, an upper bound
 *              of what receiving the message costs)
 *   pool-rtt   ms from call to answer (latency, not calling-thread time)
 *
 * @module
 */
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { buildCorpus } from "./corpus.ts";
import { SanitizedTokenizer } from "../lib/tokenize/tokenizer.ts";
import { TokenizerPool } from "../lib/tokenize/tokenizer_pool.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");
const { values: args } = parseArgs({
  args: Deno.args,
  options: { quick: { type: "boolean", default: false } },
  strict: true,
});
const runs = args.quick ? 30 : 200;

const corpus = await buildCorpus({ root: ROOT, size: 2000 });
const words = corpus.join(" ").split(/\s+/);

function batch(totalChars: number, seed: number): string[] {
  const per = Math.max(1, Math.floor(totalChars / 64));
  const out: string[] = [];
  let w = seed * 977;
  for (let i = 0; i < 64; i++) {
    let s = "";
    while (s.length < per) s += (s ? " " : "") + words[w++ % words.length];
    out.push(s.slice(0, per));
  }
  return out;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

for (const model of ["minilm-shaped", "llama-135m-shaped"]) {
  const tok = await SanitizedTokenizer.fromFile(`${ROOT}/fixtures/bench/${model}/tokenizer.json`);
  await using pool = new TokenizerPool({ size: 1, inlineMaxChars: 0 });
  await pool.warm(tok);
  console.log(`\n${model} (64 items per call, median of ${runs})`);
  console.log("  chars   inline  pool-sync  pool-recv   pool-rtt   (ms)");
  for (const chars of [64, 128, 256, 512, 1024, 2048, 8192, 32768]) {
    const opts = { maxTokens: 512, truncate: true };
    const batches = Array.from({ length: runs }, (_, r) => batch(chars, r));
    // Separate loops, so one path's garbage is not collected during the other's timing.
    const inline: number[] = [], sync: number[] = [], recv: number[] = [], rtt: number[] = [];
    for (const texts of batches) {
      const t0 = performance.now();
      tok.encodeMany(texts, opts);
      inline.push(performance.now() - t0);
    }
    for (const texts of batches) {
      const t0 = performance.now();
      const p = pool.encodeItems(tok, texts, opts);
      sync.push(performance.now() - t0);
      const out = await p;
      rtt.push(performance.now() - t0);
      const t1 = performance.now();
      structuredClone(out.map((o) => o.ok ? { ...o.seq } : o));
      recv.push(performance.now() - t1);
    }
    console.log(
      `  ${String(chars).padStart(5)} ${median(inline).toFixed(3).padStart(8)} ${
        median(sync).toFixed(3).padStart(10)
      } ${median(recv).toFixed(3).padStart(10)} ${median(rtt).toFixed(3).padStart(10)}`,
    );
  }
}
