/**
 * The routes a module session has installed (subc §3): which `(channel, epoch)` pairs it serves,
 * the epoch rules of `route.bind`, the requests in flight on each route, and which routes have
 * been idle long enough to reap.
 *
 * A route is installed on a channel with an epoch. A bind on a free channel installs it; a bind
 * with a strictly higher epoch replaces the installed one (the caller aborts the old route's
 * work); an equal or lower epoch is stale and refused. A data frame is served only when its
 * `(channel, epoch)` is exactly the installed pair.
 *
 * @module
 */
import type { BindIdentity, Principal } from "./control.ts";

/** One request being served: its abort handle and how its terminal must end. */
export interface InFlightRequest {
  /** Correlation id of the request (and of its terminal). */
  readonly corr: bigint;
  /** Aborts the work: Cancel, route Goodbye, a replacing bind, the end of the session. */
  readonly controller: AbortController;
  /** A Cancel arrived: the terminal is Error `cancelled`, whatever the work answered. */
  cancelled: boolean;
  /** The route is gone: no terminal is sent at all. */
  suppressed: boolean;
}

/** An installed route. */
export interface Route {
  /** Route slot, 1–65535. */
  readonly channel: number;
  /** Bind epoch. */
  readonly epoch: number;
  /** The bind's identity (unattested: for logs and scoping, never to authorize). */
  readonly identity: BindIdentity;
  /** Who opened it, as the daemon attests; absent from older daemons. */
  readonly principal: Principal | undefined;
  /**
   * The flow the route was opened for (`route.bind` `scope.attributes.flow_id`), or undefined
   * for an ordinary route. A flow-scoped route serves query operations only.
   */
  readonly flowId: string | undefined;
  /** Requests in flight, by corr. */
  readonly inFlight: Map<bigint, InFlightRequest>;
  /** Last frame received or terminal sent on it, ms (the session's clock). */
  lastActivityMs: number;
}

/** What a `route.bind` for `(channel, epoch)` does. */
export type BindDecision =
  | { kind: "install" }
  | { kind: "replace"; previous: Route }
  | { kind: "stale"; installedEpoch: number };

/** The installed routes of one session, by channel. */
export class RouteTable {
  readonly #routes = new Map<number, Route>();

  /** Number of installed routes. */
  get size(): number {
    return this.#routes.size;
  }

  /** Requests in flight over every route. */
  get inFlightCount(): number {
    let n = 0;
    for (const r of this.#routes.values()) n += r.inFlight.size;
    return n;
  }

  /**
   * What a bind of `(channel, epoch)` would do (subc §3): install on a free channel, replace a
   * strictly lower installed epoch, refuse an equal or lower one as stale.
   *
   * @param channel The bind's `route_channel`.
   * @param epoch The bind's `epoch`.
   * @returns The decision; nothing changes until {@link install}.
   */
  decide(channel: number, epoch: number): BindDecision {
    const installed = this.#routes.get(channel);
    if (installed === undefined) return { kind: "install" };
    if (epoch > installed.epoch) return { kind: "replace", previous: installed };
    return { kind: "stale", installedEpoch: installed.epoch };
  }

  /**
   * Installs a route on its channel.
   *
   * @param route The route.
   * @returns The route it replaced, if any (its work is the caller's to abort).
   */
  install(route: Route): Route | undefined {
    const previous = this.#routes.get(route.channel);
    this.#routes.set(route.channel, route);
    return previous;
  }

  /**
   * The route installed on `channel` with exactly `epoch`.
   *
   * @returns The route, or undefined when the channel is free or holds another epoch.
   */
  get(channel: number, epoch: number): Route | undefined {
    const route = this.#routes.get(channel);
    return route !== undefined && route.epoch === epoch ? route : undefined;
  }

  /**
   * Removes the route on `channel` if it is `route` (a later bind may have replaced it).
   *
   * @returns Whether it was removed.
   */
  remove(route: Route): boolean {
    if (this.#routes.get(route.channel) !== route) return false;
    this.#routes.delete(route.channel);
    return true;
  }

  /**
   * Routes with nothing in flight and no activity for at least `idleMs`.
   *
   * @param nowMs The session's clock.
   * @param idleMs Idle time that makes a route reapable.
   */
  idle(nowMs: number, idleMs: number): Route[] {
    return [...this.#routes.values()].filter((r) =>
      r.inFlight.size === 0 && nowMs - r.lastActivityMs >= idleMs
    );
  }

  /** Every installed route. */
  all(): Route[] {
    return [...this.#routes.values()];
  }

  /** Removes every route. */
  clear(): Route[] {
    const all = this.all();
    this.#routes.clear();
    return all;
  }
}
