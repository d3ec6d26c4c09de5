/**
 * The command line's surface through the real launcher: --json on every command (errors too),
 * one-line usage errors with a hint, `help --help`, `call --help` listing the methods, a clear
 * connection error for an unreachable server, and one exit-code rule for refused items.
 */
import assert from "node:assert/strict";
import { cli } from "./_launcher.ts";
import { CALL_METHODS } from "../../lib/cli/commands/call.ts";
import { COMMANDS } from "../../lib/cli/main.ts";
import { OPERATIONS } from "../../lib/ops/dispatcher.ts";

/** A loopback port nothing listens on (bound, then closed). */
function closedPort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

Deno.test("every command takes --json", () => {
  for (const c of COMMANDS) assert.match(c.usage, /--json/, `${c.name} --help has no --json`);
});

Deno.test("call --help lists exactly the dispatcher's methods", async () => {
  assert.deepEqual(CALL_METHODS.map(([m]) => m), Object.keys(OPERATIONS));
  const r = await cli(["call", "--help"]);
  assert.equal(r.code, 0, r.stderr);
  for (const m of Object.keys(OPERATIONS)) {
    assert.match(r.stdout, new RegExp(`\\n  ${m.replace(".", "\\.")} +\\{`), m);
  }
});

Deno.test("version --json, help --help, help COMMAND", async () => {
  const [version, helpHelp, helpEmbed, helpBad, helpExtra] = await Promise.all([
    cli(["version", "--json"]),
    cli(["help", "--help"]),
    cli(["help", "embed"]),
    cli(["help", "nope"]),
    cli(["help", "embed", "x"]),
  ]);
  const helpProbe = await cli(["help", "probe"]);
  assert.equal(helpProbe.code, 0, helpProbe.stderr);
  assert.match(helpProbe.stdout, /^usage: ck-synapse probe run \[--model ID\]\.\.\./);
  assert.match(helpProbe.stdout, /status JOB/);
  assert.match(helpProbe.stdout, /report/);
  assert.equal(version.code, 0, version.stderr);
  assert.deepEqual(JSON.parse(version.stdout), { name: "ck-synapse", version: "0.1.0" });
  assert.equal(helpHelp.code, 0, helpHelp.stderr);
  assert.match(helpHelp.stdout, /^usage: ck-synapse help \[COMMAND\]/);
  assert.equal(helpEmbed.code, 0);
  assert.match(helpEmbed.stdout, /^usage: ck-synapse embed/);
  assert.equal(helpBad.code, 2);
  assert.equal(helpBad.stderr, "ck-synapse: unknown command 'nope'; run 'ck-synapse --help'\n");
  assert.equal(helpExtra.code, 2);
  assert.match(helpExtra.stderr, /^ck-synapse: help takes one COMMAND, not 'x'; run/);
});

Deno.test("usage errors print one line and a hint on stderr, exit 2, nothing on stdout", async () => {
  const cases: [string[], string][] = [
    [
      ["embed", "--foo", "x"],
      "ck-synapse: unknown flag --foo for 'embed'; run 'ck-synapse embed --help'",
    ],
    [["embed", "--model"], "ck-synapse: flag --model needs a value; run 'ck-synapse embed --help'"],
    [
      ["version", "--json=1"],
      "ck-synapse: flag --json takes no value; run 'ck-synapse version --help'",
    ],
    [["embed"], "ck-synapse: Cannot embed: give at least one TEXT; run 'ck-synapse embed --help'"],
    [
      ["job", "status"],
      "ck-synapse: Cannot run 'job status': give a job ID; run 'ck-synapse job --help'",
    ],
    [
      ["serve", "--json"],
      "ck-synapse: Cannot serve: give --http HOST:PORT; run 'ck-synapse serve --help'",
    ],
    [
      ["probe"],
      "ck-synapse: Cannot run 'probe': give a subcommand (run, status or report); run 'ck-synapse probe --help'",
    ],
    [
      ["probe", "status"],
      "ck-synapse: Cannot run 'probe status': give a JOB id; run 'ck-synapse probe --help'",
    ],
    [
      ["probe", "report", "--model", "m"],
      "ck-synapse: Cannot use --model with 'probe report' (it is for 'probe run'); run 'ck-synapse probe --help'",
    ],
    [
      ["probe", "run", "--deadline-ms", "0"],
      "ck-synapse: Cannot use --deadline-ms 0: give a positive whole number of ms; run 'ck-synapse probe --help'",
    ],
  ];
  const runs = await Promise.all(cases.map(([args]) => cli(args)));
  runs.forEach((r, i) => {
    const [args, line] = cases[i]!;
    assert.equal(r.code, 2, args.join(" "));
    assert.equal(r.stderr, line + "\n", args.join(" "));
    assert.equal(r.stdout, "", args.join(" "));
  });
});

Deno.test("an unreachable server is a connection error naming the URL and its source, exit 2", async () => {
  const url = `http://127.0.0.1:${closedPort()}`;
  const [text, json, call, env] = await Promise.all([
    cli(["embed", "--url", url, "hello"]),
    cli(["models", "list", "--url", url, "--json"]),
    cli(["call", "models.list", "--url", url]),
    cli(["embed", "hello"], { SYNAPSE_URL: url }),
  ]);
  assert.equal(text.code, 2);
  assert.equal(text.stdout, "");
  assert.match(
    text.stderr,
    new RegExp(
      `^error: connection_failed: Cannot connect to Synapse at ${url} \\(from --url\\): Connection refused; is 'ck-synapse serve --http ${
        url.slice("http://".length)
      }' running\\?\\n$`,
    ),
  );
  assert.doesNotMatch(text.stderr, /module_not_initialized/);
  for (const r of [json, call]) {
    assert.equal(r.code, 2, r.stderr);
    const body = JSON.parse(r.stdout);
    assert.equal(body.code, "connection_failed");
    assert.equal(body.url, url);
    assert.match(body.message, new RegExp(`Cannot connect to Synapse at ${url}`));
  }
  assert.equal(env.code, 2);
  assert.match(env.stderr, /\(from SYNAPSE_URL\).*unset SYNAPSE_URL/);
});

Deno.test("a non-loopback SYNAPSE_URL is refused naming SYNAPSE_URL, exit 2", async () => {
  const r = await cli(["models", "list", "--json"], { SYNAPSE_URL: "http://example.com:8080" });
  assert.equal(r.code, 2, r.stderr);
  const body = JSON.parse(r.stdout);
  assert.equal(body.code, "invalid_request");
  assert.match(body.message, /^Cannot use SYNAPSE_URL 'http:\/\/example\.com:8080': .*loopback/);
});

Deno.test("with --json a start failure and a refusal are JSON too (embed, embed --file, job status, job pages)", async () => {
  const bad = { SYNAPSE_CONFIG_JSON: '{"knbo":1}' };
  const home = await Deno.makeTempDir();
  const file = `${home}/in.jsonl`;
  await Deno.writeTextFile(file, '"a"\n"b"\n');
  const [boot, status, pages, embedFile] = await Promise.all([
    cli(["embed", "--json", "x"], bad),
    cli(["job", "status", "job_nope", "--json"]),
    cli(["job", "pages", "job_nope", "--json"]),
    cli(["embed", "--file", file, "--request-key", "k", "--model", "nope", "--json"]),
  ]);
  await Deno.remove(home, { recursive: true });
  assert.equal(embedFile.code, 1, embedFile.stderr);
  const refusal = JSON.parse(embedFile.stdout);
  assert.equal(refusal.error.code, "unknown_model");
  assert.match(refusal.error.message, /'nope'/);
  assert.equal(boot.code, 2, boot.stderr);
  const b = JSON.parse(boot.stdout);
  assert.equal(b.code, "invalid_request");
  assert.match(b.message, /knbo/);
  for (const r of [status, pages]) {
    assert.equal(r.code, 1, r.stderr);
    const body = JSON.parse(r.stdout);
    assert.equal(typeof body.module_generation, "number");
    assert.ok(body.error.code.length > 0, r.stdout);
    assert.match(body.error.message, /job_nope/);
  }
});

Deno.test("call and embed both exit 1 when every item was refused, 0 when all were served", async () => {
  const [call, embed, embedJson, callOk, embedOk] = await Promise.all([
    cli(["call", "embed.batch", '{"texts":["", " "]}']),
    cli(["embed", "", " "]),
    cli(["embed", "--json", "", " "]),
    cli(["call", "embed.batch", '{"texts":["a", "b"]}']),
    cli(["embed", "a", "b"]),
  ]);
  assert.equal(call.code, 1, call.stderr);
  const body = JSON.parse(call.stdout);
  assert.deepEqual(body.result.item_errors.map((e: { id: string }) => e.id), ["0", "1"]);
  assert.deepEqual(body.result.vectors, []);
  assert.equal(embed.code, 1, embed.stderr);
  assert.match(embed.stderr, /error: item 0: invalid_request: /);
  assert.equal(embedJson.code, 1, embedJson.stderr);
  assert.equal(JSON.parse(embedJson.stdout).item_errors.length, 2);
  assert.equal(callOk.code, 0, callOk.stderr);
  assert.equal(embedOk.code, 0, embedOk.stderr);
});
