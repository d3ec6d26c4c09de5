import assert from "node:assert/strict";
import { connectAndAuthenticate, serverHandshake } from "../../lib/subc/auth.ts";
import {
  connectionFileCandidates,
  connectionInfoToJson,
  daemonConnectionFilePath,
  discoverConnectionFile,
  parseConnectionInfo,
  readConnectionFile,
  writeConnectionFile,
} from "../../lib/subc/connection_file.ts";
import type { ConnectionInfo } from "../../lib/subc/connection_file.ts";
import { SubcWireError } from "../../lib/subc/errors.ts";
import type { SubcWireReason } from "../../lib/subc/errors.ts";

const INFO: ConnectionInfo = {
  schema: 1,
  wireVersion: 2,
  endpoints: [{ host: "127.0.0.1", port: 8799 }],
  key: Uint8Array.from({ length: 32 }, (_, i) => i),
  daemonId: Uint8Array.from({ length: 16 }, (_, i) => 0xa0 + i),
  pid: 4242,
  daemonVer: "0.26.0-test",
};

function isReason(
  reason: SubcWireReason,
  details?: Record<string, unknown>,
): (e: unknown) => boolean {
  return (e: unknown) => {
    assert.ok(e instanceof SubcWireError, `expected SubcWireError, got ${e}`);
    assert.equal(e.reason, reason, e.message);
    for (const [k, v] of Object.entries(details ?? {})) assert.deepEqual(e.details?.[k], v, k);
    return true;
  };
}

/** Writes `json` as a 0600 file (bypassing writeConnectionFile's own validation). */
async function writeRaw(path: string, json: unknown, mode = 0o600): Promise<void> {
  await Deno.writeTextFile(path, typeof json === "string" ? json : JSON.stringify(json));
  await Deno.chmod(path, mode);
}

async function tempDir(): Promise<{ path: string } & AsyncDisposable> {
  const path = await Deno.makeTempDir({ prefix: "subc-conn-" });
  return { path, [Symbol.asyncDispose]: () => Deno.remove(path, { recursive: true }) };
}

Deno.test("writeConnectionFile() publishes 0600 in a 0700 directory, atomically; readConnectionFile() reads it back", async () => {
  await using tmp = await tempDir();
  const dir = tmp.path;
  const path = `${dir}/run/subc-connection.json`;
  await writeConnectionFile(path, INFO);
  assert.equal((await Deno.stat(path)).mode! & 0o777, 0o600);
  assert.equal((await Deno.stat(`${dir}/run`)).mode! & 0o777, 0o700);
  assert.deepEqual([...Deno.readDirSync(`${dir}/run`)].map((e) => e.name), [
    "subc-connection.json",
  ]);
  const json = JSON.parse(await Deno.readTextFile(path));
  assert.deepEqual(Object.keys(json), [
    "schema",
    "wire_version",
    "endpoints",
    "key",
    "daemon_id",
    "pid",
    "daemon_ver",
  ]);
  assert.deepEqual(json.key, [...INFO.key]);
  assert.deepEqual(await readConnectionFile(path), INFO);
  // Rewriting replaces the file (rename over it).
  await writeConnectionFile(path, { ...INFO, pid: 7 });
  assert.equal((await readConnectionFile(path)).pid, 7);
});

Deno.test("readConnectionFile() refuses a file others may read (mode 0644) before reading it", async () => {
  await using tmp = await tempDir();
  const dir = tmp.path;
  const path = `${dir}/subc-connection.json`;
  await writeConnectionFile(path, INFO);
  for (const mode of [0o644, 0o640, 0o604, 0o601]) {
    await Deno.chmod(path, mode);
    await assert.rejects(
      readConnectionFile(path),
      isReason("connection_file_insecure_mode", { mode: mode.toString(8) }),
    );
  }
  // Content that would not parse is never reached: the mode is refused first.
  await writeRaw(path, "not json", 0o644);
  await assert.rejects(readConnectionFile(path), isReason("connection_file_insecure_mode"));
});

Deno.test("readConnectionFile() refuses a file another user owns", async () => {
  await using tmp = await tempDir();
  const dir = tmp.path;
  const path = `${dir}/subc-connection.json`;
  await writeConnectionFile(path, INFO);
  if (Deno.uid() === 0) {
    // As root: a real foreign owner (nobody).
    await Deno.chown(path, 65534, 65534);
    await assert.rejects(
      readConnectionFile(path),
      isReason("connection_file_foreign_owner", { owner_uid: 65534, uid: 0 }),
    );
  }
  // As anyone: the file is ours, but another uid is expected.
  const me = (await Deno.stat(path)).uid!;
  await assert.rejects(
    readConnectionFile(path, { uid: me + 1 }),
    isReason("connection_file_foreign_owner", { owner_uid: me }),
  );
});

Deno.test("readConnectionFile() refuses schema 2, wire_version 1, a short key, each with its reason", async () => {
  await using tmp = await tempDir();
  const dir = tmp.path;
  const path = `${dir}/subc-connection.json`;
  const base = connectionInfoToJson(INFO);
  const cases: [Record<string, unknown>, SubcWireReason, Record<string, unknown>][] = [
    [{ schema: 2 }, "connection_file_unsupported_schema", { schema: 2, field: "schema" }],
    [{ wire_version: 1 }, "connection_file_wire_version_mismatch", { wire_version: 1 }],
    [{ wire_version: 3 }, "connection_file_wire_version_mismatch", { wire_version: 3 }],
    [{ key: new Array(31).fill(1) }, "connection_file_key_too_short", { len: 31, min: 32 }],
    [{ endpoints: [] }, "connection_file_no_endpoint", { field: "endpoints" }],
    [{ daemon_id: new Array(15).fill(1) }, "connection_file_invalid_field", { field: "daemon_id" }],
    [{ key: [1, 2, 3, 256] }, "connection_file_invalid_field", { field: "key.3" }],
    [{ key: "c2VjcmV0" }, "connection_file_invalid_field", { field: "key" }],
    [
      { endpoints: [{ host: "127.0.0.1", port: 70000 }] },
      "connection_file_invalid_field",
      { field: "endpoints.0.port" },
    ],
    [{ endpoints: [{ port: 1 }] }, "connection_file_invalid_field", { field: "endpoints.0.host" }],
    [{ pid: -1 }, "connection_file_invalid_field", { field: "pid" }],
    [{ daemon_ver: 2 }, "connection_file_invalid_field", { field: "daemon_ver" }],
    [{ schema: "1" }, "connection_file_invalid_field", { field: "schema" }],
  ];
  for (const [patch, reason, details] of cases) {
    await writeRaw(path, { ...base, ...patch });
    await assert.rejects(readConnectionFile(path), isReason(reason, { path, ...details }), reason);
  }
  // Never the key in a message.
  await writeRaw(path, { ...base, key: new Array(31).fill(0xee) });
  await assert.rejects(readConnectionFile(path), (e: unknown) => {
    assert.ok(e instanceof SubcWireError);
    assert.doesNotMatch(e.message + JSON.stringify(e.details), /238/);
    return true;
  });
});

Deno.test("readConnectionFile() accepts wire_version absent (or null) and ignores unknown fields", async () => {
  await using tmp = await tempDir();
  const dir = tmp.path;
  const path = `${dir}/subc-connection.json`;
  const base = connectionInfoToJson(INFO);
  const { wire_version: _, ...withoutWire } = base;
  await writeRaw(path, withoutWire);
  const info = await readConnectionFile(path);
  assert.equal(info.wireVersion, undefined);
  assert.equal("wireVersion" in info, false);
  await writeRaw(path, { ...base, wire_version: null, future_field: { x: 1 } });
  assert.equal((await readConnectionFile(path)).wireVersion, undefined);
});

Deno.test("readConnectionFile() names a missing file, a directory and bad JSON", async () => {
  await using tmp = await tempDir();
  const dir = tmp.path;
  await assert.rejects(
    readConnectionFile(`${dir}/absent.json`),
    isReason("connection_file_not_found", { path: `${dir}/absent.json` }),
  );
  await Deno.chmod(dir, 0o700);
  await assert.rejects(readConnectionFile(dir), isReason("connection_file_unreadable"));
  await writeRaw(`${dir}/bad.json`, '{"schema":1,');
  await assert.rejects(
    readConnectionFile(`${dir}/bad.json`),
    isReason("connection_file_invalid_json"),
  );
  assert.throws(() => parseConnectionInfo([1]), isReason("connection_file_invalid_field"));
});

Deno.test("writeConnectionFile() refuses info a reader would refuse, writing nothing", async () => {
  await using tmp = await tempDir();
  const dir = tmp.path;
  const path = `${dir}/subc-connection.json`;
  await assert.rejects(
    writeConnectionFile(path, { ...INFO, key: new Uint8Array(16) }),
    isReason("connection_file_key_too_short"),
  );
  assert.deepEqual([...Deno.readDirSync(dir)], []);

  // The parent "directory" is a regular file.
  await Deno.writeTextFile(`${dir}/f`, "");
  await assert.rejects(
    writeConnectionFile(`${dir}/f/subc-connection.json`, INFO),
    isReason("connection_file_unwritable", { path: `${dir}/f/subc-connection.json` }),
  );
});

Deno.test("connectionFileCandidates() follows the client ladder; empty variables count as unset", () => {
  const env = {
    SUBC_CONNECTION_FILE: "",
    XDG_RUNTIME_DIR: "/run/user/1000",
    HOME: "/home/u/",
    TMPDIR: "/var/tmp",
  };
  assert.deepEqual(
    connectionFileCandidates({
      explicit: "/flag.json",
      env: { ...env, SUBC_CONNECTION_FILE: "/x" },
    }),
    {
      paths: ["/flag.json"],
      exclusive: true,
    },
  );
  assert.deepEqual(
    connectionFileCandidates({ env: { ...env, SUBC_CONNECTION_FILE: "/named.json" } }),
    {
      paths: ["/named.json"],
      exclusive: true,
    },
  );
  assert.deepEqual(connectionFileCandidates({ env, uid: 1000 }), {
    paths: [
      "/run/user/1000/subc-connection.json",
      "/home/u/.local/share/cortexkit/run/subc-connection.json",
      "/var/tmp/subc-1000.connection.json",
    ],
    exclusive: false,
  });
  assert.deepEqual(
    connectionFileCandidates({ env: { XDG_RUNTIME_DIR: "", HOME: "", TMPDIR: "" }, uid: 7 }),
    { paths: ["/tmp/subc-7.connection.json"], exclusive: false },
  );
  assert.deepEqual(
    connectionFileCandidates({ env: { TMPDIR: "/t" }, uid: 0, explicit: "" }).paths,
    ["/t/subc-0.connection.json"],
  );
});

Deno.test("discoverConnectionFile() takes the first usable candidate; a named file is exclusive", async () => {
  await using tmp = await tempDir();
  const dir = tmp.path;
  const runtime = `${dir}/runtime`;
  const home = `${dir}/home`;
  const homeFile = `${home}/.local/share/cortexkit/run/subc-connection.json`;
  await Deno.mkdir(runtime, { mode: 0o700 });
  await writeConnectionFile(`${runtime}/subc-connection.json`, INFO);
  await Deno.chmod(`${runtime}/subc-connection.json`, 0o644); // unusable: skipped
  await writeConnectionFile(homeFile, { ...INFO, pid: 99 });
  const env = { XDG_RUNTIME_DIR: runtime, HOME: home, TMPDIR: dir };

  const found = await discoverConnectionFile({ env });
  assert.equal(found.path, homeFile);
  assert.equal(found.info.pid, 99);

  // SUBC_CONNECTION_FILE names a missing file: its refusal, no fallback to the HOME file.
  await assert.rejects(
    discoverConnectionFile({ env: { ...env, SUBC_CONNECTION_FILE: `${dir}/nope.json` } }),
    isReason("connection_file_not_found", { path: `${dir}/nope.json` }),
  );
  // The explicit flag is exclusive too, with the named file's own reason.
  await assert.rejects(
    discoverConnectionFile({ env, explicit: `${runtime}/subc-connection.json` }),
    isReason("connection_file_insecure_mode"),
  );

  await Deno.remove(homeFile);
  await assert.rejects(discoverConnectionFile({ env, uid: 5 }), (e: unknown) => {
    isReason("connection_file_not_found")(e);
    assert.deepEqual((e as SubcWireError).details?.tried, [
      { path: `${runtime}/subc-connection.json`, reason: "connection_file_insecure_mode" },
      { path: homeFile, reason: "connection_file_not_found" },
      { path: `${dir}/subc-5.connection.json`, reason: "connection_file_not_found" },
    ]);
    return true;
  });
});

Deno.test("daemonConnectionFilePath() is <data_home>/cortexkit/run/subc-connection.json", () => {
  assert.equal(
    daemonConnectionFilePath({ XDG_DATA_HOME: "/d/" }),
    "/d/cortexkit/run/subc-connection.json",
  );
  assert.equal(
    daemonConnectionFilePath({ HOME: "/h" }),
    "/h/.local/share/cortexkit/run/subc-connection.json",
  );
});

Deno.test("connectAndAuthenticate() reaches the daemon of a connection file and authenticates", async () => {
  await using tmp = await tempDir();
  const dir = tmp.path;
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const path = `${dir}/subc-connection.json`;
  await writeConnectionFile(path, {
    ...INFO,
    endpoints: [{ host: "127.0.0.1", port: listener.addr.port }],
  });
  const info = await readConnectionFile(path);
  const serving = (async () => {
    const conn = await listener.accept();
    try {
      return await serverHandshake(conn, {
        key: INFO.key,
        daemonId: INFO.daemonId,
        daemonVer: "d1",
      });
    } finally {
      conn.close();
    }
  })();
  const { conn, daemonVer } = await connectAndAuthenticate(info, { role: "consumer" });
  conn.close();
  listener.close();
  assert.equal(daemonVer, "d1");
  assert.deepEqual(await serving, { role: "consumer" });
});
