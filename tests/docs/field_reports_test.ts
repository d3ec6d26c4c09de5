/**
 * docs/field-reports.md against the repository, so that every `F<n>` a reader meets resolves:
 *
 * - every field report cited (`F26`, "field report F39") in lib/, docs/, README.md, tests/,
 *   bench/, scripts/ and workers/ has an entry (a `### F<n>` heading) in docs/field-reports.md;
 * - every entry says its input, what went wrong elsewhere, what Synapse does and its tests; each
 *   test file it names exists, and at least one of them cites the report's number;
 * - the contents table lists exactly the entries, in numeric order.
 *
 * A citation is `F` and 1–2 digits as a whole word. The hex bytes comments name ("a lead byte
 * above F4") and the GGUF float types (`F16`, `F32`) read the same way; they are numbers of reports
 * that exist, so they need no exception. Model-free: it reads files only.
 *
 * @module
 */
import assert from "node:assert/strict";
import { ROOT } from "../_helpers.ts";

const DOC = "docs/field-reports.md";
/** Where citations are looked for: directories (walked) and single files, from the root. */
const CITING = [
  "lib",
  "docs",
  "bench",
  "scripts",
  "workers",
  "tests",
  "README.md",
  "main.ts",
  "mod.ts",
];
const CITATION = /\bF([1-9][0-9]?)\b/g;

/** The text files under `path` (a directory, walked, or a file): sources, docs, scripts. */
async function* textFiles(path: string): AsyncGenerator<string> {
  const st = await Deno.lstat(path);
  if (st.isFile) {
    yield path;
    return;
  }
  if (!st.isDirectory) return;
  for await (const e of Deno.readDir(path)) {
    const p = `${path}/${e.name}`;
    if (e.isDirectory) yield* textFiles(p);
    else if (e.isFile && (/\.(ts|md|sh)$/.test(e.name) || path.endsWith("/scripts"))) yield p;
  }
}

/** Each cited report (`F26`) with the files (relative to the root) that cite it. */
async function citations(): Promise<Map<string, string[]>> {
  const out = new Map<string, string[]>();
  for (const root of CITING) {
    for await (const path of textFiles(`${ROOT}/${root}`)) {
      const rel = path.slice(ROOT.length + 1);
      for (const m of (await Deno.readTextFile(path)).matchAll(CITATION)) {
        const id = `F${m[1]}`;
        const files = out.get(id) ?? [];
        if (!files.includes(rel)) files.push(rel);
        out.set(id, files);
      }
    }
  }
  return out;
}

/** One entry of docs/field-reports.md: its `### F<n>` heading's id and the lines under it. */
interface Entry {
  id: string;
  lines: string[];
}

/** The entries of the page, in page order. */
function entries(md: string): Entry[] {
  const out: Entry[] = [];
  for (const line of md.split("\n")) {
    const h = /^### (F\d+)$/.exec(line);
    if (h) out.push({ id: h[1]!, lines: [] });
    else if (out.length > 0 && /^#{1,3} /.test(line)) break;
    else out.at(-1)?.lines.push(line);
  }
  return out;
}

/** The text of an entry's `- **Label:**` item, its continuation lines joined. */
function field(entry: Entry, label: string): string | undefined {
  const start = entry.lines.findIndex((l) => l.startsWith(`- **${label}:**`));
  if (start < 0) return undefined;
  const parts = [entry.lines[start]!.slice(`- **${label}:**`.length)];
  for (const l of entry.lines.slice(start + 1)) {
    if (!l.startsWith("  ")) break;
    parts.push(l.trim());
  }
  return parts.join(" ").trim();
}

/** The backticked `tests/…` paths of an entry's Tests item. */
function testFiles(entry: Entry): string[] {
  const tests = field(entry, "Tests") ?? "";
  return [...tests.matchAll(/`(tests\/[^`]+)`/g)].map((m) => m[1]!);
}

/** The reports cited somewhere that the page has no entry for, each with where it is cited. */
function missing(cited: Map<string, string[]>, md: string): string[] {
  const have = new Set(entries(md).map((e) => e.id));
  return [...cited].filter(([id]) => !have.has(id)).map(([id, files]) =>
    `${id} (cited in ${files.join(", ")})`
  );
}

const num = (id: string): number => Number(id.slice(1));

Deno.test("every field report cited in the repository has an entry in docs/field-reports.md", async () => {
  const cited = await citations();
  // The pattern still finds what the code cites: F26 in lib/, F39 in docs/.
  assert.ok(cited.get("F26")?.some((f) => f.startsWith("lib/")), "no F26 in lib/: stale pattern");
  assert.ok(cited.get("F39")?.some((f) => f.startsWith("docs/")), "no F39 in docs/: stale pattern");
  assert.ok(cited.size >= 30, `only ${cited.size} reports cited: the walk is stale`);
  const md = await Deno.readTextFile(`${ROOT}/${DOC}`);
  assert.deepEqual(missing(cited, md), [], `reports cited without an entry in ${DOC}`);
});

Deno.test("a cited report whose entry is removed is found missing", async () => {
  const cited = await citations();
  const md = await Deno.readTextFile(`${ROOT}/${DOC}`);
  // The page without the F26 section (its heading up to the next one).
  const cut = md.replace(/^### F26\n[\s\S]*?(?=^### )/m, "");
  assert.ok(cut.length < md.length && !cut.includes("### F26\n"), "the F26 entry was not cut");
  const found = missing(cited, cut);
  assert.equal(found.length, 1, found.join("; "));
  assert.match(found[0]!, /^F26 \(cited in .*lib\/ops\/_embedding\.ts/);
});

Deno.test("each entry says input, elsewhere, Synapse and tests; its test files exist and one cites it", async () => {
  const md = await Deno.readTextFile(`${ROOT}/${DOC}`);
  const all = entries(md);
  assert.ok(all.length >= 30, `only ${all.length} entries parsed`);
  const wrong: string[] = [];
  for (const entry of all) {
    for (const label of ["Input", "Elsewhere", "Synapse", "Tests"]) {
      if (!field(entry, label)) wrong.push(`${entry.id}: no '${label}'`);
    }
    const files = testFiles(entry);
    if (files.length === 0) wrong.push(`${entry.id}: names no test file`);
    let cites = false;
    for (const f of files) {
      let text: string;
      try {
        text = await Deno.readTextFile(`${ROOT}/${f}`);
      } catch {
        wrong.push(`${entry.id}: ${f} does not exist`);
        continue;
      }
      if (new RegExp(`\\b${entry.id}\\b`).test(text)) cites = true;
    }
    if (files.length > 0 && !cites) wrong.push(`${entry.id}: none of its test files cites it`);
  }
  assert.deepEqual(wrong, []);
});

Deno.test("docs/field-reports.md: the contents table lists exactly the entries, in numeric order", async () => {
  const md = await Deno.readTextFile(`${ROOT}/${DOC}`);
  const ids = entries(md).map((e) => e.id);
  assert.deepEqual(ids, [...new Set(ids)], "an entry listed twice");
  assert.deepEqual(ids, [...ids].sort((a, b) => num(a) - num(b)), "entries out of order");
  const rows = [...md.matchAll(/^\| \[(F\d+)\]\(#(f\d+)\) +\|/gm)];
  for (const [, id, anchor] of rows) assert.equal(anchor, id!.toLowerCase(), `${id}'s link`);
  assert.deepEqual(rows.map((r) => r[1]), ids, "the contents table against the entries");
});
