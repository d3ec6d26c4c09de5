import assert from "node:assert/strict";
import {
  DEFAULT_MODULE_ID,
  parseLaunchNonceFd,
  readLaunchNonce,
  subcModuleId,
} from "../../lib/subc/launch.ts";
import type { DescriptorOps } from "../../lib/subc/launch.ts";
import { SubcWireError } from "../../lib/subc/errors.ts";
import type { SubcWireReason } from "../../lib/subc/errors.ts";
import { ROOT } from "../_helpers.ts";

const NONCE = "0123456789abcdef".repeat(4);
const OTHER = "fedcba9876543210".repeat(4);

function refused(
  reason: SubcWireReason,
  details: Record<string, unknown> = {},
): (e: unknown) => boolean {
  return (e: unknown) => {
    assert.ok(e instanceof SubcWireError, `expected SubcWireError, got ${e}`);
    assert.equal(e.reason, reason, e.message);
    for (const [k, v] of Object.entries(details)) assert.deepEqual(e.details?.[k], v, k);
    return true;
  };
}

/** Fake descriptor calls over one pipe (fd 3, inode 77) holding `content`, in `chunk`-byte reads. */
function fakePipe(
  content: Uint8Array,
  options: { chunk?: number; fifo?: boolean; failAt?: number } = {},
) {
  const calls: string[] = [];
  let at = 0;
  let reads = 0;
  const ops: DescriptorOps = {
    fstat(fd) {
      calls.push(`fstat ${fd}`);
      return fd === 3
        ? { open: true, isFifo: options.fifo ?? true, ino: 77n }
        : { open: false, errno: 9 };
    },
    read(fd, buf) {
      calls.push(`read ${fd}`);
      if (reads++ === options.failAt) return { errno: 5 };
      const n = Math.min(buf.byteLength, options.chunk ?? buf.byteLength, content.byteLength - at);
      buf.set(content.subarray(at, at + n));
      at += n;
      return n;
    },
    close(fd) {
      calls.push(`close ${fd}`);
    },
  };
  return { ops, calls };
}

const utf8 = new TextEncoder();
const linux = { os: "linux" as const };

Deno.test("readLaunchNonce() takes SUBC_LAUNCH_NONCE of 64 lowercase hex; empty or absent means none", () => {
  const n = readLaunchNonce({ ...linux, env: { SUBC_LAUNCH_NONCE: NONCE } });
  assert.equal(n?.value, NONCE);
  assert.equal(n?.source, "env");
  assert.equal(readLaunchNonce({ ...linux, env: {} }), undefined);
  assert.equal(
    readLaunchNonce({ ...linux, env: { SUBC_LAUNCH_NONCE: "", SUBC_LAUNCH_NONCE_FD: "" } }),
    undefined,
  );
  for (
    const bad of [
      NONCE.toUpperCase(),
      NONCE.slice(1),
      NONCE + "0",
      ` ${NONCE.slice(1)}`,
      `${NONCE}\n`,
    ]
  ) {
    assert.throws(
      () => readLaunchNonce({ ...linux, env: { SUBC_LAUNCH_NONCE: bad } }),
      refused("launch_nonce_malformed", { source: "env" }),
      JSON.stringify(bad),
    );
  }
});

Deno.test("a launch nonce never shows its value in JSON or the inspector", () => {
  const n = readLaunchNonce({ ...linux, env: { SUBC_LAUNCH_NONCE: NONCE } })!;
  assert.equal(JSON.stringify({ n }), '{"n":{"source":"env"}}');
  assert.doesNotMatch(Deno.inspect(n), /0123/);
  assert.doesNotMatch(Deno.inspect({ nested: [n] }), /0123/);
});

Deno.test("the descriptor hand-off reads the named pipe to its end, closes it, and wins over the env copy", () => {
  const { ops, calls } = fakePipe(utf8.encode(NONCE), { chunk: 5 });
  const n = readLaunchNonce({
    ...linux,
    env: { SUBC_LAUNCH_NONCE_FD: "3:77", SUBC_LAUNCH_NONCE: OTHER },
    descriptors: ops,
  });
  assert.equal(n?.value, NONCE);
  assert.equal(n?.source, "fd");
  assert.equal(calls[0], "fstat 3");
  assert.equal(calls.filter((c) => c === "read 3").length, Math.ceil(64 / 5) + 1);
  assert.equal(calls.at(-1), "close 3");
});

Deno.test("a named descriptor that fails never falls back to the env copy", () => {
  const env = (fdVar: string) => ({ SUBC_LAUNCH_NONCE_FD: fdVar, SUBC_LAUNCH_NONCE: NONCE });
  const nonce = utf8.encode(NONCE);
  const cases: [
    string,
    { fifo?: boolean; failAt?: number },
    Uint8Array,
    SubcWireReason,
    string[],
  ][] = [
    ["4:77", {}, nonce, "launch_fd_not_open", ["fstat 4"]],
    ["3:78", {}, nonce, "launch_fd_wrong_pipe", ["fstat 3"]],
    ["3:77", { fifo: false }, nonce, "launch_fd_not_a_pipe", ["fstat 3"]],
    ["3:77", {}, new Uint8Array(0), "launch_fd_empty", ["fstat 3", "read 3"]],
    ["3:77", { failAt: 0 }, nonce, "launch_fd_unreadable", ["fstat 3", "read 3"]],
    ["3:77", { failAt: 1 }, nonce, "launch_fd_unreadable", [
      "fstat 3",
      "read 3",
      "read 3",
      "close 3",
    ]],
    ["3:77", {}, utf8.encode("xyz"), "launch_nonce_malformed", [
      "fstat 3",
      "read 3",
      "read 3",
      "close 3",
    ]],
    ["3:77", {}, Uint8Array.of(0xff, 0xfe), "launch_nonce_malformed", [
      "fstat 3",
      "read 3",
      "read 3",
      "close 3",
    ]],
    ["3:77", {}, new Uint8Array(5000), "launch_fd_unreadable", ["fstat 3", "read 3", "close 3"]],
    ["three:77", {}, nonce, "launch_fd_malformed", []],
  ];
  for (const [fdVar, opt, content, reason, expectCalls] of cases) {
    const { ops, calls } = fakePipe(content, opt);
    assert.throws(
      () => readLaunchNonce({ ...linux, env: env(fdVar), descriptors: ops }),
      refused(reason),
      `${fdVar} ${reason}`,
    );
    assert.deepEqual(calls, expectCalls, reason);
  }
});

Deno.test("parseLaunchNonceFd() reads <fd>:<inode> as the reference does", () => {
  assert.deepEqual(parseLaunchNonceFd("3:12345"), { fd: 3, inode: 12345n });
  assert.deepEqual(parseLaunchNonceFd("+3:+18446744073709551615"), {
    fd: 3,
    inode: (1n << 64n) - 1n,
  });
  assert.deepEqual(parseLaunchNonceFd("-0:0"), { fd: 0, inode: 0n });
  for (
    const bad of [
      "3",
      ":1",
      "3:",
      "-1:1",
      "2147483648:1",
      "3:18446744073709551616",
      "3:-1",
      "3:1:2",
      "x:1",
      " 3:1",
    ]
  ) {
    assert.throws(
      () => parseLaunchNonceFd(bad),
      refused("launch_fd_malformed", { value: bad }),
      bad,
    );
  }
});

Deno.test("on Windows the named pipe is refused loudly unless the daemon allows the env copy", () => {
  const win = { os: "windows" as const };
  assert.throws(
    () =>
      readLaunchNonce({
        ...win,
        env: { SUBC_LAUNCH_NONCE_PIPE: "\\\\.\\pipe\\x", SUBC_LAUNCH_NONCE: NONCE },
      }),
    refused("launch_fd_unsupported"),
  );
  const allowed = readLaunchNonce({
    ...win,
    env: {
      SUBC_LAUNCH_NONCE_PIPE: "p",
      SUBC_LAUNCH_NONCE_PIPE_FALLBACK: "env",
      SUBC_LAUNCH_NONCE: NONCE,
    },
  });
  assert.equal(allowed?.source, "env");
  // SUBC_LAUNCH_NONCE_FD means nothing on Windows.
  assert.equal(
    readLaunchNonce({ ...win, env: { SUBC_LAUNCH_NONCE_FD: "3:1", SUBC_LAUNCH_NONCE: NONCE } })
      ?.source,
    "env",
  );
});

Deno.test("subcModuleId() is SUBC_MODULE_ID, else synapse", () => {
  assert.equal(subcModuleId({}), DEFAULT_MODULE_ID);
  assert.equal(DEFAULT_MODULE_ID, "synapse");
  assert.equal(subcModuleId({ SUBC_MODULE_ID: "" }), "synapse");
  assert.equal(subcModuleId({ SUBC_MODULE_ID: "synapse-blue" }), "synapse-blue");
});

interface ChildResult {
  first: unknown;
  second: unknown;
  again: unknown;
}

/**
 * Runs tests/subc/_launch_child.ts as a launched module would be: fd 3 set up by a shell (a FIFO
 * fed by a writer, a regular file, or nothing), SUBC_LAUNCH_NONCE_FD naming it.
 */
async function launchChild(
  setup: {
    mode: "fifo" | "file" | "closed";
    content?: string;
    inode?: "same" | "other";
    fdVar?: string;
  },
  env: Record<string, string> = {},
): Promise<ChildResult> {
  const dir = await Deno.makeTempDir({ prefix: "subc-launch-" });
  try {
    const script = `
      set -eu
      case "$MODE" in
        fifo) mkfifo "$WORK/p"; (printf '%s' "$CONTENT" > "$WORK/p" &); exec 3< "$WORK/p"; f="$WORK/p" ;;
        file) printf '%s' "$CONTENT" > "$WORK/f"; exec 3< "$WORK/f"; f="$WORK/f" ;;
        closed) exec 3<&-; f="$WORK" ;;
      esac
      ino=$(stat -c %i "$f" 2>/dev/null || stat -f %i "$f")
      if [ "$INODE" = other ]; then ino=$((ino + 1)); fi
      export SUBC_LAUNCH_NONCE_FD="\${FDVAR-3:$ino}"
      exec "$DENO" run --no-check --allow-env --allow-ffi --allow-read tests/subc/_launch_child.ts
    `;
    const out = await new Deno.Command("bash", {
      args: ["-c", script],
      cwd: ROOT,
      env: {
        WORK: dir,
        MODE: setup.mode,
        CONTENT: setup.content ?? "",
        INODE: setup.inode ?? "same",
        DENO: Deno.execPath(),
        ...(setup.fdVar === undefined ? {} : { FDVAR: setup.fdVar }),
        ...env,
      },
      clearEnv: false,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stdout = new TextDecoder().decode(out.stdout);
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    return JSON.parse(stdout.trim().split("\n").at(-1)!);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const reasonOf = (r: unknown): unknown => (r as { reason?: string } | null)?.reason;

Deno.test("a real FIFO at fd 3 is read once, closed, cached, and preferred to the env copy", async () => {
  const r = await launchChild({ mode: "fifo", content: NONCE }, { SUBC_LAUNCH_NONCE: OTHER });
  assert.deepEqual(r.first, { value: NONCE, source: "fd", json: '{"source":"fd"}' });
  assert.deepEqual(r.second, r.first);
  // The first read closed fd 3: an uncached read now finds nothing open there.
  assert.equal(reasonOf(r.again), "launch_fd_not_open");
});

Deno.test("real descriptors that are not the named pipe are refused, never falling back to the env copy", async () => {
  const env = { SUBC_LAUNCH_NONCE: OTHER };
  const wrong = await launchChild({ mode: "fifo", content: NONCE, inode: "other" }, env);
  assert.equal(reasonOf(wrong.first), "launch_fd_wrong_pipe");
  assert.deepEqual(wrong.second, wrong.first);
  assert.equal(reasonOf(wrong.again), "launch_fd_wrong_pipe"); // left untouched
  const file = await launchChild({ mode: "file", content: NONCE }, env);
  assert.equal(reasonOf(file.first), "launch_fd_not_a_pipe");
  const closed = await launchChild({ mode: "closed" }, env);
  // With fd 3 closed before exec, Deno may put one of its own descriptors there (an epoll or
  // event fd): not the named pipe either way, and left alone.
  assert.ok(
    ["launch_fd_not_open", "launch_fd_not_a_pipe"].includes(reasonOf(closed.first) as string),
  );
  const empty = await launchChild({ mode: "fifo", content: "" }, env);
  assert.equal(reasonOf(empty.first), "launch_fd_empty");
  assert.equal(reasonOf(empty.again), "launch_fd_empty"); // left open, nothing consumed
  const garbage = await launchChild({ mode: "fifo", content: "not-a-nonce" }, env);
  assert.equal(reasonOf(garbage.first), "launch_nonce_malformed");
  const malformed = await launchChild({ mode: "closed", fdVar: "3" }, env);
  assert.equal(reasonOf(malformed.first), "launch_fd_malformed");
});

Deno.test("with SUBC_LAUNCH_NONCE_FD empty, a launched module takes the env copy", async () => {
  const r = await launchChild({ mode: "closed", fdVar: "" }, { SUBC_LAUNCH_NONCE: NONCE });
  assert.deepEqual(r.first, { value: NONCE, source: "env", json: '{"source":"env"}' });
});
