/**
 * The servers of the remote lane's tests (docs/remote.md): a provider (a second Synapse serving
 * HTTP on a real loopback socket, the tiny embedder and reranker loaded) and a gateway (a Synapse
 * whose model `remote` is served by a provider).
 *
 * @module
 */
import { MODELS, preload, resultOf, startSynapse } from "../../_helpers.ts";
import type { TestSynapse } from "../../_helpers.ts";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { nullLog } from "../../../lib/log/log.ts";
import { createSynapse } from "../../../lib/synapse.ts";
import type { Synapse } from "../../../lib/synapse.ts";
import { loadConfig } from "../../../lib/config/loader.ts";
import type { LogSink } from "../../../lib/log/log.ts";

/** The tiny embedder's directory (the provider serves it as `tiny`). */
export const EMBED = `${MODELS}/synapse-tiny-embed`;
/** The tiny reranker's directory (the provider serves it as `tiny-rerank`). */
export const RERANK = `${MODELS}/synapse-tiny-rerank`;

/**
 * A provider: a Synapse serving HTTP on loopback, its models loaded (by default the tiny embedder
 * as `tiny` and the tiny reranker as `tiny-rerank`).
 *
 * @param models `preload_models` entries; each must load.
 */
export async function provider(
  models: { model_id: string }[] = [
    preload(EMBED, "tiny"),
    preload(RERANK, "tiny-rerank", { task: "rerank" }),
  ],
): Promise<
  { t: TestSynapse; base: string; [Symbol.asyncDispose](): Promise<void> }
> {
  const t = await startSynapse({ preload_models: models });
  const server = serveHttp(t.syn, { log: nullLog });
  for (const m of models) await ready(t.syn, m.model_id);
  return {
    t,
    base: `http://127.0.0.1:${server.port}`,
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await t[Symbol.asyncDispose]();
    },
  };
}

/** Waits until `model` is ready or failed on `syn`; returns its models.list row. */
// deno-lint-ignore no-explicit-any
export async function ready(syn: Synapse, model: string): Promise<any> {
  for (let i = 0; i < 6000; i++) {
    // deno-lint-ignore no-explicit-any
    const row = resultOf(await syn.call("models.list", {})).models.find((m: any) =>
      m.model_id === model
    );
    if (row !== undefined && row.state !== "loading") return row;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`model ${model} still loading after 2 minutes`);
}

/** A gateway: a Synapse whose model `remote` is served by the provider at `base`. */
export async function gateway(
  base: string,
  providerExtra: Record<string, unknown> = {},
  entryExtra: Record<string, unknown> = {},
  kind = "synapse",
  config: Record<string, unknown> = {},
): Promise<TestSynapse> {
  const g = await startSynapse({
    ...config,
    remote_providers: [{
      id: "peer",
      kind,
      base_url: base,
      allow_loopback: true,
      ...providerExtra,
    }],
    preload_models: [{
      engine: "remote",
      provider: "peer",
      model: "tiny",
      model_id: "remote",
      task: "embed",
      tokenizer_path: `${EMBED}/tokenizer.json`,
      ...entryExtra,
    }],
  });
  await ready(g.syn, "remote");
  return g;
}

/**
 * Boots a Synapse with `config` in the data home under `dir` (the same `dir` again is a restart
 * of the same store). The caller disposes it and removes `dir`.
 */
export async function bootIn(
  dir: string,
  config: Record<string, unknown>,
  options: { log?: LogSink; loadRetryBaseMs?: number } = {},
): Promise<Synapse> {
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify(config),
  };
  return await createSynapse({
    config: loadConfig({ env, cwd: dir }).config,
    env,
    log: options.log ?? nullLog,
    ...(options.loadRetryBaseMs === undefined ? {} : { loadRetryBaseMs: options.loadRetryBaseMs }),
  });
}
