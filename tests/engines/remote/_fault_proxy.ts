/**
 * A loopback proxy in front of a real provider, for the remote lane's fault tests: it forwards
 * each request as it came (method, path, body, headers but the host) and answers the provider's
 * answer, or injects the fault its `mode` names.
 *
 * - `pass`: forward as is;
 * - `status_500`, `status_503`: answer that status without forwarding;
 * - `unauthorized`: 401; with `requireKey` set, any request without `Bearer <requireKey>` is 401;
 * - `redirect`: 307 to the provider itself (a client that follows redirects would be served);
 * - `slow`: wait `slowMs`, then forward;
 * - `wrong_dims`: forward, then drop the last value of every embedding;
 * - `perturbed`: forward, then add 0.05 to the first value of every embedding (other numbers,
 *   the same headers: a provider that lies about what it computes);
 * - `other_fingerprint`: forward, then answer `x-synapse-fingerprint` of another model.
 *
 * `seen` counts the requests that reached the proxy; `onRequest`, when set, is called with that
 * count as each arrives (before the fault), so a test can change the proxy mid-job.
 */
export type FaultMode =
  | "pass"
  | "status_500"
  | "status_503"
  | "unauthorized"
  | "redirect"
  | "slow"
  | "wrong_dims"
  | "perturbed"
  | "other_fingerprint";

export class FaultProxy {
  mode: FaultMode = "pass";
  seen = 0;
  slowMs = 2000;
  requireKey: string | undefined;
  /** Called with `seen` as each request arrives, before anything else. */
  onRequest: ((seen: number) => void) | undefined;
  /** The authorization header of the last request. */
  lastAuthorization: string | null = null;
  /** Where requests are forwarded; a test may point it at another provider (a swapped deployment). */
  upstream: string;
  #server: Deno.HttpServer<Deno.NetAddr>;

  constructor(upstream: string) {
    this.upstream = upstream;
    this.#server = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen() {} },
      (req) => this.#handle(req),
    );
  }

  get base(): string {
    return `http://127.0.0.1:${this.#server.addr.port}`;
  }

  async #handle(req: Request): Promise<Response> {
    this.seen++;
    this.onRequest?.(this.seen);
    this.lastAuthorization = req.headers.get("authorization");
    const body = req.method === "GET" ? undefined : await req.text();
    if (this.requireKey !== undefined && this.lastAuthorization !== `Bearer ${this.requireKey}`) {
      return Response.json({ error: { message: "bad key" } }, { status: 401 });
    }
    switch (this.mode) {
      case "status_500":
        return Response.json({ error: "boom" }, { status: 500 });
      case "status_503":
        return Response.json({ error: "overloaded" }, { status: 503 });
      case "unauthorized":
        return Response.json({ error: { message: "key expired" } }, { status: 401 });
      case "redirect":
        return new Response(null, {
          status: 307,
          headers: { location: `${this.upstream}${new URL(req.url).pathname}` },
        });
      case "slow":
        await new Promise((r) => setTimeout(r, this.slowMs));
    }
    const url = new URL(req.url);
    const headers = new Headers(req.headers);
    headers.delete("host");
    headers.delete("authorization");
    const res = await fetch(`${this.upstream}${url.pathname}${url.search}`, {
      method: req.method,
      headers,
      ...(body === undefined ? {} : { body }),
    });
    const text = await res.text();
    const out = new Headers(res.headers);
    out.delete("content-length");
    if (this.mode === "other_fingerprint") out.set("x-synapse-fingerprint", "f".repeat(64));
    if ((this.mode === "wrong_dims" || this.mode === "perturbed") && res.ok) {
      const json = JSON.parse(text);
      for (const d of json.data ?? []) {
        if (this.mode === "wrong_dims") d.embedding = d.embedding.slice(0, -1);
        else d.embedding[0] += 0.05;
      }
      return Response.json(json, { status: res.status, headers: out });
    }
    return new Response(text, { status: res.status, headers: out });
  }

  async close(): Promise<void> {
    await this.#server.shutdown();
  }
}
