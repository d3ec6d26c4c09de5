/**
 * `ck-synapse generate`'s sampling flags through the real launcher (in-process instance):
 * `--temperature` with `--seed` gives the seeded answer, an unseeded sampled call prints the
 * seed it used on stderr and `--seed` with it replays the text, no `--temperature` stays greedy
 * (no sampling line), and a flag that is not a number (a usage error) or out of range (refused
 * by the op, naming its param) exits 2.
 */
import assert from "node:assert/strict";
import { cli } from "./_launcher.ts";
import { MODELS } from "../_helpers.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;

const ENV = {
  SYNAPSE_CONFIG_JSON: JSON.stringify({
    certification: "warn",
    preload_models: [{
      engine: "llama",
      model_path: GEN,
      tokenizer_path: `${GEN}/tokenizer.json`,
      task: "generate",
      model_id: "gen",
    }],
  }),
};

const BASE = ["generate", "--model", "gen", "--max-tokens", "12"];
const PROMPT = "Once upon a time";

Deno.test("ck-synapse generate samples with --temperature/--seed, prints the seed it used, and it replays", async () => {
  const [seeded, unseeded, greedy, notNumber, outOfRange, greedySeed] = await Promise.all([
    cli([...BASE, "--temperature", "1.2", "--top-p", "0.95", "--seed", "7", "--json", PROMPT], ENV),
    cli([...BASE, "--temperature", "1.2", "--top-k", "40", "--min-p", "0.01", PROMPT], ENV),
    cli([...BASE, PROMPT], ENV),
    cli([...BASE, "--temperature", "warm", PROMPT], ENV),
    cli([...BASE, "--repeat-penalty=-1", PROMPT], ENV),
    cli([...BASE, "--seed", "42", "--top-p", "0.5", PROMPT], ENV),
  ]);
  assert.equal(seeded.code, 0, seeded.stderr);
  const r = JSON.parse(seeded.stdout);
  assert.equal(r.sampling.mode, "sampled");
  assert.equal(r.sampling.seed, 7);
  assert.equal(r.sampling.seed_source, "request");
  assert.equal(r.sampling.top_p, 0.95);
  assert.equal(r.n_gen, 12);

  assert.equal(unseeded.code, 0, unseeded.stderr);
  const m =
    /^sampled +temperature 1\.2 +top_p 1 +top_k 40 +min_p 0\.01 +seed (\d+) \(picked; --seed (\d+) gives the same text\)$/m
      .exec(unseeded.stderr);
  assert.ok(m, unseeded.stderr);
  assert.equal(m[1], m[2]);
  const [replay, again] = await Promise.all([
    cli([
      ...BASE,
      "--temperature",
      "1.2",
      "--top-k",
      "40",
      "--min-p",
      "0.01",
      "--seed",
      m[1]!,
      PROMPT,
    ], ENV),
    cli([...BASE, "--temperature", "1.2", "--top-p", "0.95", "--seed", "7", "--json", PROMPT], ENV),
  ]);
  assert.equal(replay.code, 0, replay.stderr);
  assert.equal(replay.stdout, unseeded.stdout);
  // A sent seed is printed without the "picked" note.
  assert.match(replay.stderr, new RegExp(`^sampled .* seed ${m[1]}$`, "m"));
  assert.equal(JSON.parse(again.stdout).text, r.text);

  assert.equal(greedy.code, 0, greedy.stderr);
  assert.doesNotMatch(greedy.stderr, /sampled/);
  assert.doesNotMatch(greedy.stderr, /no effect/);
  assert.match(greedy.stderr, /finish max_tokens/);
  // Sampler flags without a temperature: greedy, the same text, and said to change nothing.
  assert.equal(greedySeed.code, 0, greedySeed.stderr);
  assert.equal(greedySeed.stdout, greedy.stdout);
  assert.match(
    greedySeed.stderr,
    /^greedy \(no --temperature above 0\): --top-p, --seed had no effect$/m,
  );

  assert.equal(notNumber.code, 2);
  assert.match(notNumber.stderr, /--temperature must be a number: received 'warm'/);
  // The op's own refusal, naming the param (a channel error: exit 2).
  assert.equal(outOfRange.code, 2, outOfRange.stderr);
  assert.match(outOfRange.stderr, /invalid_request: .*field 'repeat_penalty'/);
});
