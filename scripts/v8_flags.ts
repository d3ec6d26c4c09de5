/**
 * The V8 flags every Synapse process runs with, in the form `--v8-flags=` takes (comma-separated).
 * Field report F37 (300 calls of 8 near-max texts: RSS within 5 % of call 50):
 *
 * - `--max-semi-space-size=2` (MiB): each isolate (main thread, tokenizer workers, ORT workers)
 *   otherwise grew its young generation to 16 MiB semi-spaces and kept them (21–28 % growth);
 * - `--optimize-for-size`: with the bound alone the old generations still grew toward their next
 *   GC limit for ~200 calls (9.8–16.5 % on an AMD EPYC); with it 1.2–4.8 %, at no measurable
 *   cost (bench/README.md, "Repeated near-max batches").
 *
 * The `ck-synapse` launcher (bash) spells the same string; tests/build/v8_flags_test.ts holds the
 * launcher to it. scripts/build.ts compiles it into the single executable and bench/memory.ts
 * runs its children with it.
 */
export const V8_FLAGS = "--max-semi-space-size=2,--optimize-for-size";
