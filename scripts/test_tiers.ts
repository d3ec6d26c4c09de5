/**
 * The test tiers, by cost (as node-llama-cpp splits its standalone and model-dependent tests):
 *
 * - `unit`: needs no generated model, starts no Synapse and spawns no process — the pure rules
 *   (identity, scheduler policies, frames, stores on a temp SQLite file, grammars). Runs after
 *   `scripts/setup --unit` (the pinned Deno and the npm packages only), in about a minute.
 * - `instance`: boots a Synapse in this process, or loads an engine, on the generated test models.
 * - `process`: spawns processes — `ck-synapse` (the CLI, `serve`), llama workers, a stand-in subc
 *   daemon.
 *
 * A test file's tier is read from its text and the test-local modules it imports (`tests/**`
 * files other than `tests/_helpers.ts`, which every tier uses for its small functions), first
 * match from the top: a process spawn (`new Deno.Command(`, the CLI launcher helper) is
 * `process`; a Synapse, an engine or a generated model (`startSynapse`, `createSynapse`,
 * `MODELS`, `MINILM`, `fixtures/`, `serveHttp`, `OrtEngine`, `LlamaEngine`) is `instance`;
 * anything else is `unit`. `tests/test_tiers_test.ts` checks that every test file has one tier.
 *
 *   deno run --allow-read scripts/test_tiers.ts [unit|instance|process]
 *
 * prints the test files of the tier (all files with their tier, without an argument), one per
 * line, sorted; `scripts/test --tier T` runs them.
 *
 * @module
 */
import { fileURLToPath } from "node:url";

/** A test tier, cheapest first. */
export type Tier = "unit" | "instance" | "process";

/** The tiers, cheapest first. */
export const TIERS: readonly Tier[] = ["unit", "instance", "process"];

const ROOT = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");
const TESTS = `${ROOT}/tests`;

const PROCESS_RE = /\bnew Deno\.Command\(|_launcher\.ts"/;
const INSTANCE_RE =
  /\b(startSynapse|createSynapse|MODELS|MINILM|serveHttp|OrtEngine|LlamaEngine)\b|fixtures\//;

/**
 * Every test file under `tests/` (`*_test.ts`), as paths relative to the repository root, sorted.
 */
export async function testFiles(): Promise<string[]> {
  const out: string[] = [];
  const walk = async (dir: string): Promise<void> => {
    for await (const e of Deno.readDir(dir)) {
      const p = `${dir}/${e.name}`;
      if (e.isDirectory) await walk(p);
      else if (e.name.endsWith("_test.ts")) out.push(p.slice(ROOT.length + 1));
    }
  };
  await walk(TESTS);
  return out.sort();
}

/**
 * The tier of one test file ({@link Tier}; the rules are the module's).
 *
 * @param file A path relative to the repository root (`tests/sched/quantum_test.ts`).
 * @param texts Cache of file texts (absolute path → text), shared across calls.
 */
export async function tierOf(file: string, texts: Map<string, string> = new Map()): Promise<Tier> {
  const seen = new Set<string>();
  let tier: Tier = "unit";
  const visit = async (abs: string): Promise<void> => {
    if (seen.has(abs)) return;
    seen.add(abs);
    let text = texts.get(abs);
    if (text === undefined) {
      text = await Deno.readTextFile(abs);
      texts.set(abs, text);
    }
    if (PROCESS_RE.test(text)) tier = "process";
    else if (tier === "unit" && INSTANCE_RE.test(text)) tier = "instance";
    for (const m of text.matchAll(/^(?:import|export)[^;]*?from "(\.[^"]+)"/gms)) {
      const target = new URL(m[1]!, `file://${abs}`).pathname;
      if (!target.startsWith(`${TESTS}/`) || target === `${TESTS}/_helpers.ts`) continue;
      await visit(target);
    }
  };
  await visit(`${ROOT}/${file}`);
  return tier;
}

if (import.meta.main) {
  const want = Deno.args[0];
  if (want !== undefined && !TIERS.includes(want as Tier)) {
    console.error(`test_tiers: unknown tier '${want}' (tiers: ${TIERS.join(", ")})`);
    Deno.exit(2);
  }
  const texts = new Map<string, string>();
  for (const file of await testFiles()) {
    const tier = await tierOf(file, texts);
    if (want === undefined) console.log(`${tier}\t${file}`);
    else if (tier === want) console.log(file);
  }
}
