/**
 * What a `model.load` request names, turned into the files to bring into the cache: a local file
 * or directory (`source: "path"`), one pinned URL (`source: "url"`), or files of a Hugging Face
 * repository at a commit (`source: "hf"`). Unpinned sources are refused here, before any job
 * exists (unpinned HF, `main` or unhashed URLs → `invalid_request`; docs/operations.md
 * "model.load").
 *
 * @module
 */
import { existsSync, statSync } from "node:fs";
import { SynapseError } from "../contract/errors.ts";
import type { Digest } from "../cache/types.ts";
import type { ModelEngine, ModelTask } from "./model.ts";

/** A file entry of `model.load`: a name, or a pinned remote file. */
export type LoadFileParam = string | {
  url?: string | undefined;
  path?: string | undefined;
  sha256: Digest;
  size?: number | undefined;
};

/** Parsed `model.load` params (lib/contract/schemas.ts `ModelLoadParams`). */
export interface LoadRequest {
  source?: "path" | "url" | "hf" | undefined;
  path?: string | undefined;
  url?: string | undefined;
  repo?: string | undefined;
  revision?: string | undefined;
  files?: {
    model?: LoadFileParam | undefined;
    tokenizer?: LoadFileParam | undefined;
    config?: LoadFileParam | undefined;
    extra?: LoadFileParam[] | undefined;
  } | undefined;
  expected_digest?: Digest | undefined;
  engine?: ModelEngine | undefined;
  task?: ModelTask | undefined;
  pooling?: "mean" | "cls" | "last" | undefined;
  normalize?: boolean | undefined;
  max_tokens?: number | undefined;
  model_id?: string | undefined;
  pin?: boolean | undefined;
  /** Model id of the reference lane with the same weights (`ModelSource.referenceModel`). */
  reference_model?: string | undefined;
  /** Prompt table of an embed model (`ModelSource.prompts`): name → prefix. */
  prompts?: Record<string, string> | undefined;
  /** The prompt applied when a request selects none; must name one of `prompts`. */
  default_prompt_name?: string | undefined;
  /** Matryoshka widths (`ModelSource.matryoshkaDims`). */
  matryoshka_dims?: number[] | undefined;
  request_key?: string | undefined;
  deadline_ms?: number | undefined;
}

/** Where one file comes from. */
export type FileRef =
  | { kind: "local"; path: string; sha256?: Digest }
  | { kind: "url"; url: string; sha256: Digest; size?: number };

/** One file to fetch, by role. */
export interface PlannedFile {
  role: "model" | "tokenizer" | "config";
  ref: FileRef;
}

function bad(message: string, details: Record<string, unknown>): SynapseError {
  return new SynapseError("invalid_request", `Cannot load: ${message}`, { details });
}

/**
 * The files of a `model.load` request.
 *
 * - `path` (a file or a directory): the model is `files.model` inside the directory, else
 *   `model.onnx`, `model.gguf`, `onnx/model.onnx` or the directory's only `.gguf`;
 *   `tokenizer.json` and `config.json` beside it are taken when present. `expected_digest`
 *   pins the model file.
 * - `url`: the model file's URL with `expected_digest`; `files.tokenizer` / `files.config` as
 *   `{url, sha256}`.
 * - `hf`: `repo` at `revision` (a 40-hex commit; a branch or tag is refused, it can move);
 *   `files.model` as `{path, sha256}` (or a path with `expected_digest`), and optional
 *   tokenizer and config the same way. URLs are `<hf_endpoint>/<repo>/resolve/<revision>/<path>`.
 *
 * @throws {SynapseError} `invalid_request` naming the field: no source, a missing local file,
 *   an unpinned URL or revision, `files.extra` (not served yet).
 */
export function resolveLoadFiles(req: LoadRequest, hfEndpoint: string): PlannedFile[] {
  const source = req.source ??
    (req.path !== undefined
      ? "path"
      : req.url !== undefined
      ? "url"
      : req.repo !== undefined
      ? "hf"
      : undefined);
  if (source === undefined) {
    throw bad(
      "give a source: path (a local file or directory), url (with expected_digest) or repo and revision",
      {
        field: "source",
      },
    );
  }
  if (req.files?.extra !== undefined && req.files.extra.length > 0) {
    throw bad("files.extra is not supported by this build's engines", { field: "files.extra" });
  }
  if (source === "path") return localPlan(req);
  if (source === "url") {
    if (req.url === undefined) throw bad("source 'url' needs url", { field: "url" });
    if (req.files?.model === undefined && req.expected_digest === undefined) {
      throw bad(
        `${req.url} is not pinned: give expected_digest (its SHA-256); an unhashed download is refused`,
        { field: "expected_digest", url: req.url },
      );
    }
    const model = remoteRef(
      "files.model",
      req.files?.model ?? req.url,
      undefined,
      req.expected_digest,
    );
    const out: PlannedFile[] = [{ role: "model", ref: model }];
    for (const role of ["tokenizer", "config"] as const) {
      const f = req.files?.[role];
      if (f !== undefined) out.push({ role, ref: remoteRef(`files.${role}`, f, undefined) });
    }
    return out;
  }
  if (req.repo === undefined) throw bad("source 'hf' needs repo", { field: "repo" });
  if (req.revision === undefined || !/^[0-9a-f]{40}$/.test(req.revision)) {
    throw bad(
      `revision must be a 40-hex commit of ${req.repo} (a branch or tag such as 'main' can move, so it is not a pin)`,
      { field: "revision", revision: req.revision ?? null },
    );
  }
  const base = `${hfEndpoint.replace(/\/+$/, "")}/${req.repo}/resolve/${req.revision}/`;
  if (req.files?.model === undefined) {
    throw bad("source 'hf' needs files.model", { field: "files.model" });
  }
  const out: PlannedFile[] = [{
    role: "model",
    ref: remoteRef("files.model", req.files.model, base, req.expected_digest),
  }];
  for (const role of ["tokenizer", "config"] as const) {
    const f = req.files[role];
    if (f !== undefined) out.push({ role, ref: remoteRef(`files.${role}`, f, base) });
  }
  return out;
}

function remoteRef(
  field: string,
  f: LoadFileParam,
  base: string | undefined,
  expected?: Digest,
): FileRef {
  const sha256 = typeof f === "string" ? expected : f.sha256;
  const target = typeof f === "string"
    ? (base === undefined ? f : base + f)
    : f.url ?? (f.path !== undefined && base !== undefined ? base + f.path : undefined);
  if (target === undefined) {
    throw bad(`${field} needs a url (or a path inside the repo)`, { field });
  }
  if (!/^https?:\/\//i.test(target)) {
    throw bad(`${field}: '${target}' is not an http(s) URL`, { field, url: target });
  }
  if (sha256 === undefined) {
    throw bad(
      `${field} (${target}) is not pinned: give its SHA-256 (${
        field === "files.model" ? "expected_digest or " : ""
      }{url, sha256}); an unhashed download is refused`,
      { field, url: target },
    );
  }
  const size = typeof f === "string" ? undefined : f.size;
  return { kind: "url", url: target, sha256, ...(size === undefined ? {} : { size }) };
}

function localPlan(req: LoadRequest): PlannedFile[] {
  if (req.path === undefined) throw bad("source 'path' needs path", { field: "path" });
  let st;
  try {
    st = statSync(req.path);
  } catch {
    throw bad(`${req.path} does not exist`, { field: "path", path: req.path });
  }
  const dir = st.isDirectory()
    ? req.path.replace(/\/+$/, "")
    : req.path.slice(0, Math.max(0, req.path.lastIndexOf("/"))) || ".";
  const named = (role: "model" | "tokenizer" | "config"): string | undefined => {
    const f = req.files?.[role];
    if (f === undefined) return undefined;
    if (typeof f !== "string") {
      if (f.path === undefined) {
        throw bad(`files.${role}: source 'path' takes a file name`, { field: `files.${role}` });
      }
      return f.path.startsWith("/") ? f.path : `${dir}/${f.path}`;
    }
    return f.startsWith("/") ? f : `${dir}/${f}`;
  };
  let model = named("model") ?? (st.isDirectory() ? findModelFile(dir) : req.path);
  if (model === undefined || !existsSync(model)) {
    throw bad(
      `no model file in ${dir}: expected model.onnx, model.gguf, onnx/model.onnx or one .gguf file (or name it in files.model)`,
      { field: "path", path: req.path },
    );
  }
  model = model.replace(/\/+/g, "/");
  const out: PlannedFile[] = [{
    role: "model",
    ref: {
      kind: "local",
      path: model,
      ...(req.expected_digest === undefined ? {} : { sha256: req.expected_digest }),
    },
  }];
  for (const role of ["tokenizer", "config"] as const) {
    const explicit = named(role);
    const path = explicit ?? `${dir}/${role}.json`;
    if (explicit !== undefined && !existsSync(path)) {
      throw bad(`files.${role}: ${path} does not exist`, { field: `files.${role}`, path });
    }
    if (existsSync(path)) out.push({ role, ref: { kind: "local", path } });
  }
  return out;
}

function findModelFile(dir: string): string | undefined {
  for (const name of ["model.onnx", "model.gguf", "onnx/model.onnx"]) {
    if (existsSync(`${dir}/${name}`)) return `${dir}/${name}`;
  }
  const ggufs = [...Deno.readDirSync(dir)].filter((e) => e.isFile && e.name.endsWith(".gguf"));
  return ggufs.length === 1 ? `${dir}/${ggufs[0]!.name}` : undefined;
}
