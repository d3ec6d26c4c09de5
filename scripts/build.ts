/**
 * The single executable `dist/ck-synapse` (docs/install.md); run through `scripts/build`.
 *
 * ```
 * scripts/build [--out DIR] [--format auto|archive|compile] [--force] [--no-measure]
 * ```
 *
 * Two formats:
 *
 * - **archive** (the default where `deno compile` cannot get its runtime): one self-extracting
 *   file, the POSIX sh header `scripts/_sfx_header.sh` followed by a gzip'd tar of the program
 *   source (`main.ts lib/ ffi/ workers/`, not bundled: `deno bundle` of Deno 2.9.6 cannot bundle
 *   node-llama-cpp, which imports `node:sea` and every platform's optional package, and the
 *   engines' Worker modules are loaded by URL), the two launchers, the pinned Deno binary, the npm
 *   packages the program imports and their dependencies (linux-x64 native builds only; no dev
 *   packages, type declarations, source maps or llama.cpp's source bundle), the two test models,
 *   `build.json` and a `MANIFEST` (`sha256sum` lines of every file). The header unpacks it once
 *   into `<data_home>/cortexkit/synapse/runtime/<payload sha256>/` and runs the launcher there,
 *   with the launcher's own permission grants. The payload is reproducible: the same inputs give
 *   the same bytes and digest (files sorted, mtimes set to the commit's time, owner 0).
 * - **compile**: `deno compile --self-extracting` with the same files. Deno needs its `denort`
 *   runtime for it: `$DENORT_BIN` when set, else a download from dl.deno.land. A compiled binary
 *   carries its permissions from build time, so it cannot grant exact paths the way the launcher
 *   does: it is built with unscoped write, net and run (see docs/install.md).
 *
 * `--format auto` (the default): compile when `$DENORT_BIN` is set, else try compile and fall back
 * to archive when Deno cannot download `denort`, saying why. `--force` rebuilds even when
 * `<out>/build.json` records the same inputs (paths, sizes, mtimes, the build scripts, the
 * commit). Unless `--no-measure`, the artifact is run twice with a fresh unpack dir and the times
 * of `version` printed (cold: unpack and first start; warm).
 *
 * Writes `<out>/ck-synapse`, `<out>/ck-synapse.sha256` (`sha256sum -c` format) and
 * `<out>/build.json` (format, version, commit, payload digest, sizes, the inputs digest).
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { SYNAPSE_VERSION } from "../lib/version.ts";
import { V8_FLAGS } from "./v8_flags.ts";

/** The repository root (no trailing slash). */
export const ROOT: string = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");

/** The program's own directories and files, copied as they are (TypeScript only under dirs). */
export const PROGRAM_DIRS = ["lib", "ffi", "workers"] as const;
/** Files at the root the runtime tree needs. */
export const PROGRAM_FILES = [
  "main.ts",
  "deno.json",
  "package.json",
  "ck-synapse",
  "ck-synapse-worker-llama",
  "ck-synapse-worker-ffi",
] as const;
/**
 * Native code scripts/setup builds (scripts/build_shim): the llama shim of the ffi lane, carried
 * when it was built (its rpath finds the prebuilt libllama of the runtime packages).
 */
export const NATIVE_FILES = ["node_modules/.synapse/libsynapse_llama.so"] as const;
/** Where `scripts/build_shim --native` puts libllama and ggml built for this CPU (regular files). */
export const NATIVE_LLAMA_DIR = "node_modules/.synapse/llama-native/lib";
/** The test models served when no model is configured (lib/models/sources.ts), about 1 MB. */
export const TEST_MODELS = [
  "fixtures/models/synapse-tiny-embed",
  "fixtures/models/synapse-tiny-rerank",
];
/** The pinned Deno, and the link the launchers resolve it through. */
export const DENO_FILES = ["node_modules/deno/deno", "node_modules/.bin/deno"];

/**
 * The system tools the archive's header and launchers run, found on PATH (docs/install.md):
 * the header's unpack and checks, the launchers' permission set-up, and `uname` (machine profile).
 * The smoke test runs the artifact with a PATH holding these alone.
 */
export const SANDBOX_TOOLS = [
  "bash",
  "cut",
  "dirname",
  "find",
  "gzip",
  "id",
  "mkdir",
  "mv",
  "readlink",
  "rm",
  "seq",
  "sha256sum",
  "sort",
  "stat",
  "tail",
  "tar",
  "uname",
] as const;

/** What one build writes to `<out>/build.json`. */
export interface BuildRecord {
  name: "ck-synapse";
  version: string;
  format: "archive" | "compile";
  /** Git commit of the checkout, or null outside git. */
  commit: string | null;
  /** Whether the checkout had uncommitted changes. */
  dirty: boolean;
  /** SHA-256 of the payload (archive; names the unpack dir); null for compile. */
  payload_sha256: string | null;
  /** SHA-256 of the whole artifact (also in `ck-synapse.sha256`). */
  artifact_sha256: string;
  /** Bytes of the artifact. */
  artifact_bytes: number;
  /** Bytes of the unpacked tree (archive). */
  tree_bytes: number | null;
  /** Digest of the inputs (see the module doc); a build with the same one is skipped. */
  inputs_sha256: string;
}

/**
 * The npm package names the program imports: bare specifiers in `import … from "x"`,
 * `export … from "x"` and `import("x")` of the given sources (not `node:`, `npm:`, `jsr:`, URLs or
 * relative paths), cut to the package name (`@scope/name` or `name`).
 *
 * @param sources TypeScript texts.
 */
export function bareImports(sources: Iterable<string>): Set<string> {
  const names = new Set<string>();
  for (const text of sources) {
    for (
      const m of text.matchAll(
        /(?:^(?:import|export)[^;]*?[\s}]from\s*|\bimport\s*\(\s*)"([^"./][^"]*)"/gm,
      )
    ) {
      const spec = m[1]!;
      if (/^(?:node|npm|jsr|https?|file|data):/.test(spec)) continue;
      const parts = spec.split("/");
      names.add(spec.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0]!);
    }
  }
  return names;
}

/** The `packages` map of an npm v3 package-lock.json (keys like `node_modules/a/node_modules/b`). */
export type LockPackages = Record<string, {
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  dev?: boolean;
}>;

/** Packages never shipped: GPU and other platforms' builds (the archive is linux-x64, CPU). */
export function isExcludedPackage(key: string): boolean {
  const name = key.slice(key.lastIndexOf("node_modules/") + "node_modules/".length);
  if (name.startsWith("@node-llama-cpp/")) return name !== "@node-llama-cpp/linux-x64";
  return name.startsWith("@deno/") || name === "deno";
}

/**
 * The installed packages the roots need: each root and, transitively, its dependencies,
 * optional dependencies and peer dependencies, resolved the way Node does (the nearest
 * `node_modules/<name>` up the tree). Packages not installed (`installed` false: an optional
 * dependency of another platform) and {@link isExcludedPackage} ones are left out.
 *
 * @param lock The lockfile's `packages`.
 * @param roots Package names imported by the program.
 * @param installed Whether a lock key (`node_modules/…`) is on disk.
 * @returns Lock keys, sorted.
 * @throws {Error} A root that is not installed (run scripts/setup).
 */
export function runtimePackages(
  lock: LockPackages,
  roots: Iterable<string>,
  installed: (key: string) => boolean,
): string[] {
  const resolve = (from: string, name: string): string | undefined => {
    let dir = from;
    for (;;) {
      const key = dir === "" ? `node_modules/${name}` : `${dir}/node_modules/${name}`;
      if (key in lock) return key;
      if (dir === "") return undefined;
      const i = dir.lastIndexOf("/node_modules/");
      dir = i < 0 ? "" : dir.slice(0, i);
    }
  };
  const seen = new Set<string>();
  const stack: string[] = [];
  for (const r of roots) {
    const key = `node_modules/${r}`;
    if (!(key in lock) || !installed(key)) {
      throw new Error(
        `Cannot build: the program imports '${r}', which is not installed; run scripts/setup`,
      );
    }
    stack.push(key);
  }
  while (stack.length > 0) {
    const key = stack.pop()!;
    if (seen.has(key) || isExcludedPackage(key) || !installed(key)) continue;
    seen.add(key);
    const e = lock[key]!;
    for (
      const dep of [
        ...Object.keys(e.dependencies ?? {}),
        ...Object.keys(e.optionalDependencies ?? {}),
        ...Object.keys(e.peerDependencies ?? {}),
      ]
    ) {
      const found = resolve(key, dep);
      if (found !== undefined) stack.push(found);
    }
  }
  return [...seen].sort();
}

/**
 * Whether a file of a shipped package goes into the archive (`path` relative to the repository
 * root). Left out: type declarations, source maps, docs other than licences, TypeScript build
 * info, onnxruntime-node's binaries for other platforms, and node-llama-cpp's llama.cpp source
 * bundle (only for building from source, which the worker never does).
 */
export function keepPackageFile(path: string): boolean {
  const base = path.slice(path.lastIndexOf("/") + 1);
  if (/^(?:licen[cs]e|copying|notice)/i.test(base)) return true;
  if (/\.(?:d\.[cm]?ts|map|md|markdown|tsbuildinfo)$/i.test(base)) return false;
  if (/\/onnxruntime-node\/bin\//.test(path)) {
    return /\/onnxruntime-node\/bin\/napi-v6\/linux\/x64\//.test(path);
  }
  if (/\/node-llama-cpp\/llama\/gitRelease\.bundle$/.test(path)) return false;
  return true;
}

async function* walk(dir: string): AsyncGenerator<{ path: string; isSymlink: boolean }> {
  const entries: Deno.DirEntry[] = [];
  for await (const e of Deno.readDir(dir)) entries.push(e);
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const e of entries) {
    const p = `${dir}/${e.name}`;
    if (e.isDirectory) yield* walk(p);
    else yield { path: p, isSymlink: e.isSymlink };
  }
}

/**
 * The libraries a shim built on libllama compiled for this CPU (`scripts/build_shim --native`)
 * loads, relative to `root`: the regular files of {@link NATIVE_LLAMA_DIR}; none when the shim
 * links the prebuilt libllama of the runtime packages.
 */
export async function nativeLlamaFiles(root: string): Promise<string[]> {
  const out: string[] = [];
  try {
    for await (const e of Deno.readDir(`${root}/${NATIVE_LLAMA_DIR}`)) {
      if (e.isFile) out.push(`${NATIVE_LLAMA_DIR}/${e.name}`);
    }
  } catch { /* no native build */ }
  return out.sort();
}

/**
 * Every file of the runtime tree, relative to the repository root, sorted: the program, the
 * launchers, the llama shim when it is built, the test models, the Deno binary and its link, and
 * the kept files of the runtime packages.
 */
export async function runtimeFiles(root: string = ROOT): Promise<string[]> {
  const files = new Set<string>([...PROGRAM_FILES, ...DENO_FILES]);
  const sources: string[] = [];
  for (const d of PROGRAM_DIRS) {
    for await (const f of walk(`${root}/${d}`)) {
      if (!f.path.endsWith(".ts")) continue;
      files.add(f.path.slice(root.length + 1));
      sources.push(await Deno.readTextFile(f.path));
    }
  }
  sources.push(await Deno.readTextFile(`${root}/main.ts`));
  for (const f of NATIVE_FILES) {
    try {
      if (Deno.statSync(`${root}/${f}`).isFile) files.add(f);
    } catch { /* not built here (no C compiler): the ffi lane refuses with shim_missing */ }
  }
  for (const f of await nativeLlamaFiles(root)) files.add(f);
  for (const d of TEST_MODELS) {
    for await (const f of walk(`${root}/${d}`)) {
      const base = f.path.slice(f.path.lastIndexOf("/") + 1);
      if (base === ".complete" || f.path.includes("/onnx/")) continue;
      files.add(f.path.slice(root.length + 1));
    }
  }
  const lock = JSON.parse(await Deno.readTextFile(`${root}/package-lock.json`))
    .packages as LockPackages;
  const installed = (key: string) => {
    try {
      return Deno.statSync(`${root}/${key}/package.json`).isFile;
    } catch {
      return false;
    }
  };
  for (const pkg of runtimePackages(lock, bareImports(sources), installed)) {
    for await (const f of walk(`${root}/${pkg}`)) {
      const rel = f.path.slice(root.length + 1);
      // A nested node_modules is its own package, walked when the closure holds it.
      if (rel.slice(pkg.length).includes("/node_modules/")) continue;
      if (keepPackageFile(rel)) files.add(rel);
    }
  }
  return [...files].sort();
}

async function run(
  cmd: string,
  args: string[],
  options: { cwd?: string; env?: Record<string, string>; stdin?: Uint8Array } = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = new Deno.Command(cmd, {
    args,
    cwd: options.cwd ?? ROOT,
    stdin: options.stdin === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
    ...(options.env === undefined ? {} : { env: options.env }),
  }).spawn();
  if (options.stdin !== undefined) {
    const w = child.stdin.getWriter();
    await w.write(options.stdin);
    await w.close();
  }
  const out = await child.output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

async function must(cmd: string, args: string[], options: Parameters<typeof run>[2] = {}) {
  const r = await run(cmd, args, options);
  if (r.code !== 0) {
    throw new Error(
      `Cannot build: ${cmd} ${args.slice(0, 3).join(" ")} … exited ${r.code}: ${r.stderr.trim()}`,
    );
  }
  return r.stdout;
}

async function sha256File(path: string): Promise<string> {
  return (await must("sha256sum", ["-b", path])).slice(0, 64);
}

async function sha256Text(text: string): Promise<string> {
  const d = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(d)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

async function gitFacts(): Promise<{ commit: string | null; dirty: boolean; time: number }> {
  const head = await run("git", ["rev-parse", "HEAD"]);
  if (head.code !== 0) return { commit: null, dirty: false, time: 0 };
  const status = await run("git", ["status", "--porcelain", "--untracked-files=no"]);
  const time = Number((await run("git", ["log", "-1", "--format=%ct"])).stdout.trim()) || 0;
  return { commit: head.stdout.trim(), dirty: status.stdout.trim() !== "", time };
}

/**
 * The digest of the inputs: each file's path, size and mtime, the build scripts' bytes, the
 * format and the commit. Equal digests mean the build would write the same artifact.
 */
async function inputsDigest(
  files: string[],
  format: string,
  commit: string | null,
): Promise<string> {
  const lines = [`format ${format}`, `commit ${commit}`, `version ${SYNAPSE_VERSION}`];
  for (const s of ["scripts/build.ts", "scripts/_sfx_header.sh", "scripts/build"]) {
    lines.push(`${s} ${await sha256Text(await Deno.readTextFile(`${ROOT}/${s}`))}`);
  }
  for (const f of files) {
    const st = await Deno.lstat(`${ROOT}/${f}`);
    lines.push(`${f} ${st.size} ${st.mtime?.getTime()}`);
  }
  return await sha256Text(lines.join("\n"));
}

function mib(bytes: number): string {
  return `${(bytes / 1048576).toFixed(1)} MiB`;
}

/** Options of {@link build}. */
export interface BuildOptions {
  /** Output directory. @default `dist` */
  out: string;
  format: "auto" | "archive" | "compile";
  /** Rebuild even when the inputs are unchanged. */
  force: boolean;
  /** Run the artifact and print cold and warm `version` times. */
  measure: boolean;
  /** Where lines go. @default console.error */
  log?: (line: string) => void;
}

/** The result of {@link build}. */
export interface BuildResult {
  record: BuildRecord;
  /** The artifact's path. */
  artifact: string;
  /** Whether an up-to-date artifact was kept. */
  reused: boolean;
}

/**
 * Builds the artifact (see the module doc).
 *
 * @throws {Error} A tool that failed (tar, gzip, sha256sum, deno compile), a package not installed,
 *   or a host that is not linux x86_64.
 */
export async function build(options: BuildOptions): Promise<BuildResult> {
  const log = options.log ?? ((l: string) => console.error(l));
  if (Deno.build.os !== "linux" || Deno.build.arch !== "x86_64") {
    throw new Error(
      `Cannot build: this build ships the linux-x64 Deno and native packages; run it on linux x86_64 (this is ${Deno.build.os} ${Deno.build.arch})`,
    );
  }
  const out = options.out.startsWith("/") ? options.out : `${ROOT}/${options.out}`;
  await Deno.mkdir(out, { recursive: true });
  const started = performance.now();
  const files = await runtimeFiles();
  const git = await gitFacts();
  const denort = Deno.env.get("DENORT_BIN");
  const artifact = `${out}/ck-synapse`;
  const recordPath = `${out}/build.json`;
  const previous = (() => {
    try {
      return JSON.parse(Deno.readTextFileSync(recordPath)) as BuildRecord;
    } catch {
      return undefined;
    }
  })();
  // auto is up to date in whichever format the last build ended with.
  const checked = options.format === "auto" ? (previous?.format ?? "compile") : options.format;
  const artifactBytes = (() => {
    try {
      return Deno.statSync(artifact).size;
    } catch {
      return -1;
    }
  })();
  if (
    !options.force && previous !== undefined && previous.format === checked &&
    previous.inputs_sha256 === await inputsDigest(files, checked, git.commit) &&
    artifactBytes === previous.artifact_bytes
  ) {
    log(
      `build: ${artifact} is up to date (${previous.format}, ${mib(previous.artifact_bytes)}, ` +
        `payload sha256 ${previous.payload_sha256 ?? "-"}); --force rebuilds`,
    );
    return { record: previous, artifact, reused: true };
  }
  let format: "archive" | "compile" = options.format === "auto" ? "compile" : options.format;
  let inputs = await inputsDigest(files, format, git.commit);

  let record: BuildRecord | undefined;
  if (format === "compile") {
    const why = await buildCompile(files, out, git, log);
    if (why === undefined) {
      record = await finish(out, "compile", git, null, null, inputs);
    } else if (options.format === "compile" || denort !== undefined) {
      throw new Error(`Cannot build with deno compile: ${why}`);
    } else {
      log(
        `build: deno compile is not available here (${why}); building the self-extracting archive instead (set DENORT_BIN to a denort ${Deno.version.deno} binary for deno compile)`,
      );
      format = "archive";
      inputs = await inputsDigest(files, format, git.commit);
    }
  }
  if (record === undefined) {
    const { payloadSha, treeBytes } = await buildArchive(files, out, git);
    record = await finish(out, "archive", git, payloadSha, treeBytes, inputs);
  }
  log(
    `build: ${artifact}: ${record.format}, ${mib(record.artifact_bytes)}` +
      (record.tree_bytes === null ? "" : ` (unpacks to ${mib(record.tree_bytes)})`) +
      `, payload sha256 ${record.payload_sha256 ?? "-"}, built in ${
        ((performance.now() - started) / 1000).toFixed(1)
      } s`,
  );
  if (options.measure) {
    const t = await measureStart(artifact);
    log(
      `build: start-up of 'ck-synapse version': cold (unpack + first start) ${
        t.coldMs.toFixed(0)
      } ms, warm ${t.warmMs.toFixed(0)} ms`,
    );
  }
  return { record, artifact, reused: false };
}

async function finish(
  out: string,
  format: "archive" | "compile",
  git: { commit: string | null; dirty: boolean },
  payloadSha: string | null,
  treeBytes: number | null,
  inputs: string,
): Promise<BuildRecord> {
  const artifact = `${out}/ck-synapse`;
  const artifactSha = await sha256File(artifact);
  await Deno.writeTextFile(`${out}/ck-synapse.sha256`, `${artifactSha}  ck-synapse\n`);
  const record: BuildRecord = {
    name: "ck-synapse",
    version: SYNAPSE_VERSION,
    format,
    commit: git.commit,
    dirty: git.dirty,
    payload_sha256: payloadSha,
    artifact_sha256: artifactSha,
    artifact_bytes: (await Deno.stat(artifact)).size,
    tree_bytes: treeBytes,
    inputs_sha256: inputs,
  };
  await Deno.writeTextFile(`${out}/build.json`, JSON.stringify(record, null, 2) + "\n");
  return record;
}

/** What the runtime tree's `build.json` says (lib/version.ts reads it). */
function treeBuildJson(
  format: "archive" | "compile",
  git: { commit: string | null; dirty: boolean },
): string {
  return JSON.stringify(
    {
      name: "ck-synapse",
      version: SYNAPSE_VERSION,
      format,
      commit: git.commit,
      dirty: git.dirty,
      deno: Deno.version.deno,
      target: Deno.build.target,
    },
    null,
    2,
  ) + "\n";
}

async function buildArchive(
  files: string[],
  out: string,
  git: { commit: string | null; dirty: boolean; time: number },
): Promise<{ payloadSha: string; treeBytes: number }> {
  const stage = await Deno.makeTempDir({ dir: out, prefix: ".stage-" });
  try {
    await Deno.writeTextFile(`${stage}/build.json`, treeBuildJson("archive", git));
    // MANIFEST: sha256sum lines of every regular file (links are kept as links, checked by the
    // stamp's listing), in file order.
    const regular: string[] = [];
    let treeBytes = 0;
    for (const f of files) {
      const st = await Deno.lstat(`${ROOT}/${f}`);
      if (st.isSymlink) continue;
      regular.push(f);
      treeBytes += st.size;
    }
    const sums = await must("xargs", ["-0", "sha256sum", "--"], {
      stdin: new TextEncoder().encode(regular.join("\0")),
    });
    const buildSum = await must("sha256sum", ["build.json"], { cwd: stage });
    await Deno.writeTextFile(`${stage}/MANIFEST`, sums + buildSum);
    treeBytes += (await Deno.stat(`${stage}/build.json`)).size +
      (await Deno.stat(`${stage}/MANIFEST`)).size;
    // GNU tar's -T list may switch directory with -C lines.
    const list = [...files, `-C ${stage}`, "build.json", "MANIFEST"].join("\n") + "\n";
    await Deno.writeTextFile(`${stage}/files.txt`, list);
    const payload = `${stage}/payload.tar.gz`;
    const tar = `tar -cf - -C ${shq(ROOT)} --no-recursion --hard-dereference ` +
      `--owner=0 --group=0 --numeric-owner --mtime=@${git.time} --format=gnu -T ${
        shq(`${stage}/files.txt`)
      }`;
    await must("bash", ["-o", "pipefail", "-c", `${tar} | gzip -n -6 > ${shq(payload)}`]);
    const payloadSha = await sha256File(payload);
    // The header carries the MANIFEST's digest: a tree is this build's only if its MANIFEST is
    // this one and every file matches it (a stamp alone is not trusted, F38).
    const manifestSha = await sha256File(`${stage}/MANIFEST`);
    const payloadBytes = (await Deno.stat(payload)).size;
    const template = await Deno.readTextFile(`${ROOT}/scripts/_sfx_header.sh`);
    // The header names its own length and the artifact's: iterate until the numbers settle.
    let offset = 0;
    let header = "";
    for (let i = 0; i < 5; i++) {
      header = template.replace("@VERSION@", SYNAPSE_VERSION)
        .replace("@PAYLOAD_SHA256@", payloadSha)
        .replace("@MANIFEST_SHA256@", manifestSha)
        .replace("@PAYLOAD_OFFSET@", String(offset))
        .replace("@ARTIFACT_SIZE@", String(offset + payloadBytes));
      const len = new TextEncoder().encode(header).length;
      if (len === offset) break;
      offset = len;
    }
    const tmpArtifact = `${stage}/ck-synapse`;
    await Deno.writeTextFile(tmpArtifact, header);
    await must("bash", ["-c", `cat ${shq(payload)} >> ${shq(tmpArtifact)}`]);
    await Deno.chmod(tmpArtifact, 0o755);
    await Deno.rename(tmpArtifact, `${out}/ck-synapse`);
    return { payloadSha, treeBytes };
  } finally {
    await Deno.remove(stage, { recursive: true }).catch(() => {});
  }
}

/**
 * `deno compile` of main.ts with the engines' Worker modules, the llama worker, the test models
 * and the runtime packages. Returns why it could not (Deno could not get `denort`), or undefined.
 *
 * @throws {Error} Any other failure of deno compile.
 */
async function buildCompile(
  files: string[],
  out: string,
  git: { commit: string | null; dirty: boolean },
  log: (line: string) => void,
): Promise<string | undefined> {
  const deno = `${ROOT}/node_modules/.bin/deno`;
  // The tree's build.json must sit beside main.ts (lib/version.ts reads ../build.json).
  const buildJson = `${ROOT}/build.json`;
  await Deno.writeTextFile(buildJson, treeBuildJson("compile", git));
  const includes = new Set<string>(["build.json", "workers/llama.ts", ...TEST_MODELS]);
  const shipped = new Set<string>();
  for (const f of files) {
    if (/^lib\/.*\/_[a-z_]*worker\.ts$/.test(f)) includes.add(f);
    const m = /^node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(f);
    if (m !== null && !DENO_FILES.includes(f)) shipped.add(m[1]!);
  }
  // deno compile embeds the whole node_modules directory: leave out (by real path, which is what
  // it matches) every package the archive does not ship, and the files the archive trims.
  const nm = await Deno.realPath(`${ROOT}/node_modules`);
  const excludes: string[] = [];
  for await (const e of Deno.readDir(nm)) {
    if (e.name.startsWith("@")) {
      for await (const s of Deno.readDir(`${nm}/${e.name}`)) {
        if (!shipped.has(`${e.name}/${s.name}`)) excludes.push(`${nm}/${e.name}/${s.name}`);
      }
    } else if (!shipped.has(e.name)) excludes.push(`${nm}/${e.name}`);
  }
  for (const pkg of shipped) includes.add(`${nm}/${pkg}`);
  excludes.push(
    `${nm}/onnxruntime-node/bin/napi-v6/win32`,
    `${nm}/onnxruntime-node/bin/napi-v6/darwin`,
    `${nm}/onnxruntime-node/bin/napi-v6/linux/arm64`,
    `${nm}/node-llama-cpp/llama/gitRelease.bundle`,
  );
  excludes.sort();
  const tmpOut = `${out}/.ck-synapse.compile-${Deno.pid}`;
  log(
    `build: deno compile${
      Deno.env.get("DENORT_BIN") ? ` (DENORT_BIN=${Deno.env.get("DENORT_BIN")})` : ""
    } ...`,
  );
  try {
    const r = await run(deno, [
      "compile",
      "--no-check",
      "--self-extracting",
      "--unstable-no-legacy-abort",
      // The launcher's V8 flags (field report F37).
      `--v8-flags=${V8_FLAGS}`,
      "--allow-read",
      "--allow-write",
      "--allow-env",
      "--allow-ffi",
      "--allow-sys",
      "--allow-net",
      "--allow-run",
      ...[...includes].sort().flatMap((i) => ["--include", i]),
      ...excludes.flatMap((e) => ["--exclude", e]),
      "--output",
      tmpOut,
      "main.ts",
    ], { env: { DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" } });
    if (r.code !== 0) {
      const text = r.stderr;
      if (Deno.env.get("DENORT_BIN") === undefined && /denort|dl\.deno\.land/.test(text)) {
        const cause = [
          /\d: (dns error[^\n]*)/,
          /\d: (client error[^\n]*)/,
          /(error sending request[^\n]*)/,
        ]
          .map((re) => re.exec(text)?.[1]).find((c) => c !== undefined);
        return `it could not download denort: ${cause?.trim() ?? "download failed"}`;
      }
      throw new Error(`Cannot build: deno compile exited ${r.code}: ${text.trim()}`);
    }
    await Deno.rename(tmpOut, `${out}/ck-synapse`);
    return undefined;
  } finally {
    await Deno.remove(buildJson).catch(() => {});
    await Deno.remove(tmpOut).catch(() => {});
  }
}

/**
 * Runs `ck-synapse version` of an artifact twice with a fresh unpack dir: the first run unpacks
 * (cold), the second starts from the unpacked tree (warm). Milliseconds of wall time.
 *
 * @throws {Error} A run that fails.
 */
export async function measureStart(artifact: string): Promise<{ coldMs: number; warmMs: number }> {
  const tmp = await Deno.makeTempDir({ prefix: "synapse-build-measure-" });
  try {
    const env = {
      SYNAPSE_UNPACK_DIR: `${tmp}/unpack`,
      HOME: tmp,
      XDG_DATA_HOME: `${tmp}/data`,
      PATH: "/usr/bin:/bin",
    };
    const time = async () => {
      const t0 = performance.now();
      const out = await new Deno.Command(artifact, {
        args: ["version"],
        env,
        clearEnv: true,
        cwd: tmp,
        stdout: "piped",
        stderr: "piped",
      }).output();
      const ms = performance.now() - t0;
      if (out.code !== 0) {
        throw new Error(
          `Cannot measure: ${artifact} version exited ${out.code}: ${
            new TextDecoder().decode(out.stderr)
          }`,
        );
      }
      return ms;
    };
    const coldMs = await time();
    const warmMs = await time();
    return { coldMs, warmMs };
  } finally {
    await Deno.remove(tmp, { recursive: true }).catch(() => {});
  }
}

function shq(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

const USAGE =
  `usage: scripts/build [--out DIR] [--format auto|archive|compile] [--force] [--no-measure]`;

if (import.meta.main) {
  const options: BuildOptions = { out: "dist", format: "auto", force: false, measure: true };
  const args = [...Deno.args];
  while (args.length > 0) {
    const a = args.shift()!;
    if (a === "--out" && args.length > 0) options.out = args.shift()!;
    else if (a.startsWith("--out=")) options.out = a.slice(6);
    else if (a === "--format" && args.length > 0) {
      options.format = args.shift() as BuildOptions["format"];
    } else if (a.startsWith("--format=")) options.format = a.slice(9) as BuildOptions["format"];
    else if (a === "--force") options.force = true;
    else if (a === "--no-measure") options.measure = false;
    else if (a === "--help" || a === "-h") {
      console.log(USAGE);
      Deno.exit(0);
    } else {
      console.error(`build: unknown argument '${a}'\n${USAGE}`);
      Deno.exit(2);
    }
  }
  if (!["auto", "archive", "compile"].includes(options.format)) {
    console.error(
      `build: --format takes auto, archive or compile, not '${options.format}'\n${USAGE}`,
    );
    Deno.exit(2);
  }
  try {
    await build(options);
  } catch (err) {
    console.error(`build: ${(err as Error).message}`);
    Deno.exit(1);
  }
}
