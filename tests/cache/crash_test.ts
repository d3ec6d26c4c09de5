import assert from "node:assert/strict";
import { ROOT } from "../_helpers.ts";
import { TestServer } from "./_server.ts";
import { digestOfBytes, filesIn, ONNX_PATH, tempCache, tmpLeftovers } from "./_helpers.ts";

const ONNX = await Deno.readFile(ONNX_PATH);
const ONNX_DIGEST = digestOfBytes(ONNX);
const HEX = ONNX_DIGEST.slice(7);

/** A `deno run` child downloading `url` into `root`; `lines` yields what it prints. */
function spawnDownload(
  root: string,
  url: string,
  permissions = ["--allow-read", "--allow-write", "--allow-net", "--allow-ffi", "--allow-env"],
): { child: Deno.ChildProcess; next(): Promise<string | undefined> } {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--no-check",
      ...permissions,
      `${ROOT}/tests/cache/_download_child.ts`,
      JSON.stringify({ root, url, sha256: ONNX_DIGEST, size: ONNX.length }),
    ],
    cwd: ROOT,
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = "";
  return {
    child,
    async next() {
      while (!buffered.includes("\n")) {
        const { value, done } = await reader.read();
        if (done) return undefined;
        buffered += value;
      }
      const i = buffered.indexOf("\n");
      const line = buffered.slice(0, i);
      buffered = buffered.slice(i + 1);
      return line;
    },
  };
}

Deno.test("a process killed mid-download leaves no blob; the next download() completes, resuming", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  const half = ONNX.length >> 1;
  srv.routes.set("/model.onnx", { kind: "file", bytes: ONNX, stallAt: half });
  const { child, next } = spawnDownload(t.root, `${srv.base}/model.onnx`);
  try {
    assert.equal(await next(), "progress");
  } finally {
    child.kill("SIGKILL");
    await child.status;
    await child.stdout.cancel().catch(() => {});
  }
  assert.deepEqual(filesIn(`${t.root}/blobs`), [], "no blob is visible");
  assert.deepEqual(filesIn(`${t.root}/meta`), []);
  const partial = (await Deno.stat(`${t.root}/tmp/${HEX}.partial`)).size;
  assert.ok(partial > 0 && partial <= half, `partial ${partial}`);
  srv.routes.set("/model.onnx", { kind: "file", bytes: ONNX });
  const meta = await t.cache.download(`${srv.base}/model.onnx`, {
    sha256: ONNX_DIGEST,
    size: ONNX.length,
  });
  assert.equal(meta.digest, ONNX_DIGEST);
  assert.equal(meta.validation_state, "valid");
  assert.deepEqual(await Deno.readFile(t.cache.blobPath(ONNX_DIGEST)), ONNX);
  assert.deepEqual(srv.requests.map((r) => r.range), [undefined, `bytes=${partial}-`]);
  assert.deepEqual(tmpLeftovers(t.root), []);
});

Deno.test("two processes downloading one digest make one transfer; the waiter finds the blob", async () => {
  await using srv = new TestServer();
  await using t = await tempCache({ lockPollMs: 20 });
  let open!: () => void;
  srv.routes.set("/model.onnx", {
    kind: "file",
    bytes: ONNX,
    gate: { at: ONNX.length >> 1, open: new Promise((r) => (open = r)) },
  });
  const { child, next } = spawnDownload(t.root, `${srv.base}/model.onnx`);
  try {
    assert.equal(await next(), "progress");
    // The child holds leases/<hex>.download.lock and is half-way: this download must wait for it.
    const mine = t.cache.download(`${srv.base}/model.onnx`, { sha256: ONNX_DIGEST });
    open();
    const meta = await mine;
    assert.equal(meta.digest, ONNX_DIGEST);
    assert.equal(await next(), `ok ${ONNX_DIGEST}`);
    assert.equal((await child.status).success, true);
  } finally {
    try {
      child.kill("SIGKILL");
    } catch { /* exited */ }
    await child.status;
    await child.stdout.cancel().catch(() => {});
  }
  assert.equal(srv.requests.length, 1, "one transfer");
  assert.deepEqual(filesIn(`${t.root}/blobs`), [HEX]);
  assert.deepEqual(await Deno.readFile(t.cache.blobPath(ONNX_DIGEST)), ONNX);
});

Deno.test("a full disk (ENOSPC from the kernel) is download_failed {reason: storage_full}, the partial removed", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  srv.routes.set("/model.onnx", { kind: "file", bytes: ONNX });
  // Every write to /dev/full fails with ENOSPC; the partial is made a link to it. Deno lets only a
  // process with all permissions open a device, hence the child.
  await Deno.mkdir(`${t.root}/tmp`, { recursive: true });
  await Deno.symlink("/dev/full", `${t.root}/tmp/${HEX}.partial`);
  const { child, next } = spawnDownload(t.root, `${srv.base}/model.onnx`, ["--allow-all"]);
  try {
    assert.equal(await next(), "error download_failed storage_full");
  } finally {
    await child.status;
    await child.stdout.cancel().catch(() => {});
  }
  assert.deepEqual(tmpLeftovers(t.root), [], "the partial (the link) is removed");
  assert.deepEqual(filesIn(`${t.root}/blobs`), []);
  assert.equal(
    (await t.cache.download(`${srv.base}/model.onnx`, { sha256: ONNX_DIGEST })).digest,
    ONNX_DIGEST,
  );
});

Deno.test("a host the process may not reach (Deno's net permission) is backend_unavailable net_not_allowed, not a retryable network failure", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  srv.routes.set("/model.onnx", { kind: "file", bytes: ONNX });
  // The child may reach 127.0.0.1 only; "localhost" names the same server but is not granted.
  const port = new URL(srv.base).port;
  const { child, next } = spawnDownload(t.root, `http://localhost:${port}/model.onnx`, [
    "--allow-read",
    "--allow-write",
    `--allow-net=127.0.0.1:${port}`,
    "--allow-ffi",
    "--allow-env",
  ]);
  try {
    assert.equal(await next(), "error backend_unavailable undefined");
    const details = JSON.parse((await next())!);
    assert.equal(details.host, `localhost:${port}`);
    assert.deepEqual(details.backends, [{ backend: "download", reason: "net_not_allowed" }]);
  } finally {
    await child.status;
    await child.stdout.cancel().catch(() => {});
  }
  assert.deepEqual(filesIn(`${t.root}/blobs`), []);
});
