/**
 * Waiting for a spawned module through the bus, as a client must: route.open is retried by the
 * consumer while the module is not registered (`module_warming`); a module registered but still
 * initialising refuses the bind with `module_not_initialized`, which the decision table of subc §4
 * makes final for route.open, so the caller (this helper) tries again; then `models.list` is read
 * until every model is ready (the process loads them in the background).
 */
import { SubcCallError, SynapseBusClient } from "../../mod.ts";
import type { SynapseBusClientOptions } from "../../mod.ts";

/** Hang guard of {@link connectWhenReady}, in milliseconds. */
const READY_GUARD_MS = 120_000;

/**
 * Connects a SynapseBusClient once the module serves, every model ready.
 *
 * @param options Connection file and client options.
 * @returns The connected client (the caller closes it).
 * @throws {Error} when the module is not ready within the hang guard.
 */
export async function connectWhenReady(
  options: SynapseBusClientOptions,
): Promise<SynapseBusClient> {
  const deadline = Date.now() + READY_GUARD_MS;
  for (;;) {
    let bus: SynapseBusClient;
    try {
      bus = await SynapseBusClient.connect({ openDeadlineMs: READY_GUARD_MS, ...options });
    } catch (err) {
      if (!(err instanceof SubcCallError && err.code === "module_not_initialized")) throw err;
      if (Date.now() > deadline) throw new Error("the module never finished initialising");
      await new Promise((r) => setTimeout(r, 50));
      continue;
    }
    while ((await bus.modelsList()).models.some((m) => m.state !== "ready")) {
      if (Date.now() > deadline) throw new Error("the module's models never became ready");
      await new Promise((r) => setTimeout(r, 50));
    }
    return bus;
  }
}
