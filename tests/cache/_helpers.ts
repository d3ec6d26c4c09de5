/**
 * Helpers of the model cache tests: a temp cache root, fixture bytes and their digests, and a
 * look at what lies under `blobs/` and `tmp/`.
 */
import { createHash } from "node:crypto";
import { MODELS } from "../_helpers.ts";
import type { ModelCacheOptions } from "../../lib/cache/model_cache.ts";
import { ModelCache } from "../../lib/cache/model_cache.ts";
import type { Digest } from "../../lib/cache/types.ts";

/** The generated ONNX encoder. */
export const ONNX_PATH = `${MODELS}/synapse-tiny-embed/model.onnx`;
/** The generated GGUF decoder. */
export const GGUF_PATH = `${MODELS}/synapse-tiny-llama/model.gguf`;
/** The encoder's tokenizer.json. */
export const TOKENIZER_PATH = `${MODELS}/synapse-tiny-embed/tokenizer.json`;
/** The encoder's config.json. */
export const CONFIG_PATH = `${MODELS}/synapse-tiny-embed/config.json`;

/** `sha256:<hex>` of bytes. */
export function digestOfBytes(bytes: Uint8Array): Digest {
  return `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
}

/** A cache on a fresh temp root; dispose removes the root. */
export interface TempCache extends AsyncDisposable {
  cache: ModelCache;
  root: string;
  /** A scratch directory beside the root for test inputs. */
  scratch: string;
}

/** Short retry waits of the tests (ms): the policy's count (3), not its 0.5/1/2 s. */
export const TEST_RETRY_DELAYS_MS = [10, 20, 40];

/** A {@link ModelCache} on a fresh temp root (download retries wait {@link TEST_RETRY_DELAYS_MS}). */
export async function tempCache(opts: Omit<ModelCacheOptions, "root"> = {}): Promise<TempCache> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-cache-test-" });
  const root = `${dir}/models`;
  const scratch = `${dir}/scratch`;
  await Deno.mkdir(scratch);
  return {
    cache: new ModelCache({ downloadRetryDelaysMs: TEST_RETRY_DELAYS_MS, ...opts, root }),
    root,
    scratch,
    async [Symbol.asyncDispose]() {
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** Names of the files directly under `dir` (sorted; none when it does not exist). */
export function filesIn(dir: string): string[] {
  try {
    return [...Deno.readDirSync(dir)].map((e) => e.name).sort();
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return [];
    throw err;
  }
}

/** Every `tmp/` entry (partials, locks, half-written files): none once a call has ended. */
export function tmpLeftovers(root: string): string[] {
  return filesIn(`${root}/tmp`);
}

/** Writes `bytes` to `<dir>/<name>` and returns the path. */
export async function writeScratch(
  dir: string,
  name: string,
  bytes: Uint8Array | string,
): Promise<string> {
  const path = `${dir}/${name}`;
  if (typeof bytes === "string") await Deno.writeTextFile(path, bytes);
  else await Deno.writeFile(path, bytes);
  return path;
}
