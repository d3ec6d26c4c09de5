/**
 * Shared test helpers: a real Synapse on a temp store with a config layered exactly as an
 * operator's would be (SYNAPSE_CONFIG_JSON through loadConfig).
 */
import type { LogSink } from "../lib/log/log.ts";
import { fileURLToPath } from "node:url";
import { loadConfig } from "../lib/config/loader.ts";
import { createSynapse } from "../lib/synapse.ts";
import type { Synapse } from "../lib/synapse.ts";
import type { OpOutcome } from "../lib/ops/dispatcher.ts";

/** Repo root (absolute, no trailing slash). */
export const ROOT: string = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");
/** Generated test models. */
export const MODELS = `${ROOT}/fixtures/models`;
/** The MiniLM-shaped bench encoder. */
export const MINILM = `${ROOT}/fixtures/bench/minilm-shaped`;

/** A Synapse with its temp dir; dispose removes both. */
export interface TestSynapse extends AsyncDisposable {
  syn: Synapse;
  dir: string;
}

/**
 * Starts a Synapse on a temp store with `overrides` as SYNAPSE_CONFIG_JSON.
 */
export async function startSynapse(
  overrides: Record<string, unknown> = {},
  options: { log?: LogSink } = {},
): Promise<TestSynapse> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-test-" });
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    // Serving admission defaults to `warn` here (a test that is not about certification serves
    // its llama models uncertified); a test about certification sets `certification` itself.
    SYNAPSE_CONFIG_JSON: JSON.stringify({ certification: "warn", ...overrides }),
  };
  let syn: Synapse;
  try {
    const { config } = loadConfig({ env, cwd: dir });
    syn = await createSynapse({
      config,
      env,
      ...(options.log === undefined ? {} : { log: options.log }),
    });
  } catch (err) {
    // A refused boot leaves no temp dir behind (tests assert refusals through this too).
    await Deno.remove(dir, { recursive: true });
    throw err;
  }
  return {
    syn,
    dir,
    async [Symbol.asyncDispose]() {
      await syn.dispose();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** A preload entry for a generated model directory. */
export function preload(dir: string, modelId: string, extra: Record<string, unknown> = {}) {
  return {
    engine: "ort",
    model_path: `${dir}/model.onnx`,
    tokenizer_path: `${dir}/tokenizer.json`,
    config_path: `${dir}/config.json`,
    model_id: modelId,
    ...extra,
  };
}

/** The `result` of a successful call; throws with the body otherwise. */
// deno-lint-ignore no-explicit-any
export function resultOf(o: OpOutcome): any {
  if (o.kind !== "result") {
    throw new Error(`expected a result, got ${JSON.stringify(o.body).slice(0, 400)}`);
  }
  return o.body.result;
}

/** Cosine similarity. */
export function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i]! * b[i]!;
    na += a[i]! * a[i]!;
    nb += b[i]! * b[i]!;
  }
  return dot / Math.sqrt(na * nb);
}

/** The `result.error` of a semantic refusal; throws otherwise. */
// deno-lint-ignore no-explicit-any
export function semanticError(o: OpOutcome): any {
  if (o.kind !== "semantic") {
    throw new Error(`expected a semantic error, got ${JSON.stringify(o.body).slice(0, 400)}`);
  }
  return o.body.result.error;
}

/** The body of a channel error; throws otherwise. */
export function channelError(o: OpOutcome): { code: string; message: string } {
  if (o.kind !== "channel") {
    throw new Error(`expected a channel error, got ${JSON.stringify(o.body).slice(0, 400)}`);
  }
  return o.body;
}
