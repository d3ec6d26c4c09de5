/**
 * `deno task subc-peer` as a developer runs it: a real process, driven through stdin, with a
 * scripted module on the other side of its connection file.
 */
import assert from "node:assert/strict";
import { encodeControlBody } from "../../lib/subc/control.ts";
import { FrameType, pongFor } from "../../lib/subc/bus_envelope.ts";
import type { SubcFrame } from "../../lib/subc/bus_envelope.ts";
import { ROOT } from "../_helpers.ts";
import { connectEndpoint, jsonBody, testManifest } from "./_peer.ts";

/** Collects a stream's lines and lets a test wait for one (a hang guard, not a speed limit). */
class Lines {
  readonly all: string[] = [];
  readonly done: Promise<void>;
  #waiters: { test: (l: string) => boolean; resolve: (l: string) => void }[] = [];

  constructor(stream: ReadableStream<Uint8Array>) {
    this.done = (async () => {
      let rest = "";
      for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
        rest += chunk;
        let at: number;
        while ((at = rest.indexOf("\n")) >= 0) {
          this.#push(rest.slice(0, at));
          rest = rest.slice(at + 1);
        }
      }
      if (rest !== "") this.#push(rest);
    })();
  }

  wait(test: (l: string) => boolean, what: string): Promise<string> {
    const seen = this.all.find(test);
    if (seen !== undefined) return Promise.resolve(seen);
    return new Promise<string>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no line ${what}: ${this.all.join("\n")}`)),
        60_000,
      );
      this.#waiters.push({ test, resolve: (l) => (clearTimeout(timer), resolve(l)) });
      void this.done.then(() => {
        clearTimeout(timer);
        reject(new Error(`output ended before ${what}: ${this.all.join("\n")}`));
      });
    });
  }

  #push(line: string): void {
    this.all.push(line);
    this.#waiters = this.#waiters.filter((w) => {
      if (!w.test(line)) return true;
      w.resolve(line);
      return false;
    });
  }
}

Deno.test("deno task subc-peer: prints the connection file, serves a module, and takes open, call, cancel, health, ping, goodbye and quit on stdin", async () => {
  const dataHome = await Deno.makeTempDir({ prefix: "subc-peer-cli-" });
  const child = new Deno.Command(`${ROOT}/node_modules/.bin/deno`, {
    args: ["task", "-q", "subc-peer", "--data-home", dataHome],
    cwd: ROOT,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
  }).spawn();
  const stdout = new Lines(child.stdout);
  const stderr = new Lines(child.stderr);
  const stdin = child.stdin.getWriter();
  const say = (line: string) => stdin.write(new TextEncoder().encode(line + "\n"));
  try {
    const file = `${dataHome}/cortexkit/run/subc-connection.json`;
    await stdout.wait((l) => l === `export SUBC_CONNECTION_FILE=${file}`, "export");
    assert.ok(stdout.all.includes(`connection file: ${file}`));
    await using module = await connectEndpoint(file);
    const { frame } = await module.hello(testManifest());
    assert.equal(frame.type, FrameType.HelloAck);

    await say("open");
    const bind = await module.next((f) => f.type === FrameType.Request && f.channel === 0);
    await module.send({
      type: FrameType.Response,
      corr: bind.corr,
      body: encodeControlBody({ op: "route.bind" }),
    });
    await stdout.wait((l) => l === "route open: channel 1 epoch 1", "route open");
    assert.equal(
      (jsonBody(bind) as { identity: { harness: string } }).identity.harness,
      "subc-peer",
    );

    const isData = (f: SubcFrame) => f.channel !== 0 && f.type === FrameType.Request;
    await say(`call echo {"x": 1}`);
    const req = await module.next(isData);
    assert.deepEqual(jsonBody(req), { method: "echo", params: { x: 1 } });
    await module.send({
      ...req,
      type: FrameType.Response,
      body: encodeControlBody({ result: { x: 1 } }),
    });
    await stdout.wait((l) => l.startsWith(`corr ${req.corr} response:`), "the response");

    await say("call slow");
    const slow = await module.next(isData);
    await say(`cancel ${slow.corr}`);
    const cancel = await module.next((f) => f.type === FrameType.Cancel);
    assert.equal(cancel.corr, slow.corr);
    await module.send({
      ...slow,
      type: FrameType.Error,
      body: encodeControlBody({ code: "cancelled", message: "cancelled" }),
    });
    await stdout.wait((l) => l.startsWith(`corr ${slow.corr} error:`), "the cancelled error");

    await say("health");
    const probe = await module.next((f) => f.type === FrameType.Request && f.channel === 0);
    await module.send({
      type: FrameType.Response,
      corr: probe.corr,
      body: encodeControlBody({ op: "health.check", status: "ok" }),
    });
    await stdout.wait((l) => l.includes(`"status": "ok"`), "the health body");

    await say("ping");
    await module.send(pongFor(await module.next((f) => f.type === FrameType.Ping)));
    await stdout.wait((l) => l.startsWith("pong: Pong ch=0"), "the pong");

    await say("goodbye");
    const byes = [
      await module.next((f) => f.type === FrameType.Goodbye),
      await module.next((f) => f.type === FrameType.Goodbye),
    ];
    assert.deepEqual(byes.map((f) => f.channel), [1, 0]);

    await say("quit");
    await stdin.close();
    assert.equal((await child.status).code, 0);
    await Promise.all([stdout.done, stderr.done]);
    assert.ok(stdout.all.includes("subc-peer: stopped"));
    // Every frame was logged on stderr, described as bus_envelope.ts describes frames.
    assert.ok(
      stderr.all.some((l) => l.startsWith("[frame] #1 pending -> Hello ch=0 ep=0 corr=1 ")) &&
        stderr.all.some((l) =>
          l.startsWith("[frame] #1 module synapse <- HelloAck ch=0 ep=0 corr=1 ")
        ),
      stderr.all.join("\n"),
    );
    assert.ok(stderr.all.some((l) => /^\[frame\] #2 client -> Request ch=1 ep=1 corr=2 /.test(l)));
    await assert.rejects(Deno.stat(file), Deno.errors.NotFound);
  } finally {
    try {
      child.kill();
    } catch { /* exited */ }
    await child.status;
    await Promise.allSettled([stdout.done, stderr.done]);
    await Deno.remove(dataHome, { recursive: true });
  }
});
