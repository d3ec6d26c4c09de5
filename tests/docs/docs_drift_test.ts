/**
 * The docs that mirror code, checked against the code, so the two cannot drift apart. Model-free:
 * it reads the docs and lib/ sources and imports the tables it compares against; no Synapse boots.
 *
 * - docs/errors.md lists exactly the codes of `ERROR_CODES` (lib/contract/errors.ts), each once,
 *   with the class, retry facts and HTTP status the code gives them; a code it calls reserved
 *   ("never returned") is raised nowhere in lib/.
 * - docs/http.md's status table gives each code the status of `HTTP_STATUS`.
 * - docs/config.md lists every key of the config schema (lib/config/schema.ts, walked: sections
 *   and `preload_models` entries included) and no key the schema lacks.
 * - docs/observability.md lists every metric family `/metrics` writes, and no other.
 * - docs/operations.md's table of operations and its sections name exactly the operations of
 *   `OPERATIONS` (lib/ops/dispatcher.ts); docs/http.md "The owner key" names exactly those that
 *   need the owner's key.
 * - docs/http.md's table of routes names exactly the routes of `HTTP_ROUTES`
 *   (lib/doors/http/routes.ts), with their methods.
 * - The README's Documentation list names every docs/*.md and bench/README.md.
 * - Every relative link of README.md, docs/*.md and bench/README.md names a file that exists and,
 *   with a `#anchor`, a heading of that file (GitHub's anchor rules).
 *
 * @module
 */
import assert from "node:assert/strict";
import { z } from "zod";
import { ROOT } from "../_helpers.ts";
import { ERROR_CODES } from "../../lib/contract/errors.ts";
import type { ErrorCode } from "../../lib/contract/errors.ts";
import { HTTP_STATUS } from "../../lib/doors/http/status_table.ts";
import { LayerSchema, SynapseConfigSchema } from "../../lib/config/schema.ts";
import { OPERATIONS } from "../../lib/ops/dispatcher.ts";
import { HTTP_ROUTES } from "../../lib/doors/http/routes.ts";

/** The lines of a markdown file outside fenced code blocks (fence lines dropped too). */
function prose(md: string): string[] {
  const out: string[] = [];
  let fence = false;
  for (const line of md.split("\n")) {
    if (/^\s*```/.test(line)) {
      fence = !fence;
      continue;
    }
    if (!fence) out.push(line);
  }
  return out;
}

/**
 * The lines of the section under `heading` (an exact heading line), up to the next heading of
 * the same or a higher level.
 *
 * @throws {Error} When the file has no such heading.
 */
function section(md: string, heading: string): string[] {
  const lines = prose(md);
  const start = lines.indexOf(heading);
  if (start < 0) throw new Error(`no heading '${heading}'`);
  const level = heading.match(/^#+/)![0].length;
  const out: string[] = [];
  for (const line of lines.slice(start + 1)) {
    const m = line.match(/^(#+) /);
    if (m && m[1]!.length <= level) break;
    out.push(line);
  }
  return out;
}

/** The cells of each body row of the first table in `lines` (header and separator skipped). */
function tableRows(lines: string[]): string[][] {
  const start = lines.findIndex((l) => l.startsWith("|"));
  if (start < 0) return [];
  const rows: string[][] = [];
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith("|")) break;
    rows.push(line.replace(/^\|/, "").replace(/\|$/, "").split(/(?<!\\)\|/).map((c) => c.trim()));
  }
  return rows;
}

/** Every `backticked` word of a cell. */
function ticks(cell: string): string[] {
  return [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);
}

/** The first backticked word of each row's first cell. */
function firstColumn(rows: string[][]): string[] {
  return rows.map((r) => {
    const t = ticks(r[0]!)[0];
    if (t === undefined) throw new Error(`a row without a backticked name: | ${r.join(" | ")} |`);
    return t;
  });
}

async function* tsFiles(dir: string): AsyncGenerator<string> {
  for await (const e of Deno.readDir(dir)) {
    const p = `${dir}/${e.name}`;
    if (e.isDirectory) yield* tsFiles(p);
    else if (e.name.endsWith(".ts")) yield p;
  }
}

/** The sources of lib/, by path. */
async function libSources(): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for await (const p of tsFiles(`${ROOT}/lib`)) out.set(p, await Deno.readTextFile(p));
  return out;
}

function duplicates(list: readonly string[]): string[] {
  return list.filter((x, i) => list.indexOf(x) !== i);
}

const sorted = (xs: Iterable<string>): string[] => [...xs].sort();

Deno.test("docs/errors.md lists exactly the codes of ERROR_CODES, with their facts", async () => {
  const md = await Deno.readTextFile(`${ROOT}/docs/errors.md`);
  const returned = tableRows(section(md, "## Codes Synapse returns"));
  const when = tableRows(section(md, "### When each is returned, and what to do"));
  const reserved = tableRows(section(md, "## Reserved codes"));
  const returnedCodes = firstColumn(returned);
  const reservedCodes = firstColumn(reserved);
  assert.deepEqual(duplicates([...returnedCodes, ...reservedCodes]), [], "a code listed twice");
  assert.deepEqual(
    sorted([...returnedCodes, ...reservedCodes]),
    sorted(Object.keys(ERROR_CODES)),
    "docs/errors.md's two tables against ERROR_CODES (lib/contract/errors.ts)",
  );
  assert.deepEqual(
    sorted(firstColumn(when)),
    sorted(returnedCodes),
    "'When each is returned' names the codes of 'Codes Synapse returns'",
  );
  // Columns: code | class | retry_after_ms | safe | shape | HTTP | OpenAI type.
  for (const row of [...returned, ...reserved]) {
    const code = ticks(row[0]!)[0] as ErrorCode;
    const info = ERROR_CODES[code];
    assert.equal(row[1], info.class, `${code}: class`);
    const retry = row[2]!.match(/^\d+/)?.[0];
    assert.equal(
      retry === undefined ? undefined : Number(retry),
      info.retryAfterMs,
      `${code}: retry`,
    );
    assert.equal(row[3]!.replaceAll("*", ""), info.safeToRetrySameRequest ? "yes" : "no", code);
    assert.equal(Number(row[5]!.match(/^\d+/)?.[0]), HTTP_STATUS[code], `${code}: HTTP status`);
  }
});

Deno.test("docs/errors.md calls no code reserved that lib/ raises", async () => {
  const md = await Deno.readTextFile(`${ROOT}/docs/errors.md`);
  const reserved = new Set(firstColumn(tableRows(section(md, "## Reserved codes"))));
  const raised = new Map<string, string>();
  for (const [path, src] of await libSources()) {
    if (path.endsWith("/lib/contract/errors.ts")) continue;
    // new SynapseError("code", …), and the bus door's refusal("code", …).
    for (const m of src.matchAll(/\b(?:SynapseError|refusal)\(\s*"([a-z_]+)"/g)) {
      raised.set(m[1]!, path.slice(ROOT.length + 1));
    }
  }
  assert.ok(raised.size > 20, `found only ${raised.size} raised codes: the pattern is stale`);
  const wrong = [...reserved].filter((c) => raised.has(c)).map((c) => `${c} (${raised.get(c)})`);
  assert.deepEqual(wrong, [], "codes docs/errors.md says this build never returns");
});

Deno.test("docs/http.md's status table gives every code the status HTTP_STATUS gives it", async () => {
  const md = await Deno.readTextFile(`${ROOT}/docs/http.md`);
  const rows = tableRows(section(md, "## HTTP status of each error code"));
  const listed: string[] = [];
  const wrong: string[] = [];
  for (const [status, codes] of rows) {
    // The cell's codes; a dotted word (`http.max_body_bytes`) is a config key, not a code.
    for (const code of ticks(codes!).filter((t) => !t.includes("."))) {
      listed.push(code);
      const want = HTTP_STATUS[code as ErrorCode];
      if (want !== Number(status)) wrong.push(`${code}: listed ${status}, HTTP_STATUS ${want}`);
    }
  }
  assert.deepEqual(duplicates(listed), [], "a code listed twice");
  assert.deepEqual(sorted(listed), sorted(Object.keys(ERROR_CODES)));
  assert.deepEqual(wrong, []);
});

/** Keys of an object schema, `section.key` for nested objects; arrays of objects by `arrays`. */
function schemaKeys(
  schema: z.ZodObject,
  arrays: Map<string, string[]>,
  prefix = "",
): string[] {
  const out: string[] = [];
  for (const [key, raw] of Object.entries(schema.shape)) {
    let s = raw as z.ZodType;
    while (s instanceof z.ZodOptional || s instanceof z.ZodDefault) s = s.unwrap() as z.ZodType;
    const name = `${prefix}${key}`;
    if (s instanceof z.ZodObject) {
      out.push(...schemaKeys(s, arrays, `${name}.`));
      continue;
    }
    out.push(name);
    if (s instanceof z.ZodArray && s.element instanceof z.ZodObject) {
      arrays.set(name, schemaKeys(s.element, new Map()));
    }
  }
  return out;
}

Deno.test("docs/config.md lists every key of the config schema and no other", async () => {
  const md = await Deno.readTextFile(`${ROOT}/docs/config.md`);
  const documented = firstColumn(tableRows(section(md, "## Keys")));
  const entryKeys = firstColumn(tableRows(section(md, "## `preload_models`")));
  const written = new Map<string, string[]>();
  const layer = schemaKeys(LayerSchema, written);
  const resolved = schemaKeys(SynapseConfigSchema, new Map());
  assert.ok(resolved.length > 30 && resolved.includes("inline.max_items"), resolved.join(" "));
  assert.deepEqual(duplicates(documented), [], "a key listed twice");
  // Every key of the resolved config has its row; a row names a key a file may hold.
  assert.deepEqual(resolved.filter((k) => !documented.includes(k)), [], "keys without a row");
  assert.deepEqual(documented.filter((k) => !layer.includes(k)), [], "rows the schema lacks");
  // The older names a file may still use (LayerSchema's alias keys): a row, or named in the page.
  const aliases = layer.filter((k) => !resolved.includes(k));
  assert.ok(aliases.length > 0);
  for (const a of aliases) assert.ok(md.includes(`\`${a}\``), `alias key ${a} is not named`);
  assert.deepEqual(duplicates(entryKeys), [], "a preload_models key listed twice");
  assert.deepEqual(sorted(entryKeys), sorted(written.get("preload_models") ?? []));
});

Deno.test("docs/observability.md lists every metric family /metrics writes and no other", async () => {
  const written = new Set<string>();
  const literal = /\.(?:family|counter|histogram)\(\s*"([a-zA-Z_:][a-zA-Z0-9_:]*)"/g;
  const call = /(?<!this)\.(?:family|counter|histogram)\(/g;
  for (const [path, src] of await libSources()) {
    if (!src.includes("# TYPE ")) continue; // the writer of the exposition format
    const calls = [...src.matchAll(call)].length;
    const names = [...src.matchAll(literal)].map((m) => m[1]!);
    // A family named by a variable would be invisible here: every call must name its family.
    assert.equal(names.length, calls, `${path}: a metric family not named by a string literal`);
    for (const n of names) written.add(n);
  }
  assert.ok(written.size > 20, `found only ${written.size} families: the pattern is stale`);
  const md = await Deno.readTextFile(`${ROOT}/docs/observability.md`);
  const rows = tableRows(section(md, "## Metrics"));
  const documented = rows.flatMap((r) => ticks(r[0]!).map((t) => t.replace(/\{.*\}$/, "")));
  assert.deepEqual(duplicates(documented), [], "a metric listed twice");
  assert.deepEqual(sorted(documented), sorted(written));
});

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
function anchorOf(heading: string): string {
  return heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N} _-]/gu, "")
    .replaceAll(" ", "-");
}

/** The anchors of a markdown file's headings (repeats get `-1`, `-2`, … as on GitHub). */
function anchors(md: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const line of prose(md)) {
    const m = line.match(/^#{1,6} (.*?)\s*#*\s*$/);
    if (!m) continue;
    const base = anchorOf(m[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** The relative link targets of a markdown file, outside code blocks and code spans. */
function links(md: string): string[] {
  const out: string[] = [];
  for (const line of prose(md)) {
    const text = line.replace(/`[^`]*`/g, "``");
    for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1]!;
      if (!/^[a-z][a-z0-9+.-]*:/i.test(target)) out.push(target);
    }
  }
  return out;
}

Deno.test("every relative link of the README and docs/ names a file and heading that exist", async () => {
  const files = [`${ROOT}/README.md`, `${ROOT}/bench/README.md`];
  for await (const e of Deno.readDir(`${ROOT}/docs`)) {
    if (e.name.endsWith(".md")) files.push(`${ROOT}/docs/${e.name}`);
  }
  const broken: string[] = [];
  let checked = 0;
  for (const file of files) {
    const md = await Deno.readTextFile(file);
    const dir = file.slice(0, file.lastIndexOf("/"));
    for (const target of links(md)) {
      checked++;
      const [path, anchor] = target.split("#", 2) as [string, string | undefined];
      const resolved = path === "" ? file : new URL(path, `file://${dir}/`).pathname;
      const where = `${file.slice(ROOT.length + 1)}: (${target})`;
      let text: string;
      try {
        const stat = await Deno.stat(resolved);
        if (!stat.isFile || anchor === undefined) continue;
        text = await Deno.readTextFile(resolved);
      } catch {
        broken.push(`${where}: no such file`);
        continue;
      }
      if (!anchors(text).has(decodeURIComponent(anchor))) broken.push(`${where}: no such heading`);
    }
  }
  assert.ok(checked > 50, `only ${checked} links found: the pattern is stale`);
  assert.deepEqual(broken, []);
});

Deno.test("the README's Documentation list names every docs/ file and bench/README.md", async () => {
  const md = await Deno.readTextFile(`${ROOT}/README.md`);
  const listed = section(md, "## Documentation").flatMap((l) => {
    const m = l.match(/^- \[[^\]]*\]\(([^)#]+)\)/);
    return m ? [m[1]!] : [];
  });
  const files = ["bench/README.md"];
  for await (const e of Deno.readDir(`${ROOT}/docs`)) {
    if (e.isFile && e.name.endsWith(".md")) files.push(`docs/${e.name}`);
  }
  assert.deepEqual(duplicates(listed), []);
  assert.deepEqual(sorted(listed), sorted(files));
});

Deno.test("docs/operations.md lists and documents exactly the operations of OPERATIONS; http.md names the owner's", async () => {
  const ops = Object.keys(OPERATIONS).sort();
  const md = await Deno.readTextFile(`${ROOT}/docs/operations.md`);
  const lines = prose(md);
  const tableStart = lines.findIndex((l) => /^\| operation\b/i.test(l) || /^\| method\b/i.test(l));
  assert.ok(tableStart >= 0, "docs/operations.md has no table of operations");
  const rows: string[] = [];
  for (const l of lines.slice(tableStart + 2)) {
    const m = /^\| `([a-z._]+)`/.exec(l);
    if (m === null) break;
    rows.push(m[1]!);
  }
  assert.deepEqual([...rows].sort(), ops, "the table of operations");
  const sections = lines.flatMap((l) => {
    const m = /^#{2,3} `([a-z._]+)`$/.exec(l);
    return m === null ? [] : [m[1]!];
  });
  assert.deepEqual([...new Set(sections)].sort(), ops, "the sections of operations");
  const http = await Deno.readTextFile(`${ROOT}/docs/http.md`);
  const owner = prose(http.slice(http.indexOf("## The owner key")).split("\n## ")[0]!).join(" ");
  const para = owner.slice(0, owner.indexOf("are served over HTTP"));
  const named = [...para.matchAll(/`([a-z]+\.[a-z._]+)`/g)].map((m) => m[1]!).sort();
  const need = Object.entries(OPERATIONS).filter(([, o]) => o.access === "owner").map(([k]) => k)
    .sort();
  assert.deepEqual(named, need, "the owner key's operations");
});

Deno.test("docs/http.md's table of routes names exactly the routes of HTTP_ROUTES", async () => {
  const md = await Deno.readTextFile(`${ROOT}/docs/http.md`);
  const lines = prose(md.slice(md.indexOf("## Routes")));
  const rows: string[] = [];
  for (const l of lines.slice(lines.findIndex((x) => x.startsWith("| route")) + 2)) {
    const m = /^\| `(GET|POST) ([^`]+)`/.exec(l);
    if (m === null) break;
    rows.push(`${m[1]} ${m[2]}`);
  }
  const want = HTTP_ROUTES.map((r) => `${r.method} ${r.path}`);
  assert.deepEqual([...rows].sort(), [...want].sort());
});

Deno.test("docs/subc.md's manifest paragraph gives every operation the kind OPERATIONS gives it", async () => {
  const md = await Deno.readTextFile(`${ROOT}/docs/subc.md`);
  const start = md.indexOf("**What it declares.**");
  assert.ok(start >= 0, "docs/subc.md has no 'What it declares.' paragraph");
  const para = prose(md.slice(start).split("\n\n")[0]!).join(" ");
  const queryPart = para.slice(para.indexOf("`query` for"), para.indexOf("`mutate` for"));
  const mutatePart = para.slice(para.indexOf("`mutate` for"), para.indexOf("(a flow-scoped"));
  const namedIn = (s: string) =>
    [...s.matchAll(/`([a-z]+(?:\.[a-z._]+)?)`/g)].map((m) => m[1]!).filter((n) =>
      Object.hasOwn(OPERATIONS, n)
    ).sort();
  const of = (kind: string) =>
    Object.entries(OPERATIONS).filter(([, o]) => o.kind === kind).map(([k]) => k).sort();
  assert.deepEqual(namedIn(mutatePart), of("mutate"), "the mutate operations");
  // The inference ops are named as a group; every other query operation by name.
  const inference = ["embed.query", "embed.batch", "rerank.score", "microllm.oneshot"];
  assert.deepEqual(
    namedIn(queryPart),
    of("query").filter((k) => !inference.includes(k)),
    "the query operations",
  );
});
