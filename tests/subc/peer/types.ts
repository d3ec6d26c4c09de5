/**
 * The public shapes of the test peer ({@link ./peer.ts}): options, snapshots, counters, errors and
 * the constants of the daemon it stands in for.
 *
 * @module
 */
import type {
  BindIdentity,
  Concurrency,
  ErrorBody,
  Hello,
  Manifest,
  Principal,
  RouteStatus,
} from "../../../lib/subc/control.ts";
import type { SubcFrame } from "../../../lib/subc/bus_envelope.ts";
import type { FrameDirection } from "./framed_conn.ts";

/** The daemon waits this long for a module's route.bind ack (subc §3), in milliseconds. */
export const ROUTE_BIND_TIMEOUT_MS = 12_000;
/** Deadline of a health.check probe (subc §3), in milliseconds. */
export const HEALTH_CHECK_DEADLINE_MS = 5_000;
/** `subc_ops` the peer offers by default: what a module may send on channel 0. */
export const DEFAULT_SUBC_OPS: readonly string[] = ["catalog.update", "route.status"];
/** `subc_capabilities` the peer offers by default. */
export const DEFAULT_SUBC_CAPABILITIES: readonly string[] = ["manifest_registration_v1"];
/** The version string the peer sends in the handshake and the connection file. */
export const PEER_DAEMON_VER = "0.0.0-subc-peer";
/** Default hang guard of {@link Peer.until} and the peer's other waits, in milliseconds. */
export const DEFAULT_WAIT_MS = 60_000;

/**
 * How the peer picks the module-side epoch of a new route.
 *
 * - `fresh` (the daemon): a free slot, its epoch one above the slot's last;
 * - `equal`: when the module has a live route, the newest one's slot with the SAME epoch (a fault:
 *   the module must refuse it; the refusal is relayed verbatim to the opener);
 * - `lower`: likewise with an epoch one LOWER (0 at least).
 *
 * With no live route on the module, `equal` and `lower` allocate as `fresh`.
 */
export type BindEpochMode = "fresh" | "equal" | "lower";

/** Options of {@link startPeer}. Every field is optional. */
export interface PeerOptions {
  /**
   * The data home the daemon publishes under (`<dataHome>/cortexkit/run/subc-connection.json`)
   * and the storage descriptor points into (`<dataHome>/cortexkit/<id>/store.db`). Forward slashes.
   * @default a fresh temporary directory, removed by {@link Peer.close}
   */
  dataHome?: string;
  /**
   * Where to publish the connection file.
   * @default `<dataHome>/cortexkit/run/subc-connection.json`
   */
  connectionFile?: string;
  /**
   * Whether HELLO_ACK carries a storage descriptor (the daemon config has a `storage` section).
   * @default true
   */
  storage?: boolean;
  /** HELLO_ACK `subc_ops`. @default {DEFAULT_SUBC_OPS} */
  subcOps?: readonly string[];
  /** HELLO_ACK `subc_capabilities`. @default {DEFAULT_SUBC_CAPABILITIES} */
  subcCapabilities?: readonly string[];
  /** HELLO_ACK `machine_id`; omitted when unset. */
  machineId?: string;
  /**
   * HELLO_ACK `negotiated_ver` (a u8). The daemon sends 2; 1 is the fault a module must refuse.
   * @default 2
   */
  negotiatedVer?: number;
  /**
   * The module ids the daemon is configured to run: `route.open` to one of them that has not
   * registered yet answers `module_warming` (retryable); to any other unregistered id,
   * `target_unavailable`. Any module that connects may register, configured or not.
   * @default ["synapse"]
   */
  modules?: readonly string[];
  /** How module-side epochs are picked ({@link BindEpochMode}). @default "fresh" */
  bindEpochMode?: BindEpochMode;
  /** How long to wait for a route.bind ack, in milliseconds. @default {ROUTE_BIND_TIMEOUT_MS} */
  bindTimeoutMs?: number;
  /** Deadline of {@link Peer.healthCheck}, in milliseconds. @default {HEALTH_CHECK_DEADLINE_MS} */
  healthDeadlineMs?: number;
  /** Handshake deadline, in milliseconds. @default 10000 (the TypeScript SDK's) */
  authDeadlineMs?: number;
  /**
   * The `principal` of every route.bind; `null` omits it. By default: `{kind: "reserved",
   * module_id}` when `route.open.consumer_identity` carries a launch nonce that
   * {@link Peer.launchEnv} minted for that module id, `{kind: "unverified"}` for any other
   * consumer identity, `{kind: "direct"}` without one (the peer's approximation of the daemon's
   * attestation).
   */
  principal?: Principal | null;
  /** The connection key (≥ 32 bytes; tests pass the vectors'). @default 32 random bytes */
  key?: Uint8Array;
  /** The daemon id (16 bytes). @default 16 random bytes */
  daemonId?: Uint8Array;
  /**
   * The server nonce of EVERY handshake (32 bytes). Only for the auth vectors: a fixed nonce
   * defeats replay protection. @default a fresh random nonce per handshake
   */
  serverNonce?: Uint8Array;
  /** Version string of the handshake and the connection file. @default {PEER_DAEMON_VER} */
  daemonVer?: string;
  /** Called with every frame the peer reads or writes (logs, frame taps); must not throw. */
  onFrame?: (event: PeerFrameEvent) => void;
  /** Called with each of the peer's own notes (violations, refusals, rejected frames). */
  onLog?: (line: string) => void;
}

/** What kind of endpoint a connection turned out to be; `pending` until its first frame. */
export type ConnKind = "pending" | "module" | "client";

/** One frame the peer read (`in`) or wrote (`out`). */
export interface PeerFrameEvent {
  /** `in`: read from the connection; `out`: written to it. */
  direction: FrameDirection;
  /** The connection's id (1, 2, … in accept order). */
  connId: number;
  /** What the connection is. */
  kind: ConnKind;
  /** The module id, on a module connection once HELLO was accepted. */
  moduleId: string | undefined;
  /** The frame. */
  frame: SubcFrame;
}

/** A protocol break (or, in {@link PeerStats.warnings}, a convention break) the peer saw. */
export interface Violation {
  /** Who broke it. */
  side: ConnKind;
  /** The connection. */
  connId: number;
  /**
   * A stable snake_case name: `terminal_unknown_corr`, `terminal_after_terminal`,
   * `stream_data_unknown_corr`, `hello_corr`, `control_corr_reused`, `catalog_update_not_offered`,
   * `bind_not_higher_accepted`, `bind_ack_body`, `reply_unknown_corr`, `route_status_corr`,
   * `unexpected_frame`, `duplicate_request_corr`, `reverse_terminal_unknown_corr`; warnings:
   * `hello_flags`, `control_reply_flags`.
   */
  code: string;
  /** What happened. */
  message: string;
}

/** The state of a registered module. */
export type ModuleState = "registered" | "draining" | "gone";

/** A snapshot of one module connection ({@link Peer.module}). */
export interface ModuleInfo {
  /** `manifest.module_id`. */
  moduleId: string;
  /** Its connection's id. */
  connId: number;
  /** `registered`; `draining` after {@link Peer.goodbyeModule}; `gone` once it left. */
  state: ModuleState;
  /** The HELLO as parsed (manifest unknown fields stripped). */
  hello: Hello;
  /** The manifest now (its `provides` and `capabilities` replaced by each catalog.update). */
  manifest: Manifest;
  /** The concurrency that sized the credit window (absent in the manifest: module_managed). */
  concurrency: Concurrency;
  /** Credits per route. */
  window: number;
  /** Whether routes may be opened (`manifest.ready`, as flipped by catalog.update). */
  ready: boolean;
  /** `HELLO.control_ops` (`null` or absent: the legacy baseline). */
  controlOps: string[] | null;
  /** `HELLO.launch_nonce`, when sent. */
  launchNonce: string | undefined;
  /** catalog.update requests accepted. */
  catalogUpdates: number;
  /** The latest `route.status` push per module-side route, in arrival order. */
  routeStatuses: RouteStatus[];
  /** Routes open now. */
  openRoutes: number;
}

/** Why a route closed. */
export type RouteCloseReason =
  | "client_goodbye"
  | "client_gone"
  | "module_goodbye"
  | "module_gone"
  | "peer_goodbye"
  | "peer_closed"
  | "replaced";

/** A snapshot of one route ({@link Peer.routes}). */
export interface RouteInfo {
  /** Peer-wide id (1, 2, … in open order). */
  id: number;
  /** Whether the route is open. */
  open: boolean;
  /** Why it closed, once closed. */
  closedBy: RouteCloseReason | undefined;
  /** The client's connection. */
  clientConnId: number;
  /** The route's slot on the client connection. */
  clientChannel: number;
  /** Its epoch there. */
  clientEpoch: number;
  /** The module. */
  moduleId: string;
  /** The module's connection. */
  moduleConnId: number;
  /** The route's slot on the module connection. */
  moduleChannel: number;
  /** Its epoch there. */
  moduleEpoch: number;
  /** Credits in all. */
  window: number;
  /** Credits held now (requests in flight). */
  creditsInUse: number;
  /** Requests waiting for a credit now (their client's reader is stalled). */
  creditWaiters: number;
  /** Requests forwarded to the module. */
  requests: number;
  /** Module terminals that released a credit (exactly one per request when all is well). */
  terminals: number;
  /** Cancels relayed. */
  cancels: number;
  /** Credits held when the route closed: requests that never got a module terminal. */
  leakedCredits: number;
  /**
   * Module terminals per request corr (a count above 1 is a violation). A live read-only view,
   * not a copy (a load test has thousands of corrs per route).
   */
  terminalsByCorr: ReadonlyMap<bigint, number>;
  /** The bind identity. */
  identity: BindIdentity;
  /** The bind principal, when sent. */
  principal: Principal | undefined;
}

/** Counters of everything the peer saw ({@link Peer.stats}). */
export interface PeerStats {
  /** Connections accepted. */
  connections: number;
  /** Handshakes that failed, with the library's reason. */
  authFailures: { connId: number; reason: string }[];
  /** Connections closed because a frame broke the envelope rules, with the reason. */
  wireRejections: { connId: number; kind: ConnKind; reason: string }[];
  /** HELLOs accepted. */
  modulesRegistered: number;
  /** HELLOs refused, by ErrorBody code. */
  helloRefusals: Record<string, number>;
  /** Routes opened. */
  routesOpened: number;
  /** route.open refusals, by ErrorBody code (module refusals relayed verbatim included). */
  routeOpenRefusals: Record<string, number>;
  /** route.bind requests that got no answer in time. */
  bindTimeouts: number;
  /** Requests forwarded to modules. */
  requestsForwarded: number;
  /** Module terminals that released a credit. */
  terminals: number;
  /** Requests that had to wait for a credit. */
  creditWaits: number;
  /** Terminals for a corr holding no credit (ignored, with a warning, as the daemon does). */
  overReleases: number;
  /** Credits held by routes when they closed (sum of {@link RouteInfo.leakedCredits}). */
  creditsLeaked: number;
  /** Cancels relayed to modules. */
  cancelsRelayed: number;
  /** StreamData frames relayed (either way). */
  streamDataRelayed: number;
  /** Frames dropped: on an unknown or stale channel/epoch, or after their route closed. */
  framesDropped: number;
  /** Module replies to a channel-0 request whose wait had already ended (timeout). */
  lateControlReplies: number;
  /** Protocol breaks (tests assert this is empty). */
  violations: Violation[];
  /** Convention breaks (flags the SDKs set otherwise). */
  warnings: Violation[];
}

/** Codes of {@link PeerError}. */
export type PeerErrorCode =
  | "no_module"
  | "not_advertised"
  | "timeout"
  | "error_reply"
  | "bad_reply"
  | "module_gone"
  | "closed";

/** A request the peer made of a module failed ({@link Peer.healthCheck}, {@link Peer.controlRequest}). */
export class PeerError extends Error {
  /** Why. */
  readonly code: PeerErrorCode;
  /** The module's ErrorBody, for `error_reply`. */
  readonly body: ErrorBody | undefined;

  /**
   * @param code Why.
   * @param message House-style message.
   * @param body The module's ErrorBody, for `error_reply`.
   */
  constructor(code: PeerErrorCode, message: string, body?: ErrorBody) {
    super(message);
    this.name = "PeerError";
    this.code = code;
    this.body = body;
  }
}

/** The module's answer to a channel-0 request of the peer ({@link Peer.controlRequest}). */
export interface ControlReply {
  /** The reply frame (Response or Error). */
  frame: SubcFrame;
  /** Its body as JSON. */
  body: unknown;
}

/** Options of the peer's waits. */
export interface WaitOptions {
  /** Hang guard, in milliseconds. @default {DEFAULT_WAIT_MS} */
  timeoutMs?: number;
  /** What is awaited, for the timeout message. */
  what?: string;
}
