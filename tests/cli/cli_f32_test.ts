/**
 * The CLI's edges (field report F32), through the real launcher: no argument length aborts the
 * process (a long TEXT is served or refused exactly as over HTTP); store-only commands start no
 * model, engine or worker; the shell examples of the README and docs/ touched by F32 run as
 * written.
 */
import assert from "node:assert/strict";
import { main } from "../../lib/cli/main.ts";
import type { CliIO } from "../../lib/cli/main.ts";
import { FrameType } from "../../lib/subc/bus_envelope.ts";
import { bodyJson, startScriptedDaemon } from "../subc/_scripted_daemon.ts";
import { MODELS, ROOT, startSynapse } from "../_helpers.ts";
import { cliIn, isolatedEnv, serve } from "./_launcher.ts";
import { userDocs } from "../_user_docs.ts";

/** `n` bytes of words. */
function words(n: number, seed = 0): string {
  let s = "";
  let i = seed;
  while (s.length < n) s += `word${i++ % 97} `;
  return s.slice(0, n);
}

Deno.test("F32: embed with a 15 KB, 100 KB and 1 MB argument never aborts; refused or served as over HTTP", async () => {
  const home = await isolatedEnv();
  await using t = await startSynapse({}, { log: () => {} });
  try {
    for (const size of [15_000, 100_000]) {
      const text = words(size);
      const r = await cliIn(home, ["embed", text]);
      assert.ok(!/overflow|panicked/.test(r.stderr), r.stderr.slice(0, 500));
      assert.equal(r.code, 1, `${size}: ${r.stderr.slice(0, 500)}`);
      // The same refusal, word for word, as the operation answers every door.
      const o = await t.syn.call("embed.query", { text });
      const e = (o.body as { result: { error: { code: string; message: string } } }).result.error;
      assert.equal(e.code, "sequence_too_long");
      assert.equal(r.stderr.trim(), `error: ${e.code}: ${e.message}`);
    }
    // --truncate serves it, cut to the model's limit and said so.
    const cut = await cliIn(home, ["embed", "--truncate", "--json", words(15_000)]);
    assert.equal(cut.code, 0, cut.stderr.slice(0, 500));
    const res = JSON.parse(cut.stdout);
    assert.equal(res.truncation_disclosures[0].truncated, true);
    assert.equal(res.vectors.length, 1);
    // 1 MB of arguments: 8 texts of 125,000 bytes (one argument may not pass 128 KiB on Linux).
    const texts = Array.from({ length: 8 }, (_, i) => words(125_000, i));
    const big = await cliIn(home, ["embed", "--json", ...texts]);
    assert.ok(!/overflow|panicked/.test(big.stderr), big.stderr.slice(0, 500));
    assert.equal(big.code, 1, big.stderr.slice(0, 500));
    const batch = JSON.parse(big.stdout);
    assert.equal(batch.item_errors.length, 8);
    for (const ie of batch.item_errors) assert.equal(ie.error.code, "sequence_too_long");
    // A short argument still goes on the command line, as before.
    const short = await cliIn(home, ["embed", "--json", "hello"]);
    assert.equal(short.code, 0, short.stderr);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});

Deno.test("F32: after a GGUF is recorded, job status and cache gc (embedded) load no model and start no worker", async () => {
  // Every llama worker start is counted by a wrapper around the real worker binary.
  const home = await isolatedEnv();
  const wrapper = `${home.dir}/worker.sh`;
  const count = `${home.dir}/worker-starts`;
  await Deno.writeTextFile(
    wrapper,
    `#!/bin/sh\necho start >> '${count}'\nexec '${ROOT}/ck-synapse-worker-llama' "$@"\n`,
  );
  await Deno.chmod(wrapper, 0o755);
  home.env.SYNAPSE_LLAMA_WORKER_BIN = wrapper;
  // Not about certification: the GGUF serves uncertified (it is `ready`, not `not_certified`).
  home.env.SYNAPSE_CONFIG_JSON = JSON.stringify({ certification: "warn" });
  const starts = async (): Promise<number> => {
    try {
      return (await Deno.readTextFile(count)).split("\n").filter((l) => l === "start").length;
    } catch {
      return 0;
    }
  };
  try {
    const pulled = await cliIn(home, [
      "pull",
      `${MODELS}/synapse-tiny-llama`,
      "--task",
      "generate",
      "--model-id",
      "tinygen",
    ]);
    assert.equal(pulled.code, 0, pulled.stderr);
    assert.equal(await starts(), 1);
    // A command about models loads the recorded ones: the GGUF on a llama worker.
    const ps = await cliIn(home, ["ps"]);
    assert.equal(ps.code, 0, ps.stderr);
    assert.match(ps.stdout, /^tinygen +generate +llama +ready/m);
    assert.equal(await starts(), 2);
    for (
      const args of [
        ["cache", "gc", "--json"],
        ["cache", "gc"],
        ["job", "status", "job_00000000000000000000000000000000"],
        ["job", "pages", "job_00000000000000000000000000000000"],
      ]
    ) {
      const started = performance.now();
      const r = await cliIn(home, args);
      const ms = Math.round(performance.now() - started);
      console.log(`${args.join(" ")}: exit ${r.code} in ${ms} ms`);
      assert.ok(r.code === 0 || r.code === 1, `${args.join(" ")}: ${r.stderr}`);
      assert.equal(await starts(), 2, `${args.join(" ")} started a llama worker`);
    }
    // cache gc kept the recorded model's pinned blobs: it still loads.
    const after = await cliIn(home, ["ps"]);
    assert.match(after.stdout, /^tinygen +generate +llama +ready/m);
    assert.equal(await starts(), 3);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});

/**
 * The shell command lines of the ```sh blocks of the README and docs/, each once (a command shown
 * in two places, its trailing `# comment` aside, counts once).
 */
async function readmeCommands(): Promise<string[]> {
  const text = await userDocs();
  const lines: string[] = [];
  const seen = new Set<string>();
  let inSh = false;
  for (const line of text.split("\n")) {
    if (line.startsWith("```")) {
      inSh = line.trim() === "```sh";
      continue;
    }
    if (inSh && (line.startsWith("./ck-synapse ") || line.startsWith("curl "))) {
      const command = line.replace(/\s+#[^'"]*$/, "").trim();
      if (!seen.has(command)) lines.push(line);
      seen.add(command);
    }
  }
  return lines;
}

/** The words of a command line as bash splits them (its trailing `# comment` dropped). */
async function shellWords(line: string): Promise<string[]> {
  const out = await new Deno.Command("bash", {
    args: ["-c", `set -- ${line}\nprintf '%s\\0' "$@"`],
    stdout: "piped",
  }).output();
  const words = new TextDecoder().decode(out.stdout).split("\0");
  words.pop();
  return words;
}

Deno.test("README: no shell example names a model a fresh install lacks (minilm)", async () => {
  const commands = await readmeCommands();
  assert.ok(commands.length > 20);
  for (const c of commands) assert.doesNotMatch(c, /minilm/, c);
});

Deno.test("README: the curl examples of /v1/embeddings and /api/embed run as written on a fresh install", async () => {
  const all = (await readmeCommands()).filter((c) =>
    /^curl -s 127\.0\.0\.1:8080\/(v1\/embeddings|api\/embed) /.test(c)
  );
  // The Matryoshka example runs against the config the docs show beside it (tiny-mrl); the remote
  // provider's (peer-embed) needs two servers, which tests/engines/remote/ runs.
  const commands = all.filter((c) => !c.includes('"tiny-mrl"') && !c.includes('"peer-embed"'));
  const mrl = all.filter((c) => c.includes('"tiny-mrl"'));
  assert.equal(commands.length, 3, commands.join("\n"));
  assert.equal(mrl.length, 1, all.join("\n"));
  const run = async (c: string, hostPort: string) => {
    const out = await new Deno.Command("bash", {
      args: ["-c", c.replace("127.0.0.1:8080", hostPort)],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(out.code, 0, c);
    return JSON.parse(new TextDecoder().decode(out.stdout));
  };
  const home = await isolatedEnv();
  try {
    await using server = await serve(home);
    const hostPort = new URL(server.url).host;
    for (const c of commands) {
      const body = await run(c, hostPort);
      const vectors = body.data ?? body.embeddings;
      assert.equal(vectors.length, 2, `${c}: ${JSON.stringify(body).slice(0, 300)}`);
    }
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
  const readme = await userDocs();
  assert.match(readme, /"model_id": "tiny-mrl"[^}]*"matryoshka_dims": \[16, 32\]/);
  const tiny = `${MODELS}/synapse-tiny-embed`;
  const withMrl = await isolatedEnv({
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      preload_models: [{
        engine: "ort",
        model_id: "tiny-mrl",
        model_path: tiny,
        tokenizer_path: `${tiny}/tokenizer.json`,
        matryoshka_dims: [16, 32],
      }],
    }),
  });
  try {
    await using server = await serve(withMrl);
    const body = await run(mrl[0]!, new URL(server.url).host);
    assert.equal(body.data[0].embedding.length, 16, JSON.stringify(body).slice(0, 300));
  } finally {
    await Deno.remove(withMrl.dir, { recursive: true });
  }
});

Deno.test('README: `embed --subc "text"` embeds the text over the bus (the text is not a file)', async () => {
  const [line] = (await readmeCommands()).filter((c) => c.startsWith("./ck-synapse embed --subc "));
  assert.ok(line !== undefined);
  const args = (await shellWords(line)).slice(1);
  assert.deepEqual(args, ["embed", "--subc", "ask the synapse module on the subc bus"]);
  const seen: unknown[] = [];
  await using daemon = await startScriptedDaemon((f, _c, reply) => {
    if (f.channel === 0 && f.type === FrameType.Request) return reply.routeOpened(f.corr, 1, 1);
    if (f.type !== FrameType.Request) return;
    const { params } = bodyJson(f) as { params: { text: string } };
    seen.push(params);
    return reply.json(f, {
      result: {
        module_generation: 1,
        model_id: "bus-model",
        fingerprint: "f".repeat(64),
        dims: 2,
        vectors: [{ id: "0", vector: [0.6, 0.8] }],
        real_token_counts: [9],
        truncation_disclosures: [{ submitted_tokens: 9, effective_tokens: 9, truncated: false }],
      },
    });
  });
  const out: string[] = [];
  const err: string[] = [];
  const io: CliIO = {
    out: (l) => out.push(l),
    err: (l) => err.push(l),
    synapseOptions: { env: { SUBC_CONNECTION_FILE: daemon.connectionFile } },
  };
  const code = await main(args, io);
  assert.equal(code, 0, err.join("\n"));
  assert.deepEqual(seen, [{ text: "ask the synapse module on the subc bus" }]);
  assert.match(out.join("\n"), /bus-model/);
  // `--subc FILE TEXT` still takes FILE: a .json name or an existing file.
  seen.length = 0;
  const code2 = await main(["embed", "--subc", daemon.connectionFile, "hello"], io);
  assert.equal(code2, 0, err.join("\n"));
  assert.deepEqual(seen, [{ text: "hello" }]);
});
