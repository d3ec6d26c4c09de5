/**
 * The in-test subc daemon ("test peer") and the raw endpoints tests drive it with. Import from
 * here; the parts live in `tests/subc/peer/`:
 *
 * - `peer.ts`: {@link startPeer} → {@link Peer}, the daemon stand-in (listener, connection file,
 *   handshake, HELLO/HELLO_ACK, route.open → route.bind, the credit-window relay, counters,
 *   faults); `types.ts` its options, snapshots and counters; `state.ts` its internal state;
 * - `endpoint.ts`: {@link connectEndpoint} → {@link Endpoint}, a raw authenticated connection for
 *   scripting a module or a client frame by frame;
 * - `manifest.ts`: {@link testManifest}, a minimal valid manifest;
 * - `credit_window.ts`: {@link CreditWindow}, the per-route semaphore;
 * - `framed_conn.ts`: {@link FramedConn}, frames over one socket;
 * - `cli.ts`: `deno task subc-peer`, the peer standalone for poking a running module by hand.
 *
 * @example Serve a real module process
 * ```ts ignore
 * await using peer = await startPeer();
 * const child = new Deno.Command("./ck-synapse", {
 *   args: ["serve", ...peer.launchArgs()],
 *   env: peer.launchEnv(),
 * }).spawn();
 * await peer.waitModule("synapse");
 * await using client = await connectEndpoint(peer);
 * const route = await client.openRoute();
 * const terminal = await client.call(route, { method: "models.list", params: {} });
 * ```
 *
 * @module
 */
export {
  DEFAULT_SUBC_CAPABILITIES,
  DEFAULT_SUBC_OPS,
  DEFAULT_WAIT_MS,
  HEALTH_CHECK_DEADLINE_MS,
  Peer,
  PEER_DAEMON_VER,
  PeerError,
  ROUTE_BIND_TIMEOUT_MS,
  startPeer,
} from "./peer/peer.ts";
export type {
  BindEpochMode,
  ConnKind,
  ControlReply,
  ModuleInfo,
  ModuleState,
  PeerErrorCode,
  PeerFrameEvent,
  PeerOptions,
  PeerStats,
  RouteCloseReason,
  RouteInfo,
  Violation,
  WaitOptions,
} from "./peer/peer.ts";
export {
  connectEndpoint,
  Endpoint,
  EndpointError,
  isTerminal,
  jsonBody,
  TEST_IDENTITY,
} from "./peer/endpoint.ts";
export type { EndpointEnd, EndpointOptions, OpenRouteInit } from "./peer/endpoint.ts";
export { testManifest } from "./peer/manifest.ts";
export type { TestManifestOptions } from "./peer/manifest.ts";
export { CREDIT_WINDOW, CreditWindow, creditWindowOf } from "./peer/credit_window.ts";
export { FramedConn } from "./peer/framed_conn.ts";
export type { FramedConnOptions, FrameDirection } from "./peer/framed_conn.ts";
