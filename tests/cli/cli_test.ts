/**
 * The real launcher (`./ck-synapse`) as a subprocess: exit codes, output shapes, and a served
 * instance called with `--url`. Every child gets a temp XDG_DATA_HOME / XDG_CONFIG_HOME / HOME,
 * so no test touches the real home.
 */
import assert from "node:assert/strict";
import { cli, isolatedEnv, LAUNCHER } from "./_launcher.ts";

Deno.test("ck-synapse embed --json prints the envelope with a 64-hex fingerprint, labelled test model", async () => {
  const r = await cli(["embed", "hello world", "--json"]);
  assert.equal(r.code, 0, r.stderr);
  const res = JSON.parse(r.stdout);
  assert.match(res.fingerprint, /^[0-9a-f]{64}$/);
  assert.equal(res.test_model, true);
  assert.equal(res.model_id, "synapse-tiny-embed");
  assert.equal(res.vectors.length, 1);
  assert.equal(res.vectors[0].vector.length, res.dims);
});

Deno.test("ck-synapse embed prints a human summary; several texts go through embed.batch", async () => {
  const [one, two] = await Promise.all([cli(["embed", "hello world"]), cli(["embed", "a", "b c"])]);
  assert.equal(one.code, 0, one.stderr);
  assert.match(one.stdout, /synapse-tiny-embed \(test model\)/);
  assert.match(one.stdout, /fingerprint +[0-9a-f]{64}/);
  assert.match(one.stdout, /item 0 +4 tokens +\[(-?\d+\.\d+, ){7}-?\d+\.\d+, …\]/);
  assert.equal(two.code, 0, two.stderr);
  assert.match(two.stdout, /item 0 /);
  assert.match(two.stdout, /item 1 /);
});

Deno.test("ck-synapse call exits 2 naming an unknown field, 1 for a semantic refusal, 2 for bad PARAMS_JSON", async () => {
  const [unknown, empty, bad] = await Promise.all([
    cli(["call", "embed.query", '{"txt":"x"}']),
    cli(["call", "embed.query", '{"text":""}']),
    cli(["call", "embed.query", "{bad"]),
  ]);
  assert.equal(unknown.code, 2, unknown.stderr);
  const channel = JSON.parse(unknown.stdout);
  assert.equal(channel.code, "invalid_request");
  assert.match(channel.message, /'txt'/);

  assert.equal(empty.code, 1, empty.stderr);
  const semantic = JSON.parse(empty.stdout);
  assert.equal(semantic.result.error.code, "invalid_request");
  assert.equal(typeof semantic.result.module_generation, "number");

  assert.equal(bad.code, 2);
  assert.equal(bad.stdout, "");
  assert.match(bad.stderr, /PARAMS_JSON/);
});

Deno.test("ck-synapse version, --version, help and usage errors", async () => {
  const [version, dashVersion, help, none, badFlag, badCommand] = await Promise.all([
    cli(["version"]),
    cli(["--version"]),
    cli(["--help"]),
    cli([]),
    cli(["embed", "--bogus", "x"]),
    cli(["frobnicate"]),
  ]);
  assert.equal(version.code, 0);
  assert.equal(version.stdout, "ck-synapse 0.1.0\n");
  assert.equal(dashVersion.stdout, "ck-synapse 0.1.0\n");
  assert.equal(help.code, 0);
  for (const c of ["embed", "job", "rerank", "models", "call", "serve", "version"]) {
    assert.match(help.stdout, new RegExp(`\\n  ${c} `));
  }
  assert.equal(none.code, 2);
  assert.match(none.stderr, /usage: ck-synapse/);
  // A usage error is one line and a hint, not the usage text.
  assert.equal(badFlag.code, 2);
  assert.equal(
    badFlag.stderr,
    "ck-synapse: unknown flag --bogus for 'embed'; run 'ck-synapse embed --help'\n",
  );
  assert.equal(badFlag.stdout, "");
  assert.equal(badCommand.code, 2);
  assert.equal(
    badCommand.stderr,
    "ck-synapse: unknown command 'frobnicate'; run 'ck-synapse --help'\n",
  );
});

Deno.test("ck-synapse refuses a non-loopback --url or --http, and --subc without a connection file", async () => {
  const [url, http, subc] = await Promise.all([
    cli(["embed", "--url", "http://example.com:8080", "x"]),
    cli(["serve", "--http", "0.0.0.0:0"]),
    cli(["serve", "--subc", "conn.json"]),
  ]);
  assert.equal(url.code, 2);
  assert.match(url.stderr, /loopback/);
  assert.equal(http.code, 2);
  assert.match(http.stderr, /loopback/);
  // Loudly, and never falling back to standalone serving (nothing listens after it).
  assert.equal(subc.code, 2);
  assert.match(
    subc.stderr,
    /^error: connection_file_not_found: Cannot use subc connection file conn\.json: no such file/m,
  );
});

Deno.test("ck-synapse serve --http 127.0.0.1:0 answers embed --url, then stops cleanly on SIGTERM", async () => {
  const { env, dir } = await isolatedEnv();
  const child = new Deno.Command(LAUNCHER, {
    args: ["serve", "--http", "127.0.0.1:0"],
    env,
    clearEnv: true,
    cwd: dir,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  // "listening on …" comes on stderr, with the log; stdout stays empty.
  const stdout = new Response(child.stdout).text();
  const lines = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
  let seen = "";
  let drained: Promise<void> | undefined;
  try {
    let url: string | undefined;
    const deadline = Date.now() + 300_000; // a hang guard, not a speed limit
    while (url === undefined && Date.now() < deadline) {
      const { done, value } = await lines.read();
      if (done) break;
      seen += value;
      url = /listening on (http:\/\/127\.0\.0\.1:\d+)\n/.exec(seen)?.[1];
    }
    assert.ok(url, `no 'listening on' line; stderr: ${seen}`);
    drained = (async () => {
      for (;;) {
        const { done, value } = await lines.read();
        if (done) return;
        seen += value;
      }
    })();
    // The socket is bound before the models are ready (they answer model_loading meanwhile).
    for (;;) {
      const health: Response = await fetch(`${url}/health`);
      const body: { status: string } = await health.json();
      if (body.status === "ok") break;
      // loading (503) while no model is ready; degraded (200) while one is and another loads.
      assert.ok(
        (body.status === "loading" && health.status === 503) ||
          (body.status === "degraded" && health.status === 200),
        `${body.status} ${health.status}`,
      );
      assert.ok(Date.now() < deadline, "models did not become ready");
      await new Promise((r) => setTimeout(r, 50));
    }

    const [embedded, listed] = await Promise.all([
      cli(["embed", "--url", url, "--json", "hello world"]),
      cli(["models", "list", "--url", url]),
    ]);
    assert.equal(embedded.code, 0, embedded.stdout + embedded.stderr);
    const res = JSON.parse(embedded.stdout);
    assert.match(res.fingerprint, /^[0-9a-f]{64}$/);
    assert.equal(res.test_model, true);
    assert.equal(listed.code, 0, listed.stderr);
    assert.match(
      listed.stdout,
      /synapse-tiny-embed +embed +ready +32 +[0-9a-f]{64} +\(test model\)/,
    );
  } finally {
    child.kill("SIGTERM");
    const status = await child.status;
    await (drained ?? lines.cancel());
    const out = await stdout;
    await Deno.remove(dir, { recursive: true });
    assert.equal(status.code, 0, seen);
    assert.match(seen, /shutting down/);
    assert.equal(out, "");
  }
});

Deno.test("ck-synapse call answers a boot failure (bad config) as a channel error, exit 2", async () => {
  const r = await cli(["call", "embed.query", '{"text":"x"}'], {
    SYNAPSE_CONFIG_JSON: '{"knbo":1}',
  });
  assert.equal(r.code, 2, r.stderr);
  const body = JSON.parse(r.stdout);
  assert.equal(body.code, "invalid_request");
  assert.match(body.message, /knbo/);
  assert.deepEqual(Object.keys(body).sort(), ["code", "message"]);
  const e = await cli(["embed", "x"], { SYNAPSE_CONFIG_JSON: '{"knbo":1}' });
  assert.equal(e.code, 2);
  assert.match(e.stderr, /knbo/);
});
