/**
 * The test peer's internal state (one object per connection and per route), used only by
 * {@link ./peer.ts}. Not part of the peer's API: tests read snapshots (`ModuleInfo`,
 * `RouteInfo`).
 *
 * @module
 */
import type {
  BindIdentity,
  Concurrency,
  Hello,
  Manifest,
  Principal,
  RouteStatus,
} from "../../../lib/subc/control.ts";
import type { SubcFrame } from "../../../lib/subc/bus_envelope.ts";
import { CreditWindow, creditWindowOf } from "./credit_window.ts";
import type { FramedConn } from "./framed_conn.ts";
import type { ConnKind, ModuleState, RouteCloseReason, RouteInfo } from "./types.ts";

/** A channel-0 request of the daemon waiting for its reply. */
export interface PendingControl {
  resolve(result: ControlResult): void;
}

/** How a channel-0 request of the daemon ended. */
export type ControlResult =
  | { kind: "reply"; frame: SubcFrame }
  | { kind: "timeout" }
  | { kind: "gone" };

/** One accepted, authenticated connection. */
export class Link {
  readonly id: number;
  kind: ConnKind = "pending";
  framed!: FramedConn;
  module: ModuleConn | undefined;
  client: ClientConn | undefined;

  constructor(id: number) {
    this.id = id;
  }
}

/** A registered module: its HELLO, credits window, routes, pending control requests. */
export class ModuleConn {
  readonly link: Link;
  readonly moduleId: string;
  readonly hello: Hello;
  manifest: Manifest;
  readonly concurrency: Concurrency;
  readonly window: number;
  ready: boolean;
  state: ModuleState = "registered";
  /** The daemon's corr counter on this endpoint (monotonic from 1). */
  nextCorr = 1n;
  /** The highest corr of a module channel-0 request (HELLO is 1; catalog.update from 2). */
  lastModuleCorr = 1n;
  readonly pending = new Map<bigint, PendingControl>();
  readonly expired = new Set<bigint>();
  readonly routes = new Map<number, Route>();
  readonly slotEpochs = new Map<number, number>();
  readonly reservedSlots = new Set<number>();
  readonly routeStatus = new Map<string, RouteStatus>();
  catalogUpdates = 0;
  readonly pings = new Map<bigint, (frame: SubcFrame | null) => void>();
  nextPingCorr = 1n;

  constructor(link: Link, hello: Hello, concurrency: Concurrency) {
    this.link = link;
    this.moduleId = hello.manifest.module_id;
    this.hello = hello;
    this.manifest = hello.manifest;
    this.concurrency = concurrency;
    this.window = creditWindowOf(concurrency);
    this.ready = hello.manifest.ready ?? true;
  }
}

/** A client connection: its routes and their slots. */
export class ClientConn {
  readonly link: Link;
  readonly routes = new Map<number, Route>();
  readonly slotEpochs = new Map<number, number>();

  constructor(link: Link) {
    this.link = link;
  }
}

/** A route: its two (channel, epoch) ends, its credit window and its counters. */
export class Route {
  readonly id: number;
  readonly client: ClientConn;
  readonly clientChannel: number;
  readonly clientEpoch: number;
  readonly module: ModuleConn;
  readonly moduleChannel: number;
  readonly moduleEpoch: number;
  readonly window: CreditWindow;
  readonly identity: BindIdentity;
  readonly principal: Principal | undefined;
  open = true;
  closedBy: RouteCloseReason | undefined;
  requests = 0;
  terminals = 0;
  cancels = 0;
  leakedCredits = 0;
  readonly terminalsByCorr = new Map<bigint, number>();
  /** Corrs of module→client (reverse) requests still waiting for the client's terminal. */
  readonly reverse = new Set<bigint>();

  constructor(init: {
    id: number;
    client: ClientConn;
    clientChannel: number;
    clientEpoch: number;
    module: ModuleConn;
    moduleChannel: number;
    moduleEpoch: number;
    identity: BindIdentity;
    principal: Principal | undefined;
    onChange: () => void;
  }) {
    this.id = init.id;
    this.client = init.client;
    this.clientChannel = init.clientChannel;
    this.clientEpoch = init.clientEpoch;
    this.module = init.module;
    this.moduleChannel = init.moduleChannel;
    this.moduleEpoch = init.moduleEpoch;
    this.identity = init.identity;
    this.principal = init.principal;
    this.window = new CreditWindow(init.module.window, init.onChange);
  }

  info(): RouteInfo {
    return {
      id: this.id,
      open: this.open,
      closedBy: this.closedBy,
      clientConnId: this.client.link.id,
      clientChannel: this.clientChannel,
      clientEpoch: this.clientEpoch,
      moduleId: this.module.moduleId,
      moduleConnId: this.module.link.id,
      moduleChannel: this.moduleChannel,
      moduleEpoch: this.moduleEpoch,
      window: this.window.size,
      creditsInUse: this.window.inUse,
      creditWaiters: this.window.waiting,
      requests: this.requests,
      terminals: this.terminals,
      cancels: this.cancels,
      leakedCredits: this.leakedCredits,
      terminalsByCorr: this.terminalsByCorr,
      identity: this.identity,
      principal: this.principal,
    };
  }
}
