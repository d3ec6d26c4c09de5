/**
 * `deno task subc-peer`: the in-test subc daemon, standalone, for poking a running module by hand.
 *
 * It publishes a connection file, prints its path and an `export SUBC_CONNECTION_FILE=…` line (and
 * the command that starts Synapse under it), logs every frame it reads or writes to stderr, and
 * reads simple commands from stdin (`help` lists them) through a client connection of its own.
 *
 * ```sh
 * deno task subc-peer                       # then, in another shell, the printed serve command
 * deno task subc-peer --data-home /tmp/dh --bind-epoch equal
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { describeFrame, FrameType } from "../../../lib/subc/bus_envelope.ts";
import type { SubcFrame } from "../../../lib/subc/bus_envelope.ts";
import { connectEndpoint, EndpointError } from "./endpoint.ts";
import type { Endpoint } from "./endpoint.ts";
import { startPeer } from "./peer.ts";
import type { BindEpochMode, Peer, PeerFrameEvent } from "./peer.ts";

const USAGE = `Usage: deno task subc-peer [options]

Runs the in-test subc daemon on 127.0.0.1 until 'quit', end of input or Ctrl-C.

Options:
  --data-home DIR        data home (connection file under DIR/cortexkit/run; storage descriptor
                         DIR/cortexkit/<id>/store.db); default: a temporary directory, removed on exit
  --module ID            a module id the daemon expects (repeatable; default synapse)
  --no-storage           HELLO_ACK without a storage descriptor
  --negotiated-ver N     HELLO_ACK negotiated_ver (default 2; 1 is a fault the module must refuse)
  --bind-epoch MODE      fresh (default), equal or lower: route.bind epochs for the fault tests
  --bind-timeout-ms MS   how long to wait for a route.bind ack (default 12000)
  --quiet                do not log frames
  -h, --help             this help
`;

const COMMANDS = `Commands:
  open [MODULE]             open a route to MODULE (default synapse) from the peer's own client
  call METHOD [PARAMS]      send {"method", "params"} on the open route (opens one first if needed);
                            PARAMS is JSON, default {}; the reply is printed when it arrives
  cancel CORR               send Cancel for CORR on the open route
  close                     close the open route (route Goodbye)
  health [MODULE]           health.check the module (5 s deadline)
  ping [MODULE]             Ping the module on channel 0
  goodbye [MODULE]          route Goodbyes, then channel-0 Goodbye to the module (a reload)
  raw HEX [MODULE]          write bytes verbatim to the module's socket
  status                    modules, routes and counters
  kill                      close every socket at once (a daemon crash), then exit
  quit                      shut down and exit
`;

/** Longest body preview in a frame log line, in characters. */
const PREVIEW_CHARS = 240;

function preview(body: Uint8Array): string {
  if (body.byteLength === 0) return "";
  try {
    const text = new TextDecoder("utf-8", { fatal: true }).decode(body);
    if ([...text].some((c) => c < " " && c !== "\t" && c !== "\n" && c !== "\r")) {
      return ` <${body.byteLength} bytes>`;
    }
    return " " + (text.length > PREVIEW_CHARS ? `${text.slice(0, PREVIEW_CHARS)}…` : text);
  } catch {
    return ` <${body.byteLength} bytes, not UTF-8>`;
  }
}

function frameLine(e: PeerFrameEvent): string {
  const who = e.kind === "module" ? `module ${e.moduleId}` : e.kind;
  const arrow = e.direction === "in" ? "->" : "<-";
  return `[frame] #${e.connId} ${who} ${arrow} ${describeFrame(e.frame)}${preview(e.frame.body)}`;
}

function jsonText(value: unknown): string {
  return JSON.stringify(
    value,
    (_, v) => typeof v === "bigint" ? Number(v) : v instanceof Map ? Object.fromEntries(v) : v,
    2,
  );
}

/** Splits a text stream into lines. */
function lines(): TransformStream<string, string> {
  let rest = "";
  return new TransformStream<string, string>({
    transform(chunk, controller) {
      rest += chunk;
      let at: number;
      while ((at = rest.indexOf("\n")) >= 0) {
        controller.enqueue(rest.slice(0, at).replace(/\r$/, ""));
        rest = rest.slice(at + 1);
      }
    },
    flush(controller) {
      if (rest !== "") controller.enqueue(rest);
    },
  });
}

/** The interactive session: one peer, one client of its own, one open route at a time. */
class Session {
  readonly #peer: Peer;
  #client: Endpoint | undefined;
  #route: { channel: number; epoch: number } | undefined;

  constructor(peer: Peer) {
    this.#peer = peer;
  }

  async run(line: string): Promise<"quit" | "kill" | undefined> {
    const [cmd, ...args] = line.trim().split(/\s+/);
    const out = (text: string): undefined => void console.log(text);
    switch (cmd) {
      case undefined:
      case "":
        return;
      case "help":
        out(COMMANDS);
        return;
      case "open":
        await this.#open(args[0] ?? "synapse");
        return;
      case "call": {
        if (args[0] === undefined) return out("call: METHOD is required");
        const paramsText = line.trim().replace(/^call\s+\S+\s*/, "");
        let params: unknown = {};
        if (paramsText !== "") {
          try {
            params = JSON.parse(paramsText);
          } catch (err) {
            return out(`call: PARAMS is not JSON: ${(err as Error).message}`);
          }
        }
        if (this.#route === undefined) await this.#open("synapse");
        if (this.#route === undefined) return;
        const client = this.#client!;
        const corr = client.corr();
        await client.send({
          type: FrameType.Request,
          channel: this.#route.channel,
          epoch: this.#route.epoch,
          corr,
          flags: 0x02,
          body: new TextEncoder().encode(JSON.stringify({ method: args[0], params })),
        });
        out(`sent corr ${corr}`);
        return;
      }
      case "cancel": {
        if (this.#route === undefined) return out("cancel: no open route");
        let corr: bigint;
        try {
          corr = BigInt(args[0] ?? "");
        } catch {
          return out("cancel: CORR must be a number");
        }
        await this.#client!.send({ type: FrameType.Cancel, ...this.#route, corr });
        out(`cancel sent for corr ${corr}`);
        return;
      }
      case "close":
        if (this.#route === undefined) return out("close: no open route");
        await this.#client!.send({ type: FrameType.Goodbye, ...this.#route });
        out(`route ${this.#route.channel}/${this.#route.epoch} closed`);
        this.#route = undefined;
        return;
      case "health":
        out(jsonText(await this.#peer.healthCheck({ moduleId: args[0] ?? "synapse" })));
        return;
      case "ping": {
        const pong = await this.#peer.pingModule({
          moduleId: args[0] ?? "synapse",
          timeoutMs: 5_000,
        });
        out(`pong: ${describeFrame(pong)}`);
        return;
      }
      case "goodbye":
        await this.#peer.goodbyeModule({ moduleId: args[0] ?? "synapse" });
        this.#route = undefined;
        out("goodbye sent");
        return;
      case "raw": {
        const bytes = Uint8Array.fromHex((args[0] ?? "").replace(/\s+/g, ""));
        const sent = await this.#peer.rawToModule(bytes, { moduleId: args[1] ?? "synapse" });
        out(sent ? `wrote ${bytes.byteLength} bytes` : "the module connection is closed");
        return;
      }
      case "status":
        out(jsonText({
          modules: this.#peer.modules().map((m) => ({
            module_id: m.moduleId,
            state: m.state,
            window: m.window,
            ready: m.ready,
            open_routes: m.openRoutes,
            operations: m.manifest.provides.flatMap((r) =>
              r.role === "management_surface" ? r.operations.map((o) => o.name) : []
            ),
          })),
          routes: this.#peer.routes(),
          stats: this.#peer.stats(),
        }));
        return;
      case "kill":
        return "kill";
      case "quit":
      case "exit":
        return "quit";
      default:
        out(`unknown command '${cmd}'; type 'help'`);
    }
  }

  async close(): Promise<void> {
    if (this.#client !== undefined) await this.#client[Symbol.asyncDispose]();
  }

  async #open(moduleId: string): Promise<void> {
    this.#client ??= await connectEndpoint(this.#peer, {
      onFrame: (direction, frame) => {
        if (direction === "in" && frame.channel !== 0) printReply(frame);
      },
    });
    try {
      this.#route = await this.#client.openRoute({
        moduleId,
        // As subc_call does: the working directory, and a session per process.
        identity: {
          project_root: Deno.cwd(),
          harness: "subc-peer",
          session: `subc-peer-${Deno.pid}`,
        },
      });
      console.log(`route open: channel ${this.#route.channel} epoch ${this.#route.epoch}`);
    } catch (err) {
      if (!(err instanceof EndpointError)) throw err;
      console.log(`route.open refused: ${err.body.code}: ${err.body.message}`);
    }
  }
}

function printReply(frame: SubcFrame): void {
  const name = frame.type === FrameType.Response
    ? "response"
    : frame.type === FrameType.Error
    ? "error"
    : frame.type === FrameType.StreamData
    ? "stream data"
    : frame.type === FrameType.StreamEnd
    ? "stream end"
    : describeFrame(frame);
  let body = "";
  if (frame.body.byteLength > 0) {
    try {
      body = " " + jsonText(JSON.parse(new TextDecoder().decode(frame.body)));
    } catch {
      body = preview(frame.body);
    }
  }
  console.log(`corr ${frame.corr} ${name}:${body}`);
}

async function main(args: string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args,
      strict: true,
      allowPositionals: false,
      options: {
        "data-home": { type: "string" },
        module: { type: "string", multiple: true },
        "no-storage": { type: "boolean" },
        "negotiated-ver": { type: "string" },
        "bind-epoch": { type: "string" },
        "bind-timeout-ms": { type: "string" },
        quiet: { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (err) {
    console.error(`subc-peer: ${(err as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    console.log(USAGE + "\n" + COMMANDS);
    return 0;
  }
  const mode = values["bind-epoch"] ?? "fresh";
  if (!["fresh", "equal", "lower"].includes(mode)) {
    console.error(`subc-peer: --bind-epoch must be fresh, equal or lower: received ${mode}`);
    return 2;
  }
  const number = (name: string, text: string | undefined): number | undefined => {
    if (text === undefined) return undefined;
    const n = Number(text);
    if (!Number.isInteger(n)) {
      throw new RangeError(`--${name} must be an integer: received ${text}`);
    }
    return n;
  };
  let peer: Peer;
  try {
    const negotiatedVer = number("negotiated-ver", values["negotiated-ver"]);
    const bindTimeoutMs = number("bind-timeout-ms", values["bind-timeout-ms"]);
    peer = await startPeer({
      ...(values["data-home"] === undefined ? {} : { dataHome: values["data-home"] }),
      ...(values.module === undefined ? {} : { modules: values.module }),
      ...(values["no-storage"] ? { storage: false } : {}),
      ...(negotiatedVer === undefined ? {} : { negotiatedVer }),
      ...(bindTimeoutMs === undefined ? {} : { bindTimeoutMs }),
      bindEpochMode: mode as BindEpochMode,
      ...(values.quiet ? {} : { onFrame: (e: PeerFrameEvent) => console.error(frameLine(e)) }),
      onLog: (line) => console.error(`[peer] ${line}`),
    });
  } catch (err) {
    console.error(`subc-peer: ${(err as Error).message}`);
    return 1;
  }
  const env = peer.launchEnv(values.module?.[0] ?? "synapse");
  console.log(`connection file: ${peer.connectionFile}`);
  console.log(`export SUBC_CONNECTION_FILE=${peer.connectionFile}`);
  console.log(
    `start a module: ${
      Object.entries(env).map(([k, v]) => `${k}=${v}`).join(" ")
    } ./ck-synapse serve --subc ${peer.connectionFile}`,
  );
  console.log("frames are logged on stderr: '->' read by the peer, '<-' written by it");
  console.log("type 'help' for commands");

  const session = new Session(peer);
  let ending: "quit" | "kill" | undefined;
  const stop = (): void => {
    ending = "quit";
    void finish().then((code) => Deno.exit(code));
  };
  const finish = async (): Promise<number> => {
    if (ending === "kill") peer.kill();
    await session.close();
    await peer.close();
    console.log("subc-peer: stopped");
    return 0;
  };
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
  const input = Deno.stdin.readable.pipeThrough(new TextDecoderStream()).pipeThrough(lines());
  for await (const line of input) {
    try {
      ending = await session.run(line);
    } catch (err) {
      console.log(`${line.trim().split(/\s+/)[0]}: ${(err as Error).message}`);
    }
    if (ending !== undefined) break;
  }
  Deno.removeSignalListener("SIGINT", stop);
  Deno.removeSignalListener("SIGTERM", stop);
  return await finish();
}

if (import.meta.main) Deno.exit(await main(Deno.args));
