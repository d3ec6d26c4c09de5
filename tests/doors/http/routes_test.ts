/**
 * The HTTP door's one route table (lib/doors/http/routes.ts): every route is served with its method by
 * its adapter, the 404 answer lists every route, and `ck-synapse serve --help` prints every route.
 */
import assert from "node:assert/strict";
import { cohereEmbedRoute } from "../../../lib/doors/http/cohere_embed.ts";
import { ollamaRoute } from "../../../lib/doors/http/ollama.ts";
import { rerankShapesRoute } from "../../../lib/doors/http/rerank_shapes.ts";
import {
  errorShapeFor,
  findRoute,
  HTTP_ROUTES,
  OPS_PREFIX,
  routeLines,
  routeParam,
  unknownRoute,
} from "../../../lib/doors/http/routes.ts";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { nullLog } from "../../../lib/log/log.ts";
import { teiRoute } from "../../../lib/doors/http/tei.ts";
import { tokenizeRoute } from "../../../lib/doors/http/tokenize_doors.ts";
import { cli } from "../../cli/_launcher.ts";
import { startSynapse } from "../../_helpers.ts";

/** A concrete path of a route (the native door's with a real operation, a model's with an id). */
function pathOf(path: string): string {
  if (path === `${OPS_PREFIX}<method>`) return `${OPS_PREFIX}embed.query`;
  if (path === "/v1/models/<id>") return "/v1/models/synapse-tiny-embed";
  return path;
}

Deno.test("HTTP_ROUTES: one entry per path; findRoute() finds each, an API-shaped one has its module's route", () => {
  const paths = HTTP_ROUTES.map((r) => r.path);
  assert.equal(new Set(paths).size, paths.length, "a path is in the table twice");
  assert.ok(HTTP_ROUTES.length >= 21, `${HTTP_ROUTES.length} routes`);
  const modules = {
    rerank_shapes: rerankShapesRoute,
    cohere_embed: cohereEmbedRoute,
    tei: teiRoute,
    tokenize_doors: tokenizeRoute,
    ollama: ollamaRoute,
  } as const;
  for (const r of HTTP_ROUTES) {
    assert.equal(findRoute(pathOf(r.path)), r, r.path);
    if (Object.hasOwn(modules, r.adapter)) {
      const own = modules[r.adapter as keyof typeof modules](r.path);
      assert.ok(own !== undefined, `${r.adapter} has no route for ${r.path}`);
      assert.equal(own.method, r.method, r.path);
    }
  }
  assert.equal(findRoute("/v2/nothing"), undefined);
  assert.equal(findRoute("/v1/ops"), undefined);
  // A route with a parameter takes any non-empty rest, slashes included; an empty one is no route.
  assert.equal(findRoute("/v1/models/BAAI/bge-small")?.path, "/v1/models/<id>");
  assert.equal(
    routeParam(findRoute("/v1/models/BAAI%2Fbge")!, "/v1/models/BAAI%2Fbge"),
    "BAAI%2Fbge",
  );
  assert.equal(findRoute("/v1/models/"), undefined);
  assert.equal(findRoute("/v1/ops/"), undefined);
  assert.equal(findRoute("/v1/models")?.path, "/v1/models");
  assert.equal(findRoute("/")?.adapter, "tei");
});

Deno.test("errorShapeFor() picks the error body of an unrouted path by its prefix", () => {
  const cases: [string, ReturnType<typeof errorShapeFor>][] = [
    ["/v1/ops", "ops"],
    ["/v1/ops/x", "ops"],
    ["/v1/opsx", "openai_cohere"],
    ["/api", "ollama"],
    ["/api/show", "ollama"],
    ["/apix", "tei"],
    ["/v1", "openai_cohere"],
    ["/v1/files", "openai_cohere"],
    ["/v2/classify", "openai_cohere"],
    ["/v3/x", "tei"],
    ["/predict", "tei"],
    ["/", "tei"],
  ];
  for (const [path, shape] of cases) assert.equal(errorShapeFor(path), shape, path);
});

Deno.test("the HTTP door serves every route of the table with its method, and its 404 names every route", async () => {
  await using t = await startSynapse();
  const server = serveHttp(t.syn, { log: nullLog });
  const base = `http://127.0.0.1:${server.port}`;
  try {
    // The other verb of each route is 405 naming the route's own: the route was found.
    for (const r of HTTP_ROUTES) {
      const res = await fetch(`${base}${pathOf(r.path)}`, {
        method: r.method === "GET" ? "POST" : "GET",
        ...(r.method === "GET" ? { body: "{}" } : {}),
      });
      await res.body?.cancel();
      assert.equal(res.status, 405, `${r.method} ${r.path}`);
      assert.equal(res.headers.get("allow"), r.method, `${r.method} ${r.path}`);
    }
    // An unknown path: 404 unknown_method whose details (kept with the error) list every route;
    // under /v2 its body is the one both OpenAI's and Cohere's clients read.
    const res = await fetch(`${base}/v2/nothing`, { method: "POST", body: "{}" });
    assert.equal(res.status, 404);
    const body = await res.json();
    assert.equal(body.code, "unknown_method");
    assert.equal(body.error.message, body.message);
    assert.equal(body.error.type, "not_found_error");
    // The body has no room for details: the message lists every route of the table.
    assert.equal(
      body.message,
      `Cannot route POST /v2/nothing: no such endpoint; the routes are ${
        HTTP_ROUTES.map((r) => `${r.method} ${r.path}`).join(", ")
      }`,
    );
    const e = unknownRoute("POST", "/v2/nothing");
    assert.equal(e.code, body.code);
    assert.equal(e.message, body.message);
    assert.deepEqual(e.details, {
      path: "/v2/nothing",
      endpoints: HTTP_ROUTES.map((r) => `${r.method} ${r.path}`),
    });
  } finally {
    await server.shutdown();
  }
});

Deno.test("ck-synapse serve --help lists every route of the table", async () => {
  const r = await cli(["serve", "--help"]);
  assert.equal(r.code, 0, r.stderr);
  const listed = r.stdout.split("\n")
    .map((line) => /^ {2}(GET|POST) (\S+) +\S/.exec(line))
    .filter((m) => m !== null)
    .map((m) => `${m![1]} ${m![2]}`);
  assert.deepEqual(listed, routeLines());
});
