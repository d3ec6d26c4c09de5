/**
 * Helpers of the tests that cancel a real llama generation: events the test waits on, never
 * elapsed time.
 */
import type { LogSink } from "../lib/log/log.ts";
import type { Synapse } from "../lib/synapse.ts";
import type { GenerateOutput } from "../lib/engines/engine.ts";

/**
 * A log sink that resolves `parked` when the worker says it waits for a CANCEL (its
 * `--test-wait-cancel-after N` hook, after N generated tokens): the moment to cancel, known from
 * the worker itself rather than a timer.
 */
export function parkedWorker(): { log: LogSink; parked: Promise<void> } {
  const { promise, resolve } = Promise.withResolvers<void>();
  return {
    parked: promise,
    log: (_level, _target, message) => {
      if (message.includes("waiting for CANCEL")) resolve();
    },
  };
}

/**
 * Wraps the `gen` model's engine so a test hears how its next generation ended (the real engine
 * still does the work).
 */
export function watchGenerations(syn: Synapse): { ended: Promise<GenerateOutput> } {
  const engine = syn.registry.resolve("gen", "generate").interactive.engine;
  const generate = engine.generate.bind(engine);
  const ended = Promise.withResolvers<GenerateOutput>();
  engine.generate = (request, options) => {
    const out = generate(request, options);
    out.then(ended.resolve, ended.reject);
    return out;
  };
  return { ended: ended.promise };
}
