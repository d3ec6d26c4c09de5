/**
 * The machine profile: which machine and engine builds a certification was measured on
 * (docs/internals.md §5). Certification rows are keyed by its hash, so an OS or engine change
 * rotates the hash and forces an explicit re-probe.
 *
 * @module
 */

import { type EngineIdentity, engineIdentityStableBytes } from "./numeric_profile.ts";
import { sha256Hex } from "./sha256.ts";
import { envLookup, type EnvSource } from "../paths.ts";
import { compareCodePoints } from "./_compare.ts";

/** RAM class: installed memory in GiB, rounded up, bucketed; `unknown` off macOS. */
export type RamClass =
  | "le_4_gib"
  | "le_8_gib"
  | "le_16_gib"
  | "le_32_gib"
  | "le_64_gib"
  | "le_128_gib"
  | "le_256_gib"
  | "gt_256_gib"
  | "unknown";

/** Machine profile of docs/internals.md §5, with the reference's snake_case field names. */
export interface MachineProfile {
  /** OS build: `sw_vers -buildVersion` on macOS (`"23G93"`), `uname -sr` elsewhere. */
  os_build: string;
  /** Rust target arch name: `"aarch64"`, `"x86_64"`. */
  arch: string;
  /** CPU brand on macOS (`"Apple M3"`), `uname -m` elsewhere. */
  chip_model: string;
  /** RAM class. */
  ram_class: RamClass;
  /** Apple Neural Engine subtype (`"h16"`, `"h17"`); absent when unknown or off macOS. */
  ane_subtype?: string;
  /** Engine identities; sorted by (engine, version, build_flags) when serialized. */
  engine_identities: EngineIdentity[];
}

/**
 * Runs one probe command and resolves with its stdout; rejects when the command cannot be run or
 * exits non-zero. It should stop when `signal` aborts.
 */
export type CommandRunner = (
  command: string,
  args: readonly string[],
  options: { signal: AbortSignal },
) => Promise<string>;

/** Options of {@link probeMachineProfile}. */
export interface ProbeMachineProfileOptions {
  /**
   * Environment source, read for `SYNAPSE_OS_BUILD_OVERRIDE` (empty counts as unset).
   *
   * @default {Deno.env.get}
   */
  env?: EnvSource;
  /**
   * Command runner; tests inject one to simulate output, failure or a hang.
   *
   * @default {runs the command with Deno.Command}
   */
  run?: CommandRunner;
  /**
   * Engine identities of this build.
   *
   * @default {[]}
   */
  engineIdentities?: readonly EngineIdentity[];
  /**
   * Operating system whose probe column to follow (docs/internals.md §5: macOS vs elsewhere).
   *
   * @default {Deno.build.os}
   */
  os?: typeof Deno.build.os;
  /**
   * Architecture as Deno names it; mapped to the Rust name.
   *
   * @default {Deno.build.arch}
   */
  arch?: string;
  /**
   * Budget of each probe command, in milliseconds.
   *
   * @default {2000}
   */
  timeoutMs?: number;
  /**
   * Arms the budget timer of one probe: calls `expire` once `ms` milliseconds have passed, unless
   * the returned function disarms it first. Tests inject one to expire a budget on cue.
   *
   * @default {setTimeout, disarmed by clearTimeout}
   */
  armTimer?: (ms: number, expire: () => void) => () => void;
}

const RAM_CLASS_LIMITS_GIB = [4, 8, 16, 32, 64, 128, 256] as const;
const ARCH_NAMES: Readonly<Record<string, string>> = {
  x86_64: "x86_64",
  x64: "x86_64",
  amd64: "x86_64",
  aarch64: "aarch64",
  arm64: "aarch64",
};
const PROFILE_FIELDS: ReadonlySet<string> = new Set([
  "os_build",
  "arch",
  "chip_model",
  "ram_class",
  "ane_subtype",
  "engine_identities",
]);
const MACHINE_PROFILE_V2_DOMAIN = "machine-profile-v2";

/**
 * Serializes a machine profile to compact JSON with fields in declaration order
 * (`os_build, arch, chip_model, ram_class, ane_subtype?, engine_identities`), `ane_subtype`
 * omitted when absent or `null`, and engine identities sorted by (engine, version, build_flags).
 *
 * @param profile The profile; extra fields are refused.
 * @returns Compact JSON text.
 * @throws {TypeError} When a field is missing, of the wrong type, or unknown.
 */
export function machineProfileStableBytes(profile: MachineProfile): string {
  if (typeof profile !== "object" || profile === null || Array.isArray(profile)) {
    throw new TypeError(`Cannot serialize machine profile: expected an object`);
  }
  for (const key of Object.keys(profile)) {
    if (!PROFILE_FIELDS.has(key)) {
      throw new TypeError(`Cannot serialize machine profile: unknown field '${key}'`);
    }
  }
  const parts: string[] = [];
  for (const name of ["os_build", "arch", "chip_model", "ram_class"] as const) {
    parts.push(`"${name}":${JSON.stringify(requireString(profile[name], name))}`);
  }
  if (profile.ane_subtype !== undefined && profile.ane_subtype !== null) {
    parts.push(
      `"ane_subtype":${JSON.stringify(requireString(profile.ane_subtype, "ane_subtype"))}`,
    );
  }
  if (!Array.isArray(profile.engine_identities)) {
    throw new TypeError(`Cannot serialize machine profile: 'engine_identities' must be an array`);
  }
  const identities = profile.engine_identities
    .map((identity) => ({ identity, json: engineIdentityStableBytes(identity) }))
    .sort((a, b) => compareEngineIdentities(a.identity, b.identity));
  parts.push(`"engine_identities":[${identities.map((e) => e.json).join(",")}]`);
  return `{${parts.join(",")}}`;
}

/**
 * Hashes a machine profile: `sha256(stable JSON)`. Certification rows are keyed by it.
 *
 * @param profile The profile.
 * @returns 64 lowercase hex characters.
 * @throws {TypeError} As {@link machineProfileStableBytes}.
 */
export function machineProfileHash(profile: MachineProfile): string {
  return sha256Hex(machineProfileStableBytes(profile));
}

/**
 * The revisioned machine-profile hash of newer certification rows:
 * `sha256("machine-profile-v2" ‖ 0x00 ‖ stable JSON)`.
 *
 * @param profile The profile.
 * @returns 64 lowercase hex characters.
 * @throws {TypeError} As {@link machineProfileStableBytes}.
 */
export function revisionedMachineProfileHash(profile: MachineProfile): string {
  const encoder = new TextEncoder();
  const domain = encoder.encode(MACHINE_PROFILE_V2_DOMAIN);
  const json = encoder.encode(machineProfileStableBytes(profile));
  const bytes = new Uint8Array(domain.length + 1 + json.length);
  bytes.set(domain, 0);
  bytes[domain.length] = 0;
  bytes.set(json, domain.length + 1);
  return sha256Hex(bytes);
}

/**
 * Buckets installed memory into a {@link RamClass}: GiB rounded up, then the smallest
 * `le_N_gib` with N in {4, 8, 16, 32, 64, 128, 256} that holds it, else `gt_256_gib`.
 *
 * @param bytes Installed memory in bytes (macOS `hw.memsize`).
 * @returns The RAM class.
 * @throws {RangeError} When `bytes` is not a positive safe integer.
 */
export function ramClassForBytes(bytes: number): RamClass {
  if (!Number.isSafeInteger(bytes) || bytes <= 0) {
    throw new RangeError(
      `Cannot classify memory size: must be a positive integer of bytes, received ${bytes}`,
    );
  }
  const gib = Math.ceil(bytes / 2 ** 30);
  for (const limit of RAM_CLASS_LIMITS_GIB) {
    if (gib <= limit) return `le_${limit}_gib` as RamClass;
  }
  return "gt_256_gib";
}

/**
 * Maps an Apple chip brand to its Neural Engine subtype: `"Apple M5 Max"` → `"h17"`;
 * `"Apple M5"` and `"Apple M4…"` → `"h16"`; anything else has none.
 *
 * @param chipModel The chip brand string.
 * @returns The subtype, or `undefined` when the field is to be omitted.
 */
export function aneSubtypeForChip(chipModel: string): string | undefined {
  if (chipModel === "Apple M5 Max") return "h17";
  if (chipModel === "Apple M5" || chipModel.startsWith("Apple M4")) return "h16";
  return undefined;
}

/**
 * Probes this machine's profile (docs/internals.md §5).
 *
 * On macOS: `sw_vers -buildVersion`; `sysctl -n machdep.cpu.brand_string`, falling back to
 * `sysctl -n hw.model`; `sysctl -n hw.memsize` for the RAM class; the ANE subtype from the chip.
 * Elsewhere: `uname -sr`, `uname -m`, RAM class `unknown`, no ANE subtype.
 * `SYNAPSE_OS_BUILD_OVERRIDE` replaces `os_build` (its probe is then skipped). Each command has
 * its own budget ({@link ProbeMachineProfileOptions.timeoutMs}). There are no placeholders: a
 * failed, timed-out or empty probe refuses boot.
 *
 * @param options Environment, runner, engine identities, OS/arch and budget.
 * @returns The profile; output is trimmed.
 * @throws {Error} When a probe fails, times out or prints nothing (boot refusal); the message
 * names the command.
 *
 * @example Simulated Linux probe
 * ```ts
 * import { probeMachineProfile } from "./machine_profile.ts";
 * import assert from "node:assert";
 *
 * const profile = await probeMachineProfile({
 *   env: {},
 *   os: "linux",
 *   arch: "x86_64",
 *   run: (cmd, args) => Promise.resolve(args[0] === "-sr" ? "Linux 6.8.0\n" : "x86_64\n"),
 * });
 * assert.strictEqual(profile.os_build, "Linux 6.8.0");
 * assert.strictEqual(profile.ram_class, "unknown");
 * ```
 */
export async function probeMachineProfile(
  options: ProbeMachineProfileOptions = {},
): Promise<MachineProfile> {
  const get = envLookup(options.env);
  const run = options.run ?? runCommand;
  const os = options.os ?? Deno.build.os;
  const timeoutMs = options.timeoutMs ?? 2000;
  const armTimer = options.armTimer ?? armSystemTimer;
  const arch = rustArch(options.arch ?? Deno.build.arch);
  const engine_identities = [...(options.engineIdentities ?? [])];
  const probe = (command: string, args: readonly string[]): Promise<string> =>
    probeCommand(run, command, args, { timeoutMs, armTimer });

  const override = get("SYNAPSE_OS_BUILD_OVERRIDE");
  if (os === "darwin") {
    const os_build = override ?? await probe("sw_vers", ["-buildVersion"]);
    let chip_model: string;
    try {
      chip_model = await probe("sysctl", ["-n", "machdep.cpu.brand_string"]);
    } catch {
      chip_model = await probe("sysctl", ["-n", "hw.model"]);
    }
    const memsize = await probe("sysctl", ["-n", "hw.memsize"]);
    if (!/^\d+$/.test(memsize)) {
      throw new Error(
        `Cannot probe machine profile: 'sysctl -n hw.memsize' printed ${
          JSON.stringify(memsize)
        }, not a byte count`,
      );
    }
    const ram_class = ramClassForBytes(Number(memsize));
    const ane_subtype = aneSubtypeForChip(chip_model);
    return {
      os_build,
      arch,
      chip_model,
      ram_class,
      ...(ane_subtype === undefined ? {} : { ane_subtype }),
      engine_identities,
    };
  }
  const os_build = override ?? await probe("uname", ["-sr"]);
  const chip_model = await probe("uname", ["-m"]);
  return { os_build, arch, chip_model, ram_class: "unknown", engine_identities };
}

function armSystemTimer(ms: number, expire: () => void): () => void {
  const timer = setTimeout(expire, ms);
  return function disarm(): void {
    clearTimeout(timer);
  };
}

async function probeCommand(
  run: CommandRunner,
  command: string,
  args: readonly string[],
  budget: { timeoutMs: number; armTimer: (ms: number, expire: () => void) => () => void },
): Promise<string> {
  const { timeoutMs, armTimer } = budget;
  const label = [command, ...args].join(" ");
  const controller = new AbortController();
  let disarm: (() => void) | undefined;
  const timeout = new Promise<never>((_, reject) => {
    disarm = armTimer(timeoutMs, () => {
      const reason = new Error(
        `Cannot probe machine profile: '${label}' timed out after ${timeoutMs} ms`,
      );
      controller.abort(reason);
      reject(reason);
    });
  });
  let output: string;
  try {
    output = await Promise.race([run(command, args, { signal: controller.signal }), timeout]);
  } catch (err) {
    if (controller.signal.aborted) throw controller.signal.reason;
    const message = err instanceof Error ? err.message : String(err);
    throw new Error(`Cannot probe machine profile: '${label}' failed: ${message}`, { cause: err });
  } finally {
    disarm?.();
  }
  const trimmed = typeof output === "string" ? output.trim() : "";
  if (trimmed === "") {
    throw new Error(`Cannot probe machine profile: '${label}' printed nothing`);
  }
  return trimmed;
}

async function runCommand(
  command: string,
  args: readonly string[],
  options: { signal: AbortSignal },
): Promise<string> {
  const result = await new Deno.Command(command, {
    args: [...args],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: options.signal,
  }).output();
  const decoder = new TextDecoder();
  if (!result.success) {
    const stderr = decoder.decode(result.stderr).trim();
    throw new Error(`exit code ${result.code}${stderr === "" ? "" : `: ${stderr}`}`);
  }
  return decoder.decode(result.stdout);
}

function rustArch(arch: string): string {
  const name = ARCH_NAMES[arch] ?? arch;
  if (name === "") throw new Error("Cannot probe machine profile: architecture is empty");
  return name;
}

function compareEngineIdentities(a: EngineIdentity, b: EngineIdentity): number {
  return compareCodePoints(a.engine, b.engine) ||
    compareCodePoints(a.version, b.version) ||
    compareFlags(a.build_flags, b.build_flags);
}

/** Lexicographic order over sorted (key, value) pairs, as Rust's `BTreeMap` derives `Ord`. */
function compareFlags(
  a: Record<string, string> | undefined | null,
  b: Record<string, string> | undefined | null,
): number {
  const x = Object.entries(a ?? {}).sort((p, q) => compareCodePoints(p[0], q[0]));
  const y = Object.entries(b ?? {}).sort((p, q) => compareCodePoints(p[0], q[0]));
  const n = Math.min(x.length, y.length);
  for (let i = 0; i < n; i++) {
    const [xk, xv] = x[i] as [string, string];
    const [yk, yv] = y[i] as [string, string];
    const order = compareCodePoints(xk, yk) || compareCodePoints(xv, yv);
    if (order !== 0) return order;
  }
  return x.length - y.length;
}

function requireString(value: unknown, field: string): string {
  if (typeof value !== "string") {
    throw new TypeError(
      `Cannot serialize machine profile: '${field}' must be a string, received ${
        value === undefined ? "undefined" : JSON.stringify(value)
      }`,
    );
  }
  return value;
}
