/**
 * Log hygiene through the real door and the real day file: control characters from callers
 * (a request_key, a model name, a method name in a path) never reach the file raw; every record
 * is exactly one line; a `request_key` with NUL is echoed whole in the answer; a URL is logged
 * readable with its secrets redacted.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../../lib/config/loader.ts";
import { serveHttp } from "../../lib/doors/http/server.ts";
import { parseLogLine } from "../../lib/log/line.ts";
import { redactText } from "../../lib/log/redact.ts";
import { createModuleLog, createSynapse } from "../../lib/synapse.ts";

const KEY = "key\n\r\u001b[31m\u0000tail\u2028end\u2029\u007f\u0085\t.";
const NASTY = "m\n\r\u001b[31m\u0000x\u2028y\u2029z\u007f\u0085\u0007";
// Any raw control: C0 (tab included), DEL, C1, U+2028/U+2029.
// deno-lint-ignore no-control-regex
const RAW_CONTROL = new RegExp("[\\x00-\\x09\\x0b-\\x1f\\x7f\\x80-\\x9f\\u2028\\u2029]");

Deno.test("control characters from callers never reach the day file raw; one line per record", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-hygiene-" });
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    CK_LOG: "info",
    SYNAPSE_CONFIG_JSON: JSON.stringify({ inline: { max_items: 2 } }),
  };
  const logsDir = `${dir}/logs`;
  const fleet = createModuleLog({ env, logsDir, stderr: false });
  const { config } = loadConfig({ env, cwd: dir });
  const syn = await createSynapse({ config, env, log: fleet.log });
  const server = serveHttp(syn);
  const base = `http://127.0.0.1:${server.port}`;
  const post = async (path: string, body: unknown) => {
    const res = await fetch(`${base}${path}`, { method: "POST", body: JSON.stringify(body) });
    return { status: res.status, body: await res.json() };
  };
  try {
    // A job under a key with every kind of control: the answer echoes the key whole (SQLite's
    // text read would stop at the NUL), at submit and when attached again.
    const job = await post("/v1/ops/embed.batch", { texts: ["a", "b", "c"], request_key: KEY });
    assert.equal(job.status, 200, JSON.stringify(job.body));
    assert.equal(job.body.result.request_key, KEY);
    const again = await post("/v1/ops/embed.batch", { texts: ["a", "b", "c"], request_key: KEY });
    assert.equal(again.body.result.attached, true);
    assert.equal(again.body.result.request_key, KEY);
    const page = await post("/v1/ops/embed.result", { job_id: job.body.result.job_id, page: 0 });
    if (page.body.result?.request_key !== undefined) {
      assert.equal(page.body.result.request_key, KEY);
    }
    // A model name and a method name with controls (both are logged in the request line).
    const model = await post("/v1/ops/embed.query", { text: "x", model: NASTY });
    assert.notEqual(model.status, 200);
    const method = await fetch(`${base}/v1/ops/${encodeURIComponent(NASTY)}`, {
      method: "POST",
      body: "{}",
    });
    assert.equal(method.status, 404);
    await method.body?.cancel();
    // A message and a field with controls and a URL with secrets, through the module's own log.
    fleet.log("info", "synapse.models", `fetching ${NASTY}`, {
      url: "https://user:secret@host/path?token=abc&x=1",
      note: NASTY,
    });
  } finally {
    await server.shutdown();
    await syn.dispose();
    fleet.dispose();
  }
  try {
    const files = [...Deno.readDirSync(logsDir)].map((e) => e.name);
    assert.equal(files.length, 1, files.join(","));
    const text = await Deno.readTextFile(`${logsDir}/${files[0]}`);
    assert.ok(text.endsWith("\n"));
    const lines = text.slice(0, -1).split("\n");
    for (const line of lines) {
      assert.ok(!RAW_CONTROL.test(line), `raw control in ${JSON.stringify(line)}`);
      parseLogLine(line);
    }
    // Exactly one line per record: five requests, one model line.
    const requests = lines.filter((l) => / synapse\.http: request /.test(l));
    assert.equal(requests.length, 5, requests.join("\n"));
    const fetching = lines.filter((l) => l.includes("synapse.models: fetching"));
    assert.equal(fetching.length, 1);
    // Escaped, not lost: the reader gets the caller's characters back (ANSI sequences and C1
    // controls are stripped, as the fleet format says).
    const parsed = parseLogLine(fetching[0]!);
    const expected = NASTY.replace("\u001b[31m", "").replace("\u0085", "");
    assert.equal(parsed.message, `fetching ${expected}`);
    assert.deepEqual(parsed.fields.find(([k]) => k === "note")?.[1], expected);
    assert.match(fetching[0]!, /\\u0000x\\u2028y\\u2029z\\u007f\\u0007/);
    // The URL is readable: host and path kept, user info and the token redacted.
    assert.equal(
      parsed.fields.find(([k]) => k === "url")?.[1],
      "https://[REDACTED]@host/path?token=[REDACTED]&x=1",
    );
    const modelLine = requests.find((l) => l.includes("path=/v1/ops/embed.query"))!;
    const modelField = parseLogLine(modelLine).fields.find(([k]) => k === "model")?.[1];
    assert.equal(modelField, expected);
    // The key itself is never logged.
    assert.ok(!text.includes("tail"), "the request_key reached the log");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("redactText() keeps URLs readable: host and path as written, secrets in user info and query gone", () => {
  assert.equal(
    redactText("GET https://user:secret@host/path?token=abc&x=1 done"),
    "GET https://[REDACTED]@host/path?token=[REDACTED]&x=1 done",
  );
  // A long model name and a 64-hex blob digest in a path are not secrets.
  const hf =
    "https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF/resolve/main/Qwen2.5-0.5B-Instruct-Q4_K_M.gguf";
  assert.equal(redactText(hf), hf);
  const blob = `https://cdn-lfs.hf.co/repos/ab/cd/${"0123456789abcdef".repeat(4)}`;
  assert.equal(
    redactText(`${blob}?X-Amz-Signature=deadbeef&X-Amz-Credential=AK%2F1&n=2`),
    `${blob}?X-Amz-Signature=[REDACTED]&X-Amz-Credential=[REDACTED]&n=2`,
  );
  // A fragment's token, a vendor token in a path, and a bare hex secret outside a URL still go.
  assert.equal(
    redactText("https://x/cb#access_token=zzz&state=1"),
    "https://x/cb#access_token=[REDACTED]&state=1",
  );
  assert.equal(
    redactText("https://api.example/sk-abcdefghijklmnopqrstuv/x"),
    "https://api.example/[REDACTED]/x",
  );
  assert.equal(redactText(`nonce ${"ab".repeat(32)}`), "nonce [REDACTED]");
});
