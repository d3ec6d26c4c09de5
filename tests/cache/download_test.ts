import assert from "node:assert/strict";
import { SynapseError } from "../../lib/contract/errors.ts";
import { isPrivateHost, MAX_REDIRECTS, redirectRefusal } from "../../lib/cache/download.ts";
import type { DownloadProgress } from "../../lib/cache/types.ts";
import { TestServer } from "./_server.ts";
import {
  digestOfBytes,
  filesIn,
  GGUF_PATH,
  ONNX_PATH,
  tempCache,
  tmpLeftovers,
} from "./_helpers.ts";

const ONNX = await Deno.readFile(ONNX_PATH);
const ONNX_DIGEST = digestOfBytes(ONNX);
const HEX = ONNX_DIGEST.slice(7);

/** Checks a `download_failed` with `reason`; returns true for assert.rejects. */
function downloadFailed(
  reason: string,
  extra: Record<string, unknown> = {},
): (err: unknown) => boolean {
  return (err: unknown) => {
    assert.ok(err instanceof SynapseError, String(err));
    assert.equal(err.code, "download_failed", err.message);
    assert.equal(err.errorClass, "transient");
    assert.equal(err.retryAfterMs, 1000);
    assert.equal(err.details?.reason, reason, err.message);
    for (const [k, v] of Object.entries(extra)) assert.deepEqual(err.details?.[k], v, k);
    return true;
  };
}

function artifactInvalid(reason: string): (err: unknown) => boolean {
  return (err: unknown) => {
    assert.ok(err instanceof SynapseError, String(err));
    assert.equal(err.code, "artifact_invalid", err.message);
    assert.equal(err.details?.reason, reason, err.message);
    return true;
  };
}

Deno.test("download() fetches, verifies and validates a model, reporting progress", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  srv.routes.set("/m/model.onnx", { kind: "file", bytes: ONNX });
  const seen: DownloadProgress[] = [];
  const meta = await t.cache.download(`${srv.base}/m/model.onnx`, {
    sha256: ONNX_DIGEST,
    size: ONNX.length,
    onProgress: (p) => seen.push(p),
  });
  assert.equal(meta.digest, ONNX_DIGEST);
  assert.equal(meta.format, "onnx");
  assert.equal(meta.validation_state, "valid");
  assert.equal(meta.source, `${srv.base}/m/model.onnx`);
  assert.deepEqual(await Deno.readFile(t.cache.blobPath(ONNX_DIGEST)), ONNX);
  assert.deepEqual(seen.at(-1), { bytes_done: ONNX.length, bytes_total: ONNX.length });
  assert.ok(seen.every((p, i) => i === 0 || p.bytes_done >= seen[i - 1]!.bytes_done));
  assert.deepEqual(tmpLeftovers(t.root), []);
  assert.deepEqual(srv.requests, [{ path: "/m/model.onnx" }]);
  // Present already: validated, not fetched again (bare hex digests are accepted).
  assert.deepEqual(await t.cache.download(`${srv.base}/m/model.onnx`, { sha256: HEX }), meta);
  assert.equal(srv.requests.length, 1);
});

Deno.test("download() refuses a non-http(s) URL and a malformed sha256 with invalid_request", async () => {
  await using t = await tempCache();
  const field = (name: string) => (err: unknown) => {
    assert.ok(err instanceof SynapseError);
    assert.equal(err.code, "invalid_request");
    assert.equal(err.details?.field, name);
    return true;
  };
  await assert.rejects(
    t.cache.download("file:///etc/passwd", { sha256: ONNX_DIGEST }),
    field("url"),
  );
  await assert.rejects(t.cache.download("not a url", { sha256: ONNX_DIGEST }), field("url"));
  await assert.rejects(
    t.cache.download("http://127.0.0.1:9/x", { sha256: "sha256:abc" }),
    field("sha256"),
  );
  await assert.rejects(
    t.cache.download("http://127.0.0.1:9/x", { sha256: ONNX_DIGEST, size: -1 }),
    field("size"),
  );
});

Deno.test("F27: bytes with the wrong digest twice are artifact_invalid naming both digests, leaving neither blob nor partial", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  const gguf = await Deno.readFile(GGUF_PATH);
  srv.routes.set("/model.onnx", { kind: "file", bytes: gguf });
  await assert.rejects(
    t.cache.download(`${srv.base}/model.onnx`, { sha256: ONNX_DIGEST }),
    (err) => {
      artifactInvalid("digest_mismatch")(err);
      const d = (err as SynapseError).details!;
      assert.equal(d.expected, ONNX_DIGEST);
      assert.equal(d.digest, digestOfBytes(gguf));
      assert.equal(d.file, "model.onnx");
      assert.equal((err as SynapseError).errorClass, "permanent");
      assert.ok((err as Error).message.includes(ONNX_DIGEST), "names the expected digest");
      assert.ok((err as Error).message.includes(digestOfBytes(gguf)), "names the digest got");
      return true;
    },
  );
  assert.equal(srv.requests.length, 2, "retried once");
  assert.deepEqual(filesIn(`${t.root}/blobs`), []);
  assert.deepEqual(tmpLeftovers(t.root), []);
  // A pinned size the server's length contradicts: refused before the body is read.
  await assert.rejects(
    t.cache.download(`${srv.base}/model.onnx`, { sha256: ONNX_DIGEST, size: ONNX.length }),
    artifactInvalid("size_mismatch"),
  );
  assert.deepEqual(tmpLeftovers(t.root), []);
});

Deno.test("a truncated body is retried inside the call, resuming with Range; tmp/ is clean", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  const half = ONNX.length >> 1;
  srv.routes.set("/model.onnx", {
    kind: "seq",
    answers: [
      { kind: "file", bytes: ONNX, truncateAt: half },
      { kind: "file", bytes: ONNX },
    ],
  });
  const url = `${srv.base}/model.onnx`;
  const seen: DownloadProgress[] = [];
  const meta = await t.cache.download(url, {
    sha256: ONNX_DIGEST,
    size: ONNX.length,
    onProgress: (p) => seen.push(p),
  });
  assert.equal(meta.digest, ONNX_DIGEST);
  assert.deepEqual(srv.requests.map((r) => r.range), [undefined, `bytes=${half}-`]);
  assert.deepEqual(seen.at(-1), { bytes_done: ONNX.length, bytes_total: ONNX.length });
  assert.deepEqual(await Deno.readFile(t.cache.blobPath(ONNX_DIGEST)), ONNX);
  assert.deepEqual(tmpLeftovers(t.root), []);
});

Deno.test("F27: an empty 200 body, a short body and a connection reset are transient: retried, then served", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  srv.routes.set("/model.onnx", {
    kind: "seq",
    answers: [
      { kind: "file", bytes: ONNX, empty: true },
      { kind: "file", bytes: ONNX, reset: true },
      { kind: "file", bytes: ONNX, truncateAt: 777 },
      { kind: "file", bytes: ONNX },
    ],
  });
  const meta = await t.cache.download(`${srv.base}/model.onnx`, {
    sha256: ONNX_DIGEST,
    size: ONNX.length,
  });
  assert.equal(meta.digest, ONNX_DIGEST);
  assert.equal(meta.validation_state, "valid");
  assert.deepEqual(srv.requests.map((r) => r.range), [
    undefined,
    undefined,
    undefined,
    "bytes=777-",
  ]);
  assert.deepEqual(await Deno.readFile(t.cache.blobPath(ONNX_DIGEST)), ONNX);
  assert.deepEqual(tmpLeftovers(t.root), []);
  assert.deepEqual(filesIn(`${t.root}/leases`).filter((n) => n.endsWith(".download.lock")), [
    `${HEX}.download.lock`,
  ], "the download lock lives in leases/, not tmp/");
});

Deno.test("F27: an empty body with no pinned size is not a digest mismatch; the retries are bounded, then transient", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  srv.routes.set("/model.onnx", { kind: "file", bytes: ONNX, empty: true });
  await assert.rejects(
    t.cache.download(`${srv.base}/model.onnx`, { sha256: ONNX_DIGEST }),
    downloadFailed("network", { detail: "empty_body", attempts: 4 }),
  );
  assert.equal(srv.requests.length, 4, "one attempt and 3 retries");
  // Always short: the same bound, and nothing is left in tmp/ once the call ended.
  srv.routes.set("/short.onnx", { kind: "file", bytes: ONNX, truncateAt: 100 });
  await assert.rejects(
    t.cache.download(`${srv.base}/short.onnx`, { sha256: ONNX_DIGEST, size: ONNX.length }),
    (err) => {
      downloadFailed("network", { detail: "short_body", attempts: 4 })(err);
      assert.match((err as Error).message, /3 retries/);
      return true;
    },
  );
  assert.deepEqual(filesIn(`${t.root}/blobs`), []);
  assert.deepEqual(tmpLeftovers(t.root), []);
});

Deno.test("F27: a complete body with the wrong digest is fetched once more: right the second time it is served", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  const wrong = ONNX.slice();
  wrong[wrong.length >> 1]! ^= 0xff;
  srv.routes.set("/model.onnx", {
    kind: "seq",
    answers: [{ kind: "file", bytes: wrong }, { kind: "file", bytes: ONNX }],
  });
  const meta = await t.cache.download(`${srv.base}/model.onnx`, {
    sha256: ONNX_DIGEST,
    size: ONNX.length,
  });
  assert.equal(meta.digest, ONNX_DIGEST);
  assert.deepEqual(srv.requests.map((r) => r.range), [undefined, undefined], "from byte 0");
  assert.deepEqual(tmpLeftovers(t.root), []);
});

Deno.test("F27: a 416 to the Range of a complete partial verifies the partial; no byte is fetched", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  srv.routes.set("/model.onnx", { kind: "file", bytes: ONNX });
  // A crash after the last byte, no size pinned: the partial holds the whole file.
  await Deno.mkdir(`${t.root}/tmp`, { recursive: true });
  await Deno.writeFile(`${t.root}/tmp/${HEX}.partial`, ONNX);
  const meta = await t.cache.download(`${srv.base}/model.onnx`, { sha256: ONNX_DIGEST });
  assert.equal(meta.digest, ONNX_DIGEST);
  assert.deepEqual(srv.requests.map((r) => r.range), [`bytes=${ONNX.length}-`]);
  assert.deepEqual(await Deno.readFile(t.cache.blobPath(ONNX_DIGEST)), ONNX);
  assert.deepEqual(tmpLeftovers(t.root), []);
  // A complete partial with other bytes: the 416 leads to a clean restart from byte 0.
  const gguf = await Deno.readFile(GGUF_PATH);
  const ggufHex = digestOfBytes(gguf).slice(7);
  srv.routes.set("/model.gguf", { kind: "file", bytes: gguf });
  await Deno.writeFile(`${t.root}/tmp/${ggufHex}.partial`, new Uint8Array(gguf.length).fill(3));
  assert.equal(
    (await t.cache.download(`${srv.base}/model.gguf`, { sha256: digestOfBytes(gguf) })).digest,
    digestOfBytes(gguf),
  );
  assert.deepEqual(srv.requestsFor("/model.gguf").map((r) => r.range), [
    `bytes=${gguf.length}-`,
    undefined,
  ]);
  assert.deepEqual(tmpLeftovers(t.root), []);
});

Deno.test("a resume the server answers with 200 restarts cleanly from byte 0", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  const url = `${srv.base}/model.onnx`;
  srv.routes.set("/model.onnx", {
    kind: "seq",
    answers: [
      { kind: "file", bytes: ONNX, truncateAt: 1000 },
      { kind: "file", bytes: ONNX, ignoreRange: true },
    ],
  });
  const meta = await t.cache.download(url, { sha256: ONNX_DIGEST });
  assert.equal(meta.digest, ONNX_DIGEST);
  assert.deepEqual(srv.requests.map((r) => r.range), [undefined, "bytes=1000-"]);
  assert.deepEqual(await Deno.readFile(t.cache.blobPath(ONNX_DIGEST)), ONNX);
});

Deno.test("a resumed file whose digest then mismatches is downloaded again from byte 0", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  srv.routes.set("/model.onnx", { kind: "file", bytes: ONNX });
  // A partial of the right length whose bytes are not the file's (a server that changed).
  await Deno.mkdir(`${t.root}/tmp`, { recursive: true });
  await Deno.writeFile(`${t.root}/tmp/${HEX}.partial`, new Uint8Array(5000).fill(7));
  const meta = await t.cache.download(`${srv.base}/model.onnx`, {
    sha256: ONNX_DIGEST,
    size: ONNX.length,
  });
  assert.equal(meta.digest, ONNX_DIGEST);
  assert.deepEqual(srv.requests.map((r) => r.range), ["bytes=5000-", undefined]);
  assert.deepEqual(await Deno.readFile(t.cache.blobPath(ONNX_DIGEST)), ONNX);
  assert.deepEqual(tmpLeftovers(t.root), []);
});

Deno.test("a stalled body is retried (resuming), then download_failed {reason: network, detail: idle_timeout}; tmp/ clean", async () => {
  await using srv = new TestServer();
  await using t = await tempCache({ idleTimeoutMs: 300, downloadRetryDelaysMs: [10] });
  srv.routes.set("/model.onnx", { kind: "file", bytes: ONNX, stallAt: 4096 });
  await assert.rejects(
    t.cache.download(`${srv.base}/model.onnx`, { sha256: ONNX_DIGEST }),
    downloadFailed("network", { detail: "idle_timeout", attempts: 2 }),
  );
  assert.deepEqual(srv.requests.map((r) => r.range), [undefined, "bytes=4096-"]);
  assert.deepEqual(filesIn(`${t.root}/blobs`), []);
  assert.deepEqual(tmpLeftovers(t.root), []);
});

Deno.test("a local file fault other than a full disk is not reported as a network failure", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  srv.routes.set("/model.onnx", { kind: "file", bytes: ONNX });
  // The partial's place is taken by a directory: opening it for writing fails locally.
  await Deno.mkdir(`${t.root}/tmp/${HEX}.partial`, { recursive: true });
  await assert.rejects(
    t.cache.download(`${srv.base}/model.onnx`, { sha256: ONNX_DIGEST }),
    (err) => {
      assert.ok(!(err instanceof SynapseError), `not a download_failed: ${err}`);
      return true;
    },
  );
});

Deno.test("404 and 500 are download_failed {reason: http_status, http_status}", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  srv.routes.set("/boom", { kind: "status", status: 500 });
  await assert.rejects(
    t.cache.download(`${srv.base}/missing.onnx`, { sha256: ONNX_DIGEST }),
    downloadFailed("http_status", { http_status: 404, file: "missing.onnx" }),
  );
  await assert.rejects(
    t.cache.download(`${srv.base}/boom`, { sha256: ONNX_DIGEST, file: "model.onnx" }),
    downloadFailed("http_status", { http_status: 500, file: "model.onnx" }),
  );
  // A refused connection is a network failure.
  const port = srv.base.split(":").pop();
  await srv.close();
  await assert.rejects(
    t.cache.download(`http://127.0.0.1:${port}/model.onnx`, { sha256: ONNX_DIGEST }),
    downloadFailed("network"),
  );
});

Deno.test("redirects are followed by hand; more than MAX_REDIRECTS hops are refused", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  srv.routes.set("/model.onnx", { kind: "file", bytes: ONNX });
  srv.routes.set("/r0", { kind: "redirect", status: 302, location: "/r1" });
  srv.routes.set("/r1", { kind: "redirect", status: 307, location: `${srv.base}/model.onnx` });
  const meta = await t.cache.download(`${srv.base}/r0`, { sha256: ONNX_DIGEST });
  assert.equal(meta.digest, ONNX_DIGEST);
  assert.deepEqual(srv.requests.map((r) => r.path), ["/r0", "/r1", "/model.onnx"]);
  for (let i = 0; i <= MAX_REDIRECTS; i++) {
    srv.routes.set(`/loop${i}`, { kind: "redirect", status: 301, location: `/loop${i + 1}` });
  }
  await assert.rejects(
    t.cache.download(`${srv.base}/loop0`, { sha256: `sha256:${"1".repeat(64)}` }),
    downloadFailed("http_status", {
      http_status: 301,
      redirect_refused: true,
      refusal: "too_many_redirects",
    }),
  );
  assert.equal(srv.requests.filter((r) => r.path.startsWith("/loop")).length, MAX_REDIRECTS + 1);
});

Deno.test("a redirect from a public host to loopback, and an https→http downgrade, are refused", async () => {
  await using srv = new TestServer();
  srv.routes.set("/model.onnx", { kind: "file", bytes: ONNX });
  // Public hosts cannot be served here: their first hop is answered in-process, every later hop
  // goes to the real network stack.
  const hops: Record<string, string> = {
    "http://models.example.com/a": `${srv.base}/model.onnx`,
    "https://models.example.com/b": "http://cdn.example.com/b",
    "https://models.example.com/c": "https://cdn.example.com/c",
  };
  const fetchVia: typeof fetch = (input, init) => {
    const url = String(input instanceof Request ? input.url : input);
    if (url === "https://cdn.example.com/c") return Promise.resolve(new Response(ONNX));
    const to = hops[url];
    if (to !== undefined) {
      return Promise.resolve(new Response(null, { status: 302, headers: { location: to } }));
    }
    return fetch(input, init);
  };
  await using t = await tempCache({ fetch: fetchVia });
  await assert.rejects(
    t.cache.download("http://models.example.com/a", { sha256: ONNX_DIGEST }),
    downloadFailed("http_status", {
      http_status: 302,
      redirect_refused: true,
      refusal: "private_address",
    }),
  );
  await assert.rejects(
    t.cache.download("https://models.example.com/b", { sha256: ONNX_DIGEST }),
    downloadFailed("http_status", {
      refusal: "https_downgrade",
      location: "http://cdn.example.com/b",
    }),
  );
  assert.deepEqual(srv.requests, [], "the loopback server was never reached");
  // Cross-origin https (Hugging Face to its CDN) is followed.
  assert.equal(
    (await t.cache.download("https://models.example.com/c", { sha256: ONNX_DIGEST })).digest,
    ONNX_DIGEST,
  );
});

Deno.test("redirectRefusal() and isPrivateHost() implement the documented policy", () => {
  const u = (s: string) => new URL(s);
  assert.equal(
    redirectRefusal(u("https://huggingface.co/x"), u("https://cdn-lfs.hf.co/y"), 1),
    undefined,
  );
  assert.equal(redirectRefusal(u("http://127.0.0.1:1/x"), u("http://127.0.0.1:2/y"), 1), undefined);
  assert.equal(redirectRefusal(u("http://10.0.0.1/x"), u("https://example.com/y"), 1), undefined);
  assert.equal(redirectRefusal(u("http://a.com/x"), u("http://b.com/y"), 1), undefined);
  assert.equal(redirectRefusal(u("https://a.com/x"), u("http://a.com/y"), 1), "https_downgrade");
  assert.equal(redirectRefusal(u("https://a.com/x"), u("ftp://a.com/y"), 1), "unsupported_scheme");
  assert.equal(
    redirectRefusal(u("https://a.com/x"), u("https://a.com/y"), MAX_REDIRECTS + 1),
    "too_many_redirects",
  );
  for (
    const to of [
      "http://localhost/",
      "http://127.0.0.1/",
      "http://[::1]/",
      "http://10.1.2.3/",
      "http://192.168.0.1/",
      "http://172.20.0.1/",
      "http://169.254.169.254/",
      "http://[fd00::1]/",
      "http://[fe80::1]/",
      "http://[::ffff:127.0.0.1]/",
      "http://0.0.0.0/",
      "http://2130706433/",
    ]
  ) {
    assert.equal(redirectRefusal(u("http://a.com/x"), u(to), 1), "private_address", to);
  }
  for (const h of ["example.com", "8.8.8.8", "172.32.0.1", "[2001:db8::1]", "100.128.0.1"]) {
    assert.equal(isPrivateHost(h), false, h);
  }
});

Deno.test("a storage cap below the file fails download_failed {reason: storage_full}, removing the partial", async () => {
  await using srv = new TestServer();
  await using t = await tempCache({ storageCapBytes: ONNX.length - 1 });
  srv.routes.set("/model.onnx", { kind: "file", bytes: ONNX });
  srv.routes.set("/nolength.onnx", { kind: "file", bytes: ONNX, noLength: true });
  // Known length: refused before the body; unknown length: refused as the bytes pass the cap.
  for (const path of ["/model.onnx", "/nolength.onnx"]) {
    await assert.rejects(
      t.cache.download(`${srv.base}${path}`, { sha256: ONNX_DIGEST }),
      downloadFailed("storage_full"),
      path,
    );
    assert.deepEqual(filesIn(`${t.root}/blobs`), []);
    assert.deepEqual(tmpLeftovers(t.root), [], path);
  }
  // The same file under a cap that fits arrives whole, with no length from the server.
  await using roomy = await tempCache({ storageCapBytes: ONNX.length });
  const meta = await roomy.cache.download(`${srv.base}/nolength.onnx`, { sha256: ONNX_DIGEST });
  assert.equal(meta.size, ONNX.length);
});

Deno.test("two concurrent download() calls of one digest share one transfer and both get the meta", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  let open!: () => void;
  srv.routes.set("/model.onnx", {
    kind: "file",
    bytes: ONNX,
    gate: { at: 1024, open: new Promise((r) => (open = r)) },
  });
  const a: DownloadProgress[] = [];
  const b: DownloadProgress[] = [];
  const url = `${srv.base}/model.onnx`;
  const first = t.cache.download(url, { sha256: ONNX_DIGEST, onProgress: (p) => a.push(p) });
  const second = t.cache.download(url, { sha256: ONNX_DIGEST, onProgress: (p) => b.push(p) });
  open();
  const [ma, mb] = await Promise.all([first, second]);
  assert.deepEqual(ma, mb);
  assert.equal(srv.requests.length, 1);
  assert.deepEqual(filesIn(`${t.root}/blobs`), [HEX]);
  assert.equal(a.at(-1)?.bytes_done, ONNX.length);
  assert.equal(b.at(-1)?.bytes_done, ONNX.length);
});

Deno.test("a caller that aborts leaves; the shared transfer goes on for the other", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  let open!: () => void;
  srv.routes.set("/model.onnx", {
    kind: "file",
    bytes: ONNX,
    gate: { at: 1024, open: new Promise((r) => (open = r)) },
  });
  const url = `${srv.base}/model.onnx`;
  const ac = new AbortController();
  const quitter = t.cache.download(url, { sha256: ONNX_DIGEST, signal: ac.signal });
  const stayer = t.cache.download(url, { sha256: ONNX_DIGEST });
  const reason = new Error("changed my mind");
  ac.abort(reason);
  await assert.rejects(quitter, (e) => e === reason);
  open();
  assert.equal((await stayer).digest, ONNX_DIGEST);
  // Alone, an abort stops the transfer; the cancelled call leaves nothing in tmp/.
  let open2!: () => void;
  const gguf = await Deno.readFile(GGUF_PATH);
  srv.routes.set("/model.gguf", {
    kind: "file",
    bytes: gguf,
    gate: { at: 1024, open: new Promise((r) => (open2 = r)) },
  });
  const ac2 = new AbortController();
  const seen = Promise.withResolvers<void>();
  const lone = t.cache.download(`${srv.base}/model.gguf`, {
    sha256: digestOfBytes(gguf),
    signal: ac2.signal,
    onProgress: (p) => p.bytes_done > 0 && seen.resolve(),
  });
  await seen.promise;
  ac2.abort(reason);
  await assert.rejects(lone, (e) => e === reason);
  open2();
  assert.deepEqual(tmpLeftovers(t.root), []);
});

Deno.test("a downloaded blob that fails validation is artifact_invalid, kept as invalid", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  const corrupt = ONNX.slice();
  corrupt.set(new TextEncoder().encode("GARBAGE!"), 0);
  const digest = digestOfBytes(corrupt);
  srv.routes.set("/model.onnx", { kind: "file", bytes: corrupt });
  await assert.rejects(
    t.cache.download(`${srv.base}/model.onnx`, { sha256: digest, format: "onnx" }),
    artifactInvalid("not_onnx"),
  );
  assert.equal((await t.cache.meta(digest))?.validation_state, "invalid");
  // Asked again: the recorded failure, without a second transfer.
  await assert.rejects(
    t.cache.download(`${srv.base}/model.onnx`, { sha256: digest, format: "onnx" }),
    artifactInvalid("not_onnx"),
  );
  assert.equal(srv.requests.length, 1);
});

Deno.test("a blob whose meta is missing (a crash between the renames) gets a stand-in, repaired by the next download", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  srv.routes.set("/model.onnx", { kind: "file", bytes: ONNX });
  await t.cache.download(`${srv.base}/model.onnx`, { sha256: ONNX_DIGEST });
  await Deno.remove(`${t.root}/meta/${HEX}.json`);
  const standIn = await t.cache.meta(ONNX_DIGEST);
  assert.equal(standIn?.validation_state, "unvalidated");
  assert.equal(standIn?.size, ONNX.length);
  assert.deepEqual((await t.cache.list()).map((m) => m.digest), [ONNX_DIGEST]);
  const meta = await t.cache.download(`${srv.base}/model.onnx`, { sha256: ONNX_DIGEST });
  assert.equal(meta.validation_state, "valid");
  assert.equal(meta.format, "onnx");
  assert.equal(srv.requests.length, 1, "the blob was not fetched again");
  // A partial in tmp/ counts toward the bytes used.
  await Deno.writeFile(`${t.root}/tmp/${"c".repeat(64)}.partial`, new Uint8Array(10));
  assert.equal(await t.cache.usedBytes(), ONNX.length + 10);
});
