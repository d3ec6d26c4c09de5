/**
 * `--subc` on the CLI against a scripted daemon (main() in this process, and once through the
 * real launcher): the door it picks, what it sends, how it prints each answer, and that an
 * unreachable daemon is an error (exit 2), never a fallback to an embedded instance. The same
 * commands against the real module through the test peer: tests/subc/consumer_peer_test.ts.
 */
import assert from "node:assert/strict";
import { main } from "../../lib/cli/main.ts";
import type { CliIO } from "../../lib/cli/main.ts";
import { parseCommandArgs, SUBC_CLIENT_FLAG } from "../../lib/cli/_command.ts";
import { writeConnectionFile } from "../../lib/subc/connection_file.ts";
import { FrameType } from "../../lib/subc/bus_envelope.ts";
import { bodyJson, startScriptedDaemon } from "../subc/_scripted_daemon.ts";
import { cliIn, isolatedEnv } from "./_launcher.ts";

/** main() with captured output and an environment of its own (no real home, no SYNAPSE_URL). */
async function run(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const io: CliIO = {
    out: (l) => out.push(l),
    err: (l) => err.push(l),
    synapseOptions: { env },
  };
  const code = await main(args, io);
  return { code, out: out.join("\n"), err: err.join("\n") };
}

/** A daemon whose "module" answers every method as Synapse's envelope would. */
function fakeSynapseDaemon() {
  return startScriptedDaemon((f, _c, reply) => {
    if (f.channel === 0 && f.type === FrameType.Request) {
      const { target } = bodyJson(f) as { target: { module_id: string } };
      if (target.module_id !== "synapse" && target.module_id !== "synapse-alt") {
        return reply.controlError(f.corr, "target_unavailable");
      }
      return reply.routeOpened(f.corr, 1, target.module_id === "synapse" ? 1 : 2);
    }
    if (f.type !== FrameType.Request) return;
    const { method, params } = bodyJson(f) as { method: string; params: Record<string, unknown> };
    if (method === "models.list") {
      return reply.json(f, {
        result: {
          module_generation: 1,
          table_epoch: 0,
          models: [{
            model_id: "bus-model",
            task: "embed",
            state: "ready",
            dims: 4,
            fingerprints: ["f".repeat(64)],
          }],
          alias_rows: [],
          served_by: { embed: "bus-model", rerank: null, generate: null },
        },
      });
    }
    if (method === "embed.query" && params.text === "") {
      return reply.json(f, {
        result: {
          module_generation: 1,
          error: {
            code: "invalid_request",
            class: "permanent",
            safe_to_retry_same_request: false,
            message: "Cannot embed: empty text",
          },
        },
      });
    }
    if (method === "embed.query") {
      return reply.json(f, { result: { via: "bus", epoch: f.epoch, params } });
    }
    return reply.error(f, "unknown_method", { detail: { method } });
  });
}

Deno.test("call --subc FILE sends the method on a route to synapse and prints the wire body", async () => {
  await using daemon = await fakeSynapseDaemon();
  const r = await run(["call", "embed.query", '{"text":"hi"}', "--subc", daemon.connectionFile]);
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(JSON.parse(r.out), { result: { via: "bus", epoch: 1, params: { text: "hi" } } });
  // route.open, the request, then the route's Goodbye: the command closes what it opened.
  await daemon.until(() => daemon.received.length === 3, "the Goodbye");
  assert.deepEqual(daemon.received.map((x) => x.frame.type), [
    FrameType.Request,
    FrameType.Request,
    FrameType.Goodbye,
  ]);
  const open = bodyJson(daemon.received[0]!.frame) as Record<string, unknown>;
  assert.equal((open.identity as { harness: string }).harness, "ck-synapse");
});

Deno.test("call --subc: a semantic refusal exits 1, an Error terminal exits 2 with its code", async () => {
  await using daemon = await fakeSynapseDaemon();
  const semantic = await run([
    "call",
    "embed.query",
    '{"text":""}',
    "--subc",
    daemon.connectionFile,
  ]);
  assert.equal(semantic.code, 1);
  assert.equal(JSON.parse(semantic.out).result.error.code, "invalid_request");
  const unknown = await run(["call", "no.such", "--subc", daemon.connectionFile]);
  assert.equal(unknown.code, 2);
  assert.deepEqual(JSON.parse(unknown.out), {
    code: "unknown_method",
    message: "scripted unknown_method",
    details: { method: "no.such" },
  });
});

Deno.test("--subc without a path follows the ladder ($SUBC_CONNECTION_FILE); SUBC_MODULE_ID picks the module", async () => {
  await using daemon = await fakeSynapseDaemon();
  const env = { SUBC_CONNECTION_FILE: daemon.connectionFile, SUBC_MODULE_ID: "synapse-alt" };
  const r = await run(["call", "embed.query", '{"text":"x"}', "--subc"], env);
  assert.equal(r.code, 0, r.err);
  assert.equal(JSON.parse(r.out).result.epoch, 2, "the route to synapse-alt");
  const bare = await run(["call", "--subc", "--json", "embed.query", '{"text":"y"}'], env);
  assert.equal(bare.code, 0, bare.err);
});

Deno.test("models list --subc prints the table from the bus; embed --subc --json prints the result", async () => {
  await using daemon = await fakeSynapseDaemon();
  const models = await run(["models", "list", "--subc", daemon.connectionFile]);
  assert.equal(models.code, 0, models.err);
  assert.match(models.out, /^bus-model +embed +ready +4 +f{64}/m);
  const embed = await run(["embed", "--json", "--subc", daemon.connectionFile, "hello"]);
  assert.equal(embed.code, 0, embed.err);
  assert.deepEqual(JSON.parse(embed.out), { via: "bus", epoch: 1, params: { text: "hello" } });
});

Deno.test("--url with --subc is a usage error (exit 2), for every command that talks to a server", async () => {
  const cases = [
    ["call", "models.list"],
    ["embed", "x"],
    ["rerank", "--query", "q", "d"],
    ["generate", "p"],
    ["models", "list"],
    ["job", "status", "job_1"],
  ];
  for (const args of cases) {
    const r = await run([...args, "--url", "http://127.0.0.1:1", "--subc", "/nowhere.json"]);
    assert.equal(r.code, 2, args.join(" "));
    assert.match(r.err, /Cannot use --url and --subc together/, args.join(" "));
  }
});

Deno.test("--subc overrides SYNAPSE_URL (the flag is explicit, the variable is not)", async () => {
  await using daemon = await fakeSynapseDaemon();
  const r = await run(["call", "embed.query", '{"text":"x"}', "--subc", daemon.connectionFile], {
    SYNAPSE_URL: "http://127.0.0.1:1",
  });
  assert.equal(r.code, 0, r.err);
  assert.equal(JSON.parse(r.out).result.via, "bus");
});

Deno.test("--subc with an unreachable daemon exits 2 with connection_failed naming the file, never running embedded", async () => {
  const dir = await Deno.makeTempDir({ prefix: "subc-cli-dead-" });
  try {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const port = listener.addr.port;
    listener.close();
    const file = `${dir}/subc-connection.json`;
    await writeConnectionFile(file, {
      schema: 1,
      endpoints: [{ host: "127.0.0.1", port }],
      key: new Uint8Array(32).fill(1),
      daemonId: new Uint8Array(16).fill(2),
      pid: 1,
      daemonVer: "gone",
    });
    const env = { XDG_DATA_HOME: `${dir}/data`, HOME: dir };
    const json = await run(["call", "models.list", "--subc", file], env);
    assert.equal(json.code, 2);
    const body = JSON.parse(json.out);
    assert.equal(body.code, "connection_failed");
    assert.equal(body.reason, "daemon_unreachable");
    assert.match(body.message, new RegExp(`127\\.0\\.0\\.1:${port}`));
    assert.equal(body.connection_file, file);
    const human = await run(["models", "list", "--subc", file], env);
    assert.equal(human.code, 2);
    assert.match(human.err, /^error: connection_failed: Cannot connect to the subc daemon/);
    // No embedded instance ran: it would have made a store under the data home.
    assert.equal(await Deno.stat(`${dir}/data/cortexkit`).then(() => true, () => false), false);
    // A missing file is refused the same way, naming the file.
    const missing = await run(["call", "models.list", "--subc", `${dir}/none.json`], env);
    assert.equal(missing.code, 2);
    assert.equal(JSON.parse(missing.out).reason, "connection_file_not_found");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("parseCommandArgs: a bare --subc (last, or before a flag) is the empty path; --subc FILE keeps FILE", () => {
  const opts = { subc: SUBC_CLIENT_FLAG, json: { type: "boolean" } } as const;
  assert.equal(parseCommandArgs(["x", "--subc"], opts).values.subc, "");
  assert.equal(parseCommandArgs(["--subc", "--json", "x"], opts).values.subc, "");
  assert.equal(parseCommandArgs(["--subc", "/f.json", "x"], opts).values.subc, "/f.json");
  assert.deepEqual(parseCommandArgs(["--", "--subc"], opts).positionals, ["--subc"]);
  // Another command's own --subc (serve's, the module side) still needs its path.
  assert.throws(
    () => parseCommandArgs(["--subc"], { subc: { type: "string" } }),
    /flag --subc needs a value/,
  );
});

Deno.test("./ck-synapse call --subc through the real launcher (its narrow permissions reach the daemon)", async () => {
  await using daemon = await fakeSynapseDaemon();
  const home = await isolatedEnv();
  try {
    const r = await cliIn(home, [
      "call",
      "embed.query",
      '{"text":"launcher"}',
      "--subc",
      daemon.connectionFile,
    ]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(JSON.parse(r.stdout).result.params.text, "launcher");
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});
