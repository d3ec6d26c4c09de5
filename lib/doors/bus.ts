/**
 * The bus door: this process as the `synapse` module on the subc bus (subc §2–§5, §8), behind
 * `ck-synapse serve --subc <connection-file>` (the command around it: lib/cli/_serve_subc.ts),
 * beside the HTTP door (lib/doors/http/) and sharing its JSON body reader (lib/doors/).
 *
 * In order: take the singleton lease (a second module exits at once, before connecting); read the
 * connection file; connect over loopback TCP and authenticate; send HELLO with the manifest (one
 * management surface listing every operation of the ops dispatcher, with its kind); on HELLO_ACK
 * start the Synapse instance with its store at the ack's storage descriptor (else the data-home
 * rule, `<data_home>/cortexkit/<module_id>/store.db`); then serve the routes the daemon binds,
 * each request through the same dispatcher as the other doors, until the daemon's Goodbye (exit
 * 0), a stop signal (drain, Goodbye, exit 0) or the daemon going away (exit 2, loudly: there is
 * no fallback to standalone serving).
 *
 * The session itself (frames, routes, epochs, Cancel, drain) is `lib/subc/module_session.ts`;
 * this file only ties it to a Synapse instance.
 *
 * @module
 */
import { acquireLease, leaseFileName, singletonLeaseDir } from "../lease/lease.ts";
import { type LogSink, stderrLog } from "../log/log.ts";
import { OPERATIONS } from "../ops/dispatcher.ts";
import type { DoorBackend } from "../ops/door_backend.ts";
import { moduleStorePath } from "../paths.ts";
import { STORE_SCHEMA_VERSION } from "../store/store.ts";
import { createSynapse } from "../synapse.ts";
import type { Synapse, SynapseOptions } from "../synapse.ts";
import { SYNAPSE_VERSION } from "../version.ts";
import { connectAndAuthenticate } from "../subc/auth.ts";
import { readConnectionFile } from "../subc/connection_file.ts";
import type { HelloAck, ManagementOperation } from "../subc/control.ts";
import { SubcWireError } from "../subc/errors.ts";
import { launchNonce, subcModuleId } from "../subc/launch.ts";
import type { LaunchNonce } from "../subc/launch.ts";
import { buildHello, buildManifest } from "../subc/manifest.ts";
import { ModuleSession } from "../subc/module_session.ts";
import type {
  ModuleHealth,
  ModuleReply,
  ModuleRequest,
  ModuleService,
  ModuleSessionOptions,
  SessionEnd,
} from "../subc/module_session.ts";
import { JsonBodyParser } from "./_json_body_parser.ts";
import { parseJsonBytes } from "./_request_body.ts";
import { logRequest } from "./request_log.ts";

const TARGET = "synapse.subc";
const ENCODER = new TextEncoder();

/**
 * Every operation the ops dispatcher serves, with its kind, as the manifest declares them. Read
 * from `OPERATIONS`, so the manifest and the dispatcher cannot disagree.
 *
 * @returns `[{name, kind}]` in the dispatcher's order.
 */
export function managementOperations(): ManagementOperation[] {
  return Object.entries(OPERATIONS).map(([name, op]) => ({ name, kind: op.kind }));
}

/** Options of {@link runSubcModule}. */
export interface SubcModuleOptions {
  /** The connection file (`--subc`). */
  connectionFile: string;
  /**
   * Options of the Synapse instance (config, env, log, worker hooks). `storePath` is the fallback
   * store when HELLO_ACK has no SQLite descriptor (default: the data-home rule); `waitForModels`
   * is ignored (binds never wait for models).
   */
  synapseOptions?: SynapseOptions;
  /** Stops the module: drain, channel-0 Goodbye, then the instance is disposed. */
  signal?: AbortSignal;
  /**
   * The launch nonce for HELLO; `null` for none.
   * @default launchNonce() — `SUBC_LAUNCH_NONCE`, or the descriptor of `SUBC_LAUNCH_NONCE_FD`
   */
  launchNonce?: LaunchNonce | null;
  /** Called once the instance is up and routes are accepted (the HTTP door attaches here). */
  onReady?(synapse: Synapse, ack: HelloAck): void | Promise<void>;
  /** Called after the session ended, before the instance is disposed (the HTTP door stops). */
  beforeDispose?(synapse: Synapse | undefined): void | Promise<void>;
  /** Session timings (tests). */
  session?: Pick<
    ModuleSessionOptions,
    "routeIdleMs" | "reapIntervalMs" | "drainGraceMs" | "helloAckTimeoutMs"
  >;
  /** Hands out the session once it exists (tests read its counters). */
  onSession?(session: ModuleSession): void;
}

/**
 * Runs this process as the module until the session ends, then disposes the instance (the store
 * stays as it is; jobs cut short are failed `module_restarted` at the next boot).
 *
 * @param options Connection file, instance options, stop signal, hooks.
 * @returns How the session ended: `goodbye` (the daemon's) or `stopped` (the signal's).
 * @throws {SynapseError} `module_not_initialized` with `details.lease` when another instance holds
 *   the singleton lease (nothing was connected).
 * @throws {SubcWireError} every refusal of the connection file and the handshake;
 *   `daemon_unreachable`; and what {@link ModuleSession.run} throws: `hello_refused`,
 *   `unsupported_negotiated_version`, `module_init_failed`, `daemon_gone`, …
 */
export async function runSubcModule(options: SubcModuleOptions): Promise<SessionEnd> {
  const synOptions = options.synapseOptions ?? {};
  const log = synOptions.log ?? stderrLog;
  const moduleId = subcModuleId(synOptions.env);
  // Read before anything is spawned (subc §8): a descriptor left unread would be inherited.
  const nonce = options.launchNonce === undefined ? launchNonce() : options.launchNonce;
  // Before connecting (subc §4): a second module refuses here, without registering.
  const lease = await acquireLease(
    singletonLeaseDir(synOptions),
    leaseFileName(moduleId, "file", "singleton"),
    "singleton",
  );
  let synapse: Synapse | undefined;
  try {
    const info = await readConnectionFile(options.connectionFile);
    const endpoint = info.endpoints[0]!;
    let conn: Deno.TcpConn;
    try {
      ({ conn } = await connectAndAuthenticate(info, { signal: options.signal }));
    } catch (err) {
      if (err instanceof SubcWireError) throw err;
      // Stopped while connecting: nothing was registered, nothing to drain.
      if (options.signal?.aborted) return { reason: "stopped" };
      throw new SubcWireError(
        "daemon_unreachable",
        `Cannot serve on the subc bus: nothing answers at ${endpoint.host}:${endpoint.port} ` +
          `(${(err as Error).message}); is the subc daemon running? ${options.connectionFile} ` +
          "may be stale",
        { details: { host: endpoint.host, port: endpoint.port }, cause: err },
      );
    }
    log("info", TARGET, "connected to the subc daemon", {
      daemon: `${endpoint.host}:${endpoint.port}`,
      module_id: moduleId,
    });
    const hello = buildHello(
      buildManifest({
        moduleId,
        moduleVersion: SYNAPSE_VERSION,
        operations: managementOperations(),
        // Only what this build knows for certain: no git sha or lock digest is recorded at build.
        provenance: { store_schema_version: String(STORE_SCHEMA_VERSION) },
      }),
      nonce?.value,
    );
    const parser = new JsonBodyParser();
    const session = new ModuleSession({
      conn,
      hello,
      log,
      ...options.session,
      parseBody: (body) => parseBody(parser, body),
      initialize: async (ack) => {
        const storePath = storePathFor(ack, moduleId, synOptions, log);
        log("info", TARGET, "opening the store", { path: storePath });
        synapse = await createSynapse({
          ...synOptions,
          storePath,
          singletonLease: lease,
          waitForModels: false,
          // Under the bus a malformed CK_LOG* means its default and one warning (subc §6).
          invalidLogEnv: synOptions.invalidLogEnv ?? "warn",
        });
        // A long-running module sweeps expired jobs and pages, and samples perf when asked.
        synapse.startSweeper();
        synapse.startPerfSampler();
        await options.onReady?.(synapse, ack);
        return synapseService(synapse.door("bus"), log);
      },
    });
    options.onSession?.(session);
    try {
      const end = await session.run(options.signal);
      log("info", TARGET, "stopped", { reason: end.reason });
      return end;
    } catch (err) {
      log("error", TARGET, (err as Error).message, {
        reason: err instanceof SubcWireError ? err.reason : "-",
      });
      throw err;
    } finally {
      parser.dispose();
    }
  } finally {
    await options.beforeDispose?.(synapse);
    if (synapse === undefined) lease.release();
    else {
      await synapse.modelsSettled.catch(() => {});
      await synapse.dispose();
    }
  }
}

/** The store path: HELLO_ACK's SQLite descriptor, else `storePath`, else the data-home rule. */
function storePathFor(
  ack: HelloAck,
  moduleId: string,
  options: SynapseOptions,
  log: LogSink,
): string {
  const backend = ack.storage?.backend;
  if (backend?.backend === "sqlite") return backend.path;
  const path = options.storePath ?? moduleStorePath(moduleId, options.env);
  if (backend !== undefined) {
    log("warn", TARGET, "HELLO_ACK offers a store this build cannot open; using the data home", {
      backend: backend.backend,
      path,
    });
  }
  return path;
}

/** Request bodies as the HTTP door reads them: over 1 MiB parsed on a worker thread (F21). */
async function parseBody(parser: JsonBodyParser, body: Uint8Array): Promise<unknown> {
  const parsed = body.byteLength > parser.offloadBytes
    ? await parser.parse(body)
    : parseJsonBytes(body);
  if (parsed.empty) throw new SyntaxError('the body is empty; send {"method", "params"}');
  return parsed.value;
}

/**
 * A Synapse instance, seen through its bus door backend (lib/ops/door_backend.ts), as the
 * session's service: the dispatcher, and the one status function. Each request writes its line of
 * the request log (lib/doors/request_log.ts): target `synapse.subc`, `channel corr` after the
 * outcome.
 */
function synapseService(backend: DoorBackend, log: LogSink): ModuleService {
  return {
    async call(req: ModuleRequest): Promise<ModuleReply> {
      const started = performance.now();
      const { outcome, facts } = await backend.call(req.method, req.params, {
        signal: req.signal,
      });
      let reply: ModuleReply;
      if (outcome.kind === "channel") {
        reply = { kind: "error", body: { code: outcome.body.code, message: outcome.body.message } };
      } else {
        // The same envelope as the HTTP door's /v1/ops body: {"result": …}.
        try {
          reply = { kind: "response", body: ENCODER.encode(JSON.stringify(outcome.body)) };
        } catch (err) {
          reply = {
            kind: "error",
            body: {
              code: "encode_failed",
              message: `Cannot encode response: ${(err as Error).message}`,
            },
          };
        }
      }
      logRequest(log, {
        target: TARGET,
        op: req.method,
        facts,
        tail: { channel: req.channel, corr: String(req.corr) },
        totalMs: performance.now() - started,
      });
      return reply;
    },
    health(): ModuleHealth {
      const s = backend.status();
      const ready = s.models.filter((m) => m.state === "ready").length;
      return {
        // loading is not failing: the daemon must not restart a module for warming up.
        status: s.status === "ok" ? "ok" : s.status === "unavailable" ? "failing" : "degraded",
        ...(s.reason === undefined ? {} : { detail: s.reason }),
        metrics: {
          module_generation: backend.moduleGeneration,
          models_ready: ready,
          models_total: s.models.length,
        },
      };
    },
  };
}
