/**
 * A benchmark corpus of real text with a realistic length mix, built deterministically from
 * files on the machine: Debian's licence texts and the READMEs/licences of the pinned npm
 * packages in node_modules. Passage lengths follow a retrieval-chunk mix: 65% short (8–40
 * words), 23% medium (40–120), 12% long (150–380), so batches of 32 in corpus order pad to about
 * four times the useful work.
 *
 * @module
 */
import { mulberry32 } from "../scripts/gen_models.ts";

/** Options of {@link buildCorpus}. */
export interface CorpusOptions {
  /** Passages to build. @default 2000 */
  size?: number;
  /** Repository root (for node_modules). */
  root: string;
  /** PRNG seed. @default 7 */
  seed?: number;
}

async function listFiles(root: string): Promise<string[]> {
  const out: string[] = [];
  try {
    for await (const e of Deno.readDir("/usr/share/common-licenses")) {
      if (e.isFile) out.push(`/usr/share/common-licenses/${e.name}`);
    }
  } catch { /* not Debian */ }
  async function walk(dir: string, depth: number): Promise<void> {
    if (depth > 4) return;
    let entries: Deno.DirEntry[];
    try {
      entries = await Array.fromAsync(Deno.readDir(dir));
    } catch {
      return;
    }
    for (const e of entries) {
      const p = `${dir}/${e.name}`;
      if (e.isDirectory && !e.name.startsWith(".")) await walk(p, depth + 1);
      else if (e.isFile && /^(readme|license|licence)(\.md|\.txt)?$/i.test(e.name)) out.push(p);
    }
  }
  await walk(`${root}/node_modules`, 0);
  return out.sort();
}

/**
 * Builds the corpus.
 *
 * @returns `size` passages, in corpus order (not sorted by length).
 * @throws {Error} when the machine has too little text.
 */
export async function buildCorpus(options: CorpusOptions): Promise<string[]> {
  const size = options.size ?? 2000;
  const rand = mulberry32(options.seed ?? 7);
  const words: string[] = [];
  for (const f of await listFiles(options.root)) {
    let text: string;
    try {
      text = await Deno.readTextFile(f);
    } catch {
      continue;
    }
    // Drop markdown/code noise: links, badges, fences, long non-words.
    text = text
      .replace(/```[\s\S]*?```/g, " ")
      .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
      .replace(/<[^>]+>/g, " ");
    for (const w of text.split(/\s+/)) {
      if (w.length > 0 && w.length < 30 && /[A-Za-z]/.test(w)) words.push(w);
    }
  }
  if (words.length < 50_000) {
    throw new Error(`Cannot build corpus: only ${words.length} words found`);
  }
  const passages: string[] = [];
  let pos = 0;
  for (let i = 0; i < size; i++) {
    const r = rand();
    const n = r < 0.65
      ? 8 + Math.floor(rand() * 32)
      : r < 0.88
      ? 40 + Math.floor(rand() * 80)
      : 150 + Math.floor(rand() * 230);
    if (pos + n > words.length) pos = Math.floor(rand() * (words.length - n));
    passages.push(words.slice(pos, pos + n).join(" "));
    pos += n;
  }
  return passages;
}

/**
 * The near-max batches of field report F37 (bench/memory.ts's near-max row and
 * tests/cli/near_max_rss_test.ts): a generator of calls of eight texts of 180–240 words each,
 * past the MiniLM-shaped and tiny models' 512-token limit, so every row is truncated to max length.
 * Deterministic (an LCG seeded with 1), so both measure the same inputs.
 *
 * @returns a function giving the next call's eight texts.
 */
export function nearMaxTexts(): () => string[] {
  let seed = 1;
  const rnd = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  const words = ["alpha", "beta", "gamma", "delta", "omega", "vector", "memory", "arena"];
  const word = () => words[Math.floor(rnd() * words.length)]! + Math.floor(rnd() * 100);
  const text = () => Array.from({ length: 180 + Math.floor(rnd() * 60) }, word).join(" ");
  return () => Array.from({ length: 8 }, text);
}
