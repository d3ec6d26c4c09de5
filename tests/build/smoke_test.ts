/**
 * Release smoke test of the single executable (scripts/build, docs/install.md): the artifact is
 * built (or reused while its inputs are unchanged), copied alone into an empty directory and run
 * with a clean environment — no variable but PATH, HOME, the XDG dirs and TMPDIR, all in a temp
 * dir, and a PATH holding only links to the system tools the header and launchers use (no node,
 * npm, deno or checkout) — through `version`, `serve --http`, `pull` + `embed` of an ONNX model,
 * `pull` + `generate` of a GGUF alone on a llama worker, and a GGUF's embeddings on the ffi lane
 * (the llama shim the artifact carries). It prints the artifact's size and the
 * cold (unpack + first start) and warm start times of `version`; times are never asserted.
 *
 * The archive checks (a truncated copy, a corrupted payload, an edited unpacked file) run on the
 * self-extracting format. The `deno compile` format runs the same smoke only where `DENORT_BIN`
 * names a denort binary: these machines cannot download it, so it is skipped, saying why.
 */
import assert from "node:assert/strict";
import { ROOT } from "../_helpers.ts";
import { type BuildRecord, SANDBOX_TOOLS } from "../../scripts/build.ts";

const DENORT_BIN = Deno.env.get("DENORT_BIN");
const COMPILE_SKIPPED = DENORT_BIN === undefined || DENORT_BIN === "";
if (COMPILE_SKIPPED) {
  console.log(
    "tests/build/smoke_test.ts: skipping the deno compile artifact: DENORT_BIN is not set, and " +
      "deno compile needs Deno's denort runtime, which this machine cannot download " +
      "(dl.deno.land); set DENORT_BIN to a denort 2.9.6 binary to run it",
  );
}

const dec = new TextDecoder();

interface Ran {
  code: number;
  stdout: string;
  stderr: string;
  ms: number;
}

/** An empty directory holding only the artifact, and a clean environment to run it in. */
interface Sandbox {
  dir: string;
  bin: string;
  env: Record<string, string>;
  cwd: string;
}

async function makeSandbox(artifact: string): Promise<Sandbox> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-smoke-" });
  for (const d of ["bin", "path", "home", "data", "config", "cache", "tmp", "work"]) {
    await Deno.mkdir(`${dir}/${d}`);
  }
  // PATH: links to exactly the tools the header and launchers run (docs/install.md lists them).
  for (const tool of SANDBOX_TOOLS) {
    const found = ["/usr/bin", "/bin"].map((d) => `${d}/${tool}`).find((p) => {
      try {
        return Deno.statSync(p).isFile;
      } catch {
        return false;
      }
    });
    assert.ok(found !== undefined, `${tool} is not in /usr/bin or /bin`);
    await Deno.symlink(found, `${dir}/path/${tool}`);
  }
  const bin = `${dir}/bin/ck-synapse`;
  await Deno.copyFile(artifact, bin);
  await Deno.chmod(bin, 0o755);
  return {
    dir,
    bin,
    cwd: `${dir}/work`,
    env: {
      PATH: `${dir}/path`,
      HOME: `${dir}/home`,
      XDG_DATA_HOME: `${dir}/data`,
      XDG_CONFIG_HOME: `${dir}/config`,
      XDG_CACHE_HOME: `${dir}/cache`,
      TMPDIR: `${dir}/tmp`,
      // The pulled GGUF serves uncertified (the smoke is not about the probe); answers say so.
      SYNAPSE_CONFIG_JSON: JSON.stringify({ certification: "warn" }),
    },
  };
}

async function runIn(
  box: Sandbox,
  args: string[],
  extraEnv: Record<string, string> = {},
  program: string = box.bin,
): Promise<Ran> {
  const t0 = performance.now();
  const out = await new Deno.Command(program, {
    args,
    env: { ...box.env, ...extraEnv },
    clearEnv: true,
    cwd: box.cwd,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(300_000),
  }).output();
  return {
    code: out.code,
    stdout: dec.decode(out.stdout),
    stderr: dec.decode(out.stderr),
    ms: performance.now() - t0,
  };
}

async function buildArtifact(format: "archive" | "compile"): Promise<BuildRecord> {
  const out = `${ROOT}/.cache/smoke-dist-${format}`;
  const t0 = performance.now();
  const r = await new Deno.Command(`${ROOT}/scripts/build`, {
    args: ["--format", format, "--out", out, "--no-measure"],
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(600_000),
  }).output();
  const stderr = dec.decode(r.stderr);
  assert.equal(r.code, 0, `scripts/build failed:\n${stderr}`);
  console.log(
    `${stderr.trim()}\n(scripts/build took ${((performance.now() - t0) / 1000).toFixed(1)} s)`,
  );
  return JSON.parse(await Deno.readTextFile(`${out}/build.json`)) as BuildRecord;
}

/** A running `ck-synapse serve --http 127.0.0.1:0 --json`; its stderr kept for failures. */
async function startServe(box: Sandbox): Promise<{
  url: string;
  child: Deno.ChildProcess;
  log: () => string;
  stop: () => Promise<Deno.CommandStatus>;
}> {
  const child = new Deno.Command(box.bin, {
    args: ["serve", "--http", "127.0.0.1:0", "--json"],
    env: box.env,
    clearEnv: true,
    cwd: box.cwd,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let stderr = "";
  const drain = (async () => {
    for await (const chunk of child.stderr) stderr = (stderr + dec.decode(chunk)).slice(-20_000);
  })();
  const reader = child.stdout.getReader();
  let first = "";
  const guard = setTimeout(() => child.kill("SIGKILL"), 180_000);
  while (!first.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) break;
    first += dec.decode(value);
  }
  clearTimeout(guard);
  // Keep draining stdout so the server never blocks on it.
  const drainOut = (async () => {
    for (;;) if ((await reader.read()).done) break;
  })();
  if (!first.includes("\n")) {
    await child.status;
    throw new Error(`serve printed no address:\n${stderr}`);
  }
  const { url } = JSON.parse(first) as { url: string };
  return {
    url,
    child,
    log: () => stderr,
    stop: async () => {
      try {
        child.kill("SIGTERM");
      } catch { /* exited */ }
      const guard = setTimeout(() => {
        try {
          child.kill("SIGKILL");
        } catch { /* exited */ }
      }, 60_000);
      const status = await child.status;
      clearTimeout(guard);
      await drain;
      await drainOut;
      return status;
    },
  };
}

function mib(bytes: number): string {
  return `${(bytes / 1048576).toFixed(1)} MiB`;
}

/** The smoke common to both formats: version (cold, warm), serve, embed, generate. */
async function smoke(t: Deno.TestContext, record: BuildRecord, box: Sandbox): Promise<void> {
  const cold = await runIn(box, ["version"]);
  assert.equal(cold.code, 0, cold.stderr);
  const warm = await runIn(box, ["version"]);
  assert.equal(warm.code, 0, warm.stderr);
  console.log(
    `ck-synapse (${record.format}): ${mib(record.artifact_bytes)}` +
      (record.tree_bytes === null ? "" : `, unpacks to ${mib(record.tree_bytes)}`) +
      `; 'version' cold (first run: unpack + start) ${cold.ms.toFixed(0)} ms, warm ${
        warm.ms.toFixed(0)
      } ms`,
  );
  const expected = record.format === "archive"
    ? `ck-synapse ${record.version} (archive, payload sha256:${record.payload_sha256}, commit `
    : `ck-synapse ${record.version} (compile`;
  assert.ok(cold.stdout.startsWith(expected), `${cold.stdout} does not start with ${expected}`);
  assert.equal(warm.stdout, cold.stdout);
  assert.equal(warm.stderr, "", "the warm run said something (unpacked again?)");

  await t.step("version --json names the build", async () => {
    const r = await runIn(box, ["version", "--json"]);
    assert.equal(r.code, 0, r.stderr);
    const v = JSON.parse(r.stdout);
    assert.equal(v.version, record.version);
    assert.equal(v.build.format, record.format);
    assert.equal(v.build.payload_sha256, record.payload_sha256);
    assert.equal(v.build.commit, record.commit);
  });

  await t.step(
    "serve --http, then embed, pull + embed (ORT) and pull + generate (llama worker)",
    async () => {
      const server = await startServe(box);
      try {
        const url = ["--url", server.url];
        // Wait for the shipped test models to load (`/health` is 200 once every model is ready).
        const deadline = Date.now() + 180_000;
        for (;;) {
          const h = await fetch(`${server.url}/health`);
          const body = await h.json();
          if (body.status === "ok") break;
          assert.ok(Date.now() < deadline, `not ready after 180 s: ${JSON.stringify(body)}`);
          assert.ok(["loading", "degraded"].includes(body.status), JSON.stringify(body));
          await new Promise((r) => setTimeout(r, 100));
        }
        // The test models shipped in the artifact serve while no model is configured.
        const def = await runIn(box, ["embed", "hello world", "--json", ...url]);
        assert.equal(def.code, 0, `${def.stderr}\n--- serve:\n${server.log()}`);
        const defOut = JSON.parse(def.stdout);
        assert.equal(defOut.model_id, "synapse-tiny-embed");
        assert.equal(defOut.test_model, true);
        assert.equal(defOut.vectors[0].vector.length, 32);

        const pullEmbed = await runIn(box, [
          "pull",
          `${ROOT}/fixtures/models/synapse-tiny-embed`,
          "--model-id",
          "smoke-embed",
          ...url,
        ]);
        assert.equal(pullEmbed.code, 0, `${pullEmbed.stderr}\n--- serve:\n${server.log()}`);
        assert.match(pullEmbed.stdout, /^ready: smoke-embed +[0-9a-f]{64}/m);
        const embed = await runIn(box, [
          "embed",
          "--model",
          "smoke-embed",
          "hello",
          "--json",
          ...url,
        ]);
        assert.equal(embed.code, 0, `${embed.stderr}\n--- serve:\n${server.log()}`);
        const embedOut = JSON.parse(embed.stdout);
        assert.equal(embedOut.model_id, "smoke-embed");
        assert.equal(embedOut.provenance.engine.engine, "ort");
        assert.equal(embedOut.provenance.certified, true);
        assert.equal(embedOut.vectors[0].vector.length, 32);

        const pullGen = await runIn(box, [
          "pull",
          `${ROOT}/fixtures/models/synapse-tiny-qwen`,
          "--task",
          "generate",
          "--model-id",
          "smoke-qwen",
          ...url,
        ]);
        assert.equal(pullGen.code, 0, `${pullGen.stderr}\n--- serve:\n${server.log()}`);
        assert.match(pullGen.stdout, /^ready: smoke-qwen +[0-9a-f]{64}/m);
        const gen = await runIn(box, [
          "generate",
          "--model",
          "smoke-qwen",
          "--max-tokens",
          "4",
          "Hello",
          "--json",
          ...url,
        ]);
        assert.equal(gen.code, 0, `${gen.stderr}\n--- serve:\n${server.log()}`);
        const genOut = JSON.parse(gen.stdout);
        assert.equal(genOut.model_id, "smoke-qwen");
        assert.equal(genOut.provenance.engine.engine, "llama.cpp-worker");
        assert.equal(genOut.provenance.certified, false);
        assert.equal(genOut.n_gen, 4);
        assert.equal(genOut.generated_token_ids.length, 4);
        // The worker is the program the artifact unpacked, not anything on PATH or in the checkout.
        assert.ok(!server.log().includes(ROOT), "the server named a checkout path");
      } finally {
        const status = await server.stop();
        assert.equal(status.code, 0, `serve exited ${status.code}:\n${server.log()}`);
      }
    },
  );

  await t.step("an ffi lane: the carried llama shim serves a GGUF's embeddings", async () => {
    // An embedded instance (no server runs now) configured as an operator writes it.
    const config = {
      certification: "warn",
      preload_models: [{
        engine: "ffi",
        shim: "llama",
        model_path: `${ROOT}/fixtures/models/synapse-tiny-llama`,
        model_id: "smoke-ffi",
      }],
    };
    const r = await runIn(box, ["embed", "--model", "smoke-ffi", "hello", "--json"], {
      SYNAPSE_CONFIG_JSON: JSON.stringify(config),
    });
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout);
    assert.equal(out.model_id, "smoke-ffi");
    assert.equal(out.provenance.engine.engine, "synapse-llama-shim");
    assert.equal(out.vectors[0].vector.length, 64);
  });
}

Deno.test("release smoke: the self-extracting ck-synapse, copied alone into an empty dir", async (t) => {
  const record = await buildArtifact("archive");
  assert.equal(record.format, "archive");
  assert.match(record.payload_sha256 ?? "", /^[0-9a-f]{64}$/);
  const box = await makeSandbox(`${ROOT}/.cache/smoke-dist-archive/ck-synapse`);
  try {
    // docs/install.md: the published digest checks the copy.
    const sum = await runIn(box, ["-b", box.bin], {}, "sha256sum");
    assert.equal(sum.stdout.slice(0, 64), record.artifact_sha256);

    const unpacked = `${box.env.XDG_DATA_HOME}/cortexkit/synapse/runtime/${record.payload_sha256}`;
    await smoke(t, record, box);
    // The cold run unpacked into the content-addressed dir under the data home, stamped.
    const stamp = await Deno.readTextFile(`${unpacked}/.stamp`);
    assert.match(stamp, new RegExp(`^payload_sha256=${record.payload_sha256}$`, "m"));
    assert.deepEqual(
      [...Deno.readDirSync(`${box.env.XDG_DATA_HOME}/cortexkit/synapse/runtime`)].map((e) =>
        e.name
      ),
      [record.payload_sha256],
    );
    // Nothing the program did (serve, pulls, a llama worker) changed its tree: no unpack now.
    const again = await runIn(box, ["version"]);
    assert.equal(again.code, 0, again.stderr);
    assert.equal(again.stderr, "", "the tree changed while it ran");

    await t.step(
      "an edited file of the unpacked tree is noticed and the tree unpacked again",
      async () => {
        const file = `${unpacked}/lib/version.ts`;
        const original = await Deno.readTextFile(file);
        await Deno.writeTextFile(file, original.replace("0.1.0", "6.6.6"));
        const r = await runIn(box, ["version"]);
        assert.equal(r.code, 0, r.stderr);
        assert.match(r.stderr, /differs from this build .*unpacking it again/);
        assert.equal(await Deno.readTextFile(file), original);
        assert.ok(r.stdout.startsWith(`ck-synapse ${record.version} (archive`), r.stdout);
      },
    );

    await t.step(
      "F38: an edit with its size and mtime restored is caught by content and unpacked again",
      async () => {
        const file = `${unpacked}/lib/version.ts`;
        const original = await Deno.readTextFile(file);
        const before = await Deno.stat(file);
        const edited = original.replace("0.1.0", "6.6.6");
        assert.notEqual(edited, original);
        assert.equal(edited.length, original.length);
        await Deno.writeTextFile(file, edited);
        await Deno.utime(file, before.atime!, before.mtime!);
        const after = await Deno.stat(file);
        assert.equal(after.size, before.size);
        assert.equal(after.mtime!.getTime(), before.mtime!.getTime());
        const r = await runIn(box, ["version"]);
        assert.equal(r.code, 0, r.stderr);
        assert.match(r.stderr, /differs from this build .*unpacking it again/);
        assert.equal(await Deno.readTextFile(file), original);
        assert.doesNotMatch(r.stdout, /6\.6\.6/);
        // A file touched but not changed: verified by content, stamped again, silently.
        await Deno.utime(file, new Date(), new Date());
        const touched = await runIn(box, ["version"]);
        assert.equal(touched.code, 0, touched.stderr);
        assert.equal(touched.stderr, "");
        const warm = await runIn(box, ["version"]);
        assert.equal(warm.stderr, "");
        console.log(`'version' warm after a re-verification: ${warm.ms.toFixed(0)} ms`);
      },
    );

    await t.step(
      "F38: an unpack dir someone else could have written is refused, nothing run from it",
      async () => {
        const sha = record.payload_sha256!;
        const mark = `${box.dir}/pwned`;
        /** A tree that would run the attacker's code, with the real tree's MANIFEST and stamp. */
        const evilTree = async (at: string): Promise<void> => {
          await Deno.mkdir(at, { recursive: true });
          await Deno.writeTextFile(`${at}/ck-synapse`, `#!/bin/sh\necho pwned > ${mark}\n`, {
            mode: 0o755,
          });
          await Deno.copyFile(`${unpacked}/MANIFEST`, `${at}/MANIFEST`);
          await Deno.copyFile(`${unpacked}/.stamp`, `${at}/.stamp`);
        };
        const refused = async (base: string, pattern: RegExp): Promise<void> => {
          const r = await runIn(box, ["version"], { SYNAPSE_UNPACK_DIR: base });
          assert.equal(r.code, 2, `${base}: ${r.stdout}${r.stderr}`);
          assert.equal(r.stdout, "");
          assert.match(r.stderr, pattern);
          assert.throws(() => Deno.statSync(mark), Deno.errors.NotFound, `ran from ${base}`);
        };
        // The tree dir is a symbolic link to someone's tree.
        await evilTree(`${box.dir}/evil-a`);
        await Deno.mkdir(`${box.dir}/u-link`, { mode: 0o700 });
        await Deno.symlink(`${box.dir}/evil-a`, `${box.dir}/u-link/${sha}`);
        await refused(`${box.dir}/u-link`, /u-link\/[0-9a-f]{64}: it is a symbolic link/);
        // The base is a symbolic link.
        await evilTree(`${box.dir}/evil-b/${sha}`);
        await Deno.symlink(`${box.dir}/evil-b`, `${box.dir}/u-baselink`);
        await refused(`${box.dir}/u-baselink`, /u-baselink: it is a symbolic link/);
        // The tree dir, or the base, is writable by others.
        await Deno.mkdir(`${box.dir}/u-open`, { mode: 0o700 });
        await evilTree(`${box.dir}/u-open/${sha}`);
        await Deno.chmod(`${box.dir}/u-open/${sha}`, 0o777);
        await refused(`${box.dir}/u-open`, /mode 777 lets others write in it/);
        await Deno.mkdir(`${box.dir}/u-open-base`);
        await Deno.chmod(`${box.dir}/u-open-base`, 0o775);
        await refused(`${box.dir}/u-open-base`, /u-open-base: its mode 775 lets others write/);
        if (Deno.uid() !== 0) {
          console.log("skipped the other-user unpack dirs: chown to nobody needs root");
          return;
        }
        // A base, a tree dir, or a parent of the base that belongs to another user (nobody).
        await evilTree(`${box.dir}/u-foreign/${sha}`);
        for (const p of [`${box.dir}/u-foreign`, `${box.dir}/u-foreign/${sha}`]) {
          await Deno.chown(p, 65534, 65534);
          await Deno.chmod(p, 0o755);
        }
        await refused(`${box.dir}/u-foreign`, /u-foreign: it belongs to uid 65534, not to you/);
        await Deno.mkdir(`${box.dir}/u-mine`, { mode: 0o700 });
        await evilTree(`${box.dir}/u-mine/${sha}`);
        await Deno.chown(`${box.dir}/u-mine/${sha}`, 65534, 65534);
        await refused(`${box.dir}/u-mine`, /[0-9a-f]{64}: it belongs to uid 65534/);
        await Deno.mkdir(`${box.dir}/theirs/base`, { recursive: true, mode: 0o755 });
        await Deno.chown(`${box.dir}/theirs`, 65534, 65534);
        await refused(
          `${box.dir}/theirs/base`,
          /its parent .*\/theirs belongs to uid 65534/,
        );
      },
    );

    await t.step("two first runs at once: both start, one tree, no temp dir left", async () => {
      const dir = `${box.dir}/unpack-race`;
      const [a, b] = await Promise.all([
        runIn(box, ["version"], { SYNAPSE_UNPACK_DIR: dir }),
        runIn(box, ["version"], { SYNAPSE_UNPACK_DIR: dir }),
      ]);
      assert.equal(a.code, 0, a.stderr);
      assert.equal(b.code, 0, b.stderr);
      assert.equal(a.stdout, b.stdout);
      assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name), [record.payload_sha256]);
    });

    await t.step("a truncated copy is refused before anything runs", async () => {
      const bytes = await Deno.readFile(box.bin);
      const cut = `${box.dir}/bin/ck-synapse-cut`;
      await Deno.writeFile(cut, bytes.subarray(0, bytes.length - 1000), { mode: 0o755 });
      const r = await runIn(box, ["version"], { SYNAPSE_UNPACK_DIR: `${box.dir}/unpack-cut` }, cut);
      assert.equal(r.code, 2);
      assert.equal(r.stdout, "");
      assert.match(r.stderr, /truncated or modified copy/);
      assert.throws(() => Deno.statSync(`${box.dir}/unpack-cut`), Deno.errors.NotFound);
    });

    await t.step("a corrupted payload is refused and nothing is left unpacked", async () => {
      const bytes = await Deno.readFile(box.bin);
      bytes[bytes.length - 5000] = bytes[bytes.length - 5000]! ^ 0xff;
      const bad = `${box.dir}/bin/ck-synapse-bad`;
      await Deno.writeFile(bad, bytes, { mode: 0o755 });
      const dir = `${box.dir}/unpack-bad`;
      const r = await runIn(box, ["version"], { SYNAPSE_UNPACK_DIR: dir }, bad);
      assert.equal(r.code, 2);
      assert.equal(r.stdout, "");
      assert.match(r.stderr, /the payload's SHA-256 is [0-9a-f]{64}, this build's is/);
      assert.deepEqual([...Deno.readDirSync(dir)], []);
    });
  } finally {
    await Deno.remove(box.dir, { recursive: true }).catch(() => {});
  }
});

Deno.test({
  name: "release smoke: the deno compile ck-synapse (needs DENORT_BIN)",
  ignore: COMPILE_SKIPPED,
  fn: async (t) => {
    const record = await buildArtifact("compile");
    assert.equal(record.format, "compile");
    const box = await makeSandbox(`${ROOT}/.cache/smoke-dist-compile/ck-synapse`);
    try {
      await smoke(t, record, box);
    } finally {
      await Deno.remove(box.dir, { recursive: true }).catch(() => {});
    }
  },
});
