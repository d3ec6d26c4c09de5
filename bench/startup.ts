/**
 * How long `ck-synapse` takes to start: wall time of whole launcher runs (bash, the setup check,
 * Deno, the CLI) for commands that load no engine, against Deno alone.
 *
 *   deno task bench:startup [--quick] [--runs N]
 *
 * Prints min / median / p90 in ms per command. The goal for `version` and `--help` is a median
 * of at most 150 ms on the development machine (2 cores): they import no engine, store or HTTP
 * code (lib/cli/main.ts; commands load those when they run). `embed` (an embedded instance that
 * loads the test models) is printed for scale. Every run gets a temp HOME / XDG_DATA_HOME, so
 * nothing touches the real data home. Timings are printed, never asserted: a busy machine makes
 * them slower, not wrong.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");
const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    quick: { type: "boolean", default: false },
    runs: { type: "string" },
  },
  strict: true,
});
const runs = Number(args.runs ?? (args.quick ? 5 : 20));
if (!Number.isInteger(runs) || runs < 1) throw new RangeError(`--runs must be >= 1: ${args.runs}`);

const home = await Deno.makeTempDir({ prefix: "synapse-bench-startup-" });
const env: Record<string, string> = {
  PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin",
  HOME: home,
  XDG_DATA_HOME: `${home}/data`,
  XDG_CONFIG_HOME: `${home}/config`,
  DENO_NO_UPDATE_CHECK: "1",
};
const tmp = Deno.env.get("TMPDIR");
if (tmp !== undefined) env.TMPDIR = tmp;
const deno = `${ROOT}/node_modules/.bin/deno`;

/** One timed run, ms; throws when the command fails. */
async function timed(cmd: string, cmdArgs: string[]): Promise<number> {
  const t0 = performance.now();
  const out = await new Deno.Command(cmd, {
    args: cmdArgs,
    env,
    clearEnv: true,
    cwd: home,
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).output();
  const ms = performance.now() - t0;
  if (!out.success) {
    throw new Error(
      `${cmd} ${cmdArgs.join(" ")} exited ${out.code}: ${new TextDecoder().decode(out.stderr)}`,
    );
  }
  return ms;
}

function stats(xs: number[]): { min: number; p50: number; p90: number } {
  const s = [...xs].sort((a, b) => a - b);
  const at = (q: number): number => s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
  return { min: s[0]!, p50: at(0.5), p90: at(0.9) };
}

const cases: { label: string; cmd: string; args: string[]; runs: number }[] = [
  { label: "deno eval 0 (Deno alone)", cmd: deno, args: ["eval", "0"], runs },
  { label: "scripts/setup (fast path)", cmd: `${ROOT}/scripts/setup`, args: [], runs },
  { label: "ck-synapse version", cmd: `${ROOT}/ck-synapse`, args: ["version"], runs },
  { label: "ck-synapse --help", cmd: `${ROOT}/ck-synapse`, args: ["--help"], runs },
  { label: "ck-synapse embed --help", cmd: `${ROOT}/ck-synapse`, args: ["embed", "--help"], runs },
  { label: "ck-synapse call --help", cmd: `${ROOT}/ck-synapse`, args: ["call", "--help"], runs },
  {
    label: "ck-synapse embed hi (embedded)",
    cmd: `${ROOT}/ck-synapse`,
    args: ["embed", "hi"],
    runs: Math.min(runs, 3),
  },
];

try {
  // One untimed run each first: Deno's module cache and the setup stamp are warm afterwards.
  for (const c of cases) await timed(c.cmd, c.args);
  console.log(
    `startup wall time, ms (${runs} runs; embed ${Math.min(runs, 3)}), ${Deno.build.target}, ` +
      `${navigator.hardwareConcurrency} cores, load ${Deno.loadavg()[0]!.toFixed(2)}`,
  );
  console.log(
    `${"command".padEnd(34)}${"min".padStart(8)}${"median".padStart(8)}${"p90".padStart(8)}`,
  );
  for (const c of cases) {
    const xs: number[] = [];
    for (let i = 0; i < c.runs; i++) xs.push(await timed(c.cmd, c.args));
    const s = stats(xs);
    console.log(
      `${c.label.padEnd(34)}${s.min.toFixed(0).padStart(8)}${s.p50.toFixed(0).padStart(8)}${
        s.p90.toFixed(0).padStart(8)
      }`,
    );
  }
  console.log("goal: ck-synapse version and --help, median <= 150 ms");
} finally {
  await Deno.remove(home, { recursive: true });
}
