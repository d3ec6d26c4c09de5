/**
 * The layers of lib/ (docs/layout.md): a module may import from its own area or from a lower
 * layer, never from a higher one — so the doors sit on ops, ops on models and lanes, lanes on
 * engines and the scheduler, and an engine never reaches up into a door or an operation. A door
 * (lib/doors/: HTTP and the bus; lib/cli/) maps shapes only: it never imports an operation's private
 * module (`lib/ops/_*.ts`), whose logic belongs behind the dispatcher, and it sees the instance
 * through its `DoorBackend` (lib/ops/door_backend.ts) only, never its registry, context or metrics.
 */
import assert from "node:assert/strict";
import { ROOT } from "./_helpers.ts";

/** Areas of lib/, lowest first; areas on one line are one layer (they may import each other). */
const LAYERS: string[][] = [
  ["identity", "async.ts", "line_column.ts", "paths.ts", "version.ts", "log"],
  ["contract"],
  ["config", "tokenize", "store", "lease", "sched", "workers", "subc", "grammar"],
  ["engines", "cache", "quant"],
  ["lanes"],
  ["models"],
  ["probe"],
  ["ops"],
  ["synapse.ts"],
  ["doors", "client"],
  ["cli"],
];

function layerOf(area: string): number {
  const i = LAYERS.findIndex((l) => l.includes(area));
  if (i < 0) throw new Error(`lib/${area} has no layer in tests/layering_test.ts: add it`);
  return i;
}

/** The areas of lib/ that are doors: they may not import `lib/ops/_*`. */
const DOORS = ["doors", "cli"];

/** Every relative import of every .ts file under lib/: `[file, target]`, both absolute paths. */
async function* libImports(lib: string): AsyncGenerator<[file: string, target: string]> {
  for await (const file of tsFiles(lib)) {
    const text = await Deno.readTextFile(file);
    for (const m of text.matchAll(/^(?:import|export)[^;]*?from "(\.[^"]+)"/gms)) {
      yield [file, new URL(m[1]!, `file://${file}`).pathname];
    }
  }
}

async function* tsFiles(dir: string): AsyncGenerator<string> {
  for await (const e of Deno.readDir(dir)) {
    const p = `${dir}/${e.name}`;
    if (e.isDirectory) yield* tsFiles(p);
    else if (e.name.endsWith(".ts")) yield p;
  }
}

Deno.test("no module in lib/ imports from a layer above its own", async () => {
  const lib = `${ROOT}/lib`;
  const upward: string[] = [];
  let checked = 0;
  for await (const [file, target] of libImports(lib)) {
    const area = file.slice(lib.length + 1).split("/")[0]!;
    if (!target.startsWith(lib + "/")) continue; // ffi/, outside lib
    const to = target.slice(lib.length + 1).split("/")[0]!;
    checked++;
    if (to !== area && layerOf(to) > layerOf(area)) {
      upward.push(`${file.slice(lib.length + 1)} imports ${to}`);
    }
  }
  assert.ok(checked > 200, `only ${checked} imports seen: the scan is broken`);
  assert.deepEqual(upward, []);
});

Deno.test("no door imports an operation's private module (lib/ops/_*)", async () => {
  const lib = `${ROOT}/lib`;
  const private_: string[] = [];
  let checked = 0;
  for await (const [file, target] of libImports(lib)) {
    const rel = file.slice(lib.length + 1);
    if (!DOORS.includes(rel.split("/")[0]!)) continue;
    checked++;
    if (target.startsWith(`${lib}/ops/_`)) {
      private_.push(`${rel} imports ${target.slice(lib.length + 1)}`);
    }
  }
  assert.ok(checked > 100, `only ${checked} door imports seen: the scan is broken`);
  assert.deepEqual(private_, []);
});

/**
 * The strongly connected components of more than one file in a graph (Tarjan): each one a set of
 * modules that import each other, directly or through others, sorted.
 */
function cyclesOf(graph: ReadonlyMap<string, ReadonlySet<string>>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    for (let w = stack.pop()!;; w = stack.pop()!) {
      onStack.delete(w);
      component.push(w);
      if (w === v) break;
    }
    if (component.length > 1) cycles.push(component.sort());
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return cycles;
}

Deno.test("cyclesOf() finds the modules that import each other, and only those", () => {
  const graph = new Map([
    ["a", new Set(["b"])],
    ["b", new Set(["c"])],
    ["c", new Set(["a", "d"])],
    ["d", new Set(["e"])],
    ["e", new Set<string>()],
    ["f", new Set(["f", "g"])],
    ["g", new Set(["f"])],
  ]);
  assert.deepEqual(cyclesOf(graph), [["a", "b", "c"], ["f", "g"]]);
  assert.deepEqual(cyclesOf(new Map([["a", new Set(["b"])], ["b", new Set<string>()]])), []);
});

Deno.test("lib/ has no import cycle (value imports, `import type` and re-exports alike)", async () => {
  const lib = `${ROOT}/lib`;
  const graph = new Map<string, Set<string>>();
  let edges = 0;
  for await (const [file, target] of libImports(lib)) {
    if (!target.startsWith(lib + "/")) continue;
    const from = file.slice(lib.length + 1);
    const to = target.slice(lib.length + 1);
    if (!graph.has(from)) graph.set(from, new Set());
    if (from !== to) graph.get(from)!.add(to);
    edges++;
  }
  assert.ok(edges > 200, `only ${edges} imports seen: the scan is broken`);
  const cycles = cyclesOf(graph).map((files) => {
    const inside = new Set(files);
    const lines = files.map((f) =>
      `    ${f} → ${[...graph.get(f)!].filter((t) => inside.has(t)).sort().join(", ")}`
    );
    return `${files.length} files import each other:\n${lines.join("\n")}`;
  });
  assert.equal(cycles.length, 0, `import cycles in lib/:\n${cycles.join("\n")}`);
});

/**
 * Code of a .ts source with its comments blanked (strings kept): `//` to the end of the line and
 * `/* … *\/` blocks, so a doc comment that names `synapse.context` is not read as code.
 */
function codeOf(text: string): string {
  return text
    .replace(/\/\*[\s\S]*?\*\//g, (c) => c.replace(/[^\n]/g, "")) // keeps the line numbers
    .replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
}

Deno.test("no door reads an instance's registry, context or metrics (they hold a DoorBackend)", async () => {
  const lib = `${ROOT}/lib`;
  const reads: string[] = [];
  let files = 0;
  for await (const file of tsFiles(`${lib}/doors`)) {
    files++;
    const lines = codeOf(await Deno.readTextFile(file)).split("\n");
    lines.forEach((line, i) => {
      // `.registry`, `?.context`, `["metrics"]`: any read of those members, however spelled.
      if (/(?:\.|\[\s*["'`])\s*(?:registry|context|metrics)\b/.test(line)) {
        reads.push(`${file.slice(lib.length + 1)}:${i + 1}: ${line.trim()}`);
      }
    });
  }
  assert.ok(files > 15, `only ${files} door files seen: the scan is broken`);
  assert.deepEqual(reads, []);
});
