import assert from "node:assert";
import {
  aneSubtypeForChip,
  type CommandRunner,
  type MachineProfile,
  machineProfileHash,
  machineProfileStableBytes,
  probeMachineProfile,
  ramClassForBytes,
  revisionedMachineProfileHash,
} from "../../lib/identity/machine_profile.ts";
import { sha256Hex } from "../../lib/identity/sha256.ts";
import vectors from "../vectors/identity.json" with { type: "json" };

const M3: MachineProfile = {
  os_build: "23G93",
  arch: "aarch64",
  chip_model: "Apple M3",
  ram_class: "le_32_gib",
  engine_identities: [],
};

/** A runner answering from a table keyed by the full command line. */
function fakeRunner(answers: Record<string, string | Error>): {
  run: CommandRunner;
  calls: string[];
} {
  const calls: string[] = [];
  const run: CommandRunner = (command, args) => {
    const line = [command, ...args].join(" ");
    calls.push(line);
    const answer = answers[line];
    if (answer === undefined) return Promise.reject(new Error(`unexpected command ${line}`));
    if (answer instanceof Error) return Promise.reject(answer);
    return Promise.resolve(answer);
  };
  return { run, calls };
}

const LINUX = { "uname -sr": "Linux 6.8.0-45-generic\n", "uname -m": "x86_64\n" };

Deno.test("machineProfileHash() reproduces the vector of {23G93, aarch64, Apple M3, le_32_gib}", () => {
  const v = vectors.machine_profiles[0];
  assert.ok(v !== undefined);
  assert.strictEqual(machineProfileStableBytes(M3), v.stable_bytes);
  assert.strictEqual(machineProfileHash(M3), v.hash);
  const reparsed = JSON.parse(v.stable_bytes) as MachineProfile;
  assert.strictEqual(machineProfileHash(reparsed), v.hash);
});

Deno.test("machineProfileStableBytes() ignores input key order", () => {
  const shuffled = {
    engine_identities: [],
    ram_class: "le_32_gib",
    chip_model: "Apple M3",
    arch: "aarch64",
    os_build: "23G93",
  } as MachineProfile;
  assert.strictEqual(machineProfileHash(shuffled), vectors.machine_profiles[0]?.hash);
});

Deno.test("machineProfileStableBytes() sorts engine identities by (engine, version, flags)", () => {
  const profile: MachineProfile = {
    ...M3,
    ane_subtype: "h16",
    engine_identities: [
      { engine: "ort", version: "1.30.0" },
      { engine: "llama", version: "3.21.1", build_flags: { gpu: "metal" } },
      { engine: "llama", version: "3.21.1", build_flags: { gpu: "cuda" } },
      { engine: "llama", version: "3.21.1" },
      { engine: "llama", version: "3.10.0", build_flags: { z: "1" } },
    ],
  };
  const json = JSON.parse(machineProfileStableBytes(profile));
  assert.deepStrictEqual(Object.keys(json), [
    "os_build",
    "arch",
    "chip_model",
    "ram_class",
    "ane_subtype",
    "engine_identities",
  ]);
  assert.deepStrictEqual(json.engine_identities, [
    { engine: "llama", version: "3.10.0", build_flags: { z: "1" } },
    { engine: "llama", version: "3.21.1" },
    { engine: "llama", version: "3.21.1", build_flags: { gpu: "cuda" } },
    { engine: "llama", version: "3.21.1", build_flags: { gpu: "metal" } },
    { engine: "ort", version: "1.30.0" },
  ]);
  const reversed = { ...profile, engine_identities: [...profile.engine_identities].reverse() };
  assert.strictEqual(machineProfileHash(reversed), machineProfileHash(profile));
});

Deno.test("machineProfileHash() changes when any single field changes", () => {
  const base = machineProfileHash(M3);
  const variants: MachineProfile[] = [
    { ...M3, os_build: "23G94" },
    { ...M3, arch: "x86_64" },
    { ...M3, chip_model: "Apple M4" },
    { ...M3, ram_class: "le_64_gib" },
    { ...M3, ane_subtype: "h16" },
    { ...M3, engine_identities: [{ engine: "ort", version: "1.30.0" }] },
  ];
  for (const v of variants) assert.notStrictEqual(machineProfileHash(v), base, JSON.stringify(v));
});

Deno.test("machineProfileStableBytes() refuses unknown and mistyped fields", () => {
  assert.throws(
    () => machineProfileStableBytes({ ...M3, gpu: "x" } as unknown as MachineProfile),
    /unknown field 'gpu'/,
  );
  assert.throws(
    () => machineProfileStableBytes({ ...M3, os_build: 1 } as unknown as MachineProfile),
    TypeError,
  );
  assert.throws(
    () =>
      machineProfileStableBytes({
        ...M3,
        engine_identities: [{ engine: 1 }],
      } as unknown as MachineProfile),
    TypeError,
  );
});

Deno.test("revisionedMachineProfileHash() hashes 'machine-profile-v2' 0x00 json", () => {
  const json = new TextEncoder().encode(machineProfileStableBytes(M3));
  const domain = new TextEncoder().encode("machine-profile-v2");
  const bytes = new Uint8Array([...domain, 0, ...json]);
  assert.strictEqual(revisionedMachineProfileHash(M3), sha256Hex(bytes));
  assert.notStrictEqual(revisionedMachineProfileHash(M3), machineProfileHash(M3));
});

Deno.test("ramClassForBytes() rounds GiB up into the class ladder", () => {
  const GiB = 2 ** 30;
  assert.strictEqual(ramClassForBytes(1), "le_4_gib");
  assert.strictEqual(ramClassForBytes(4 * GiB), "le_4_gib");
  assert.strictEqual(ramClassForBytes(4 * GiB + 1), "le_8_gib");
  assert.strictEqual(ramClassForBytes(24 * GiB), "le_32_gib");
  assert.strictEqual(ramClassForBytes(32 * GiB), "le_32_gib");
  assert.strictEqual(ramClassForBytes(128 * GiB), "le_128_gib");
  assert.strictEqual(ramClassForBytes(256 * GiB), "le_256_gib");
  assert.strictEqual(ramClassForBytes(256 * GiB + 1), "gt_256_gib");
  for (const bad of [0, -1, 1.5, Number.NaN]) {
    assert.throws(() => ramClassForBytes(bad), RangeError);
  }
});

Deno.test("aneSubtypeForChip() maps M5 Max, M5 and M4 chips", () => {
  assert.strictEqual(aneSubtypeForChip("Apple M5 Max"), "h17");
  assert.strictEqual(aneSubtypeForChip("Apple M5"), "h16");
  assert.strictEqual(aneSubtypeForChip("Apple M4"), "h16");
  assert.strictEqual(aneSubtypeForChip("Apple M4 Pro"), "h16");
  assert.strictEqual(aneSubtypeForChip("Apple M3"), undefined);
  assert.strictEqual(aneSubtypeForChip("Intel(R) Core(TM) i9"), undefined);
});

Deno.test("probeMachineProfile() follows the non-macOS column", async () => {
  const { run, calls } = fakeRunner(LINUX);
  const identities = [{ engine: "ort", version: "1.30.0" }];
  const profile = await probeMachineProfile({
    env: {},
    run,
    os: "linux",
    arch: "x86_64",
    engineIdentities: identities,
  });
  assert.deepStrictEqual(profile, {
    os_build: "Linux 6.8.0-45-generic",
    arch: "x86_64",
    chip_model: "x86_64",
    ram_class: "unknown",
    engine_identities: identities,
  });
  assert.deepStrictEqual(calls, ["uname -sr", "uname -m"]);
});

Deno.test("probeMachineProfile() maps the arch to Rust names", async () => {
  const cases: [deno: string, rust: string][] = [
    ["x86_64", "x86_64"],
    ["aarch64", "aarch64"],
    ["arm64", "aarch64"],
  ];
  for (const [deno, rust] of cases) {
    const profile = await probeMachineProfile({
      env: {},
      run: fakeRunner(LINUX).run,
      os: "linux",
      arch: deno,
    });
    assert.strictEqual(profile.arch, rust);
  }
});

Deno.test("probeMachineProfile() honours SYNAPSE_OS_BUILD_OVERRIDE", async () => {
  const { run, calls } = fakeRunner(LINUX);
  const profile = await probeMachineProfile({
    env: { SYNAPSE_OS_BUILD_OVERRIDE: "custom-build" },
    run,
    os: "linux",
  });
  assert.strictEqual(profile.os_build, "custom-build");
  assert.deepStrictEqual(calls, ["uname -m"]);
  const empty = await probeMachineProfile({
    env: { SYNAPSE_OS_BUILD_OVERRIDE: "" },
    run: fakeRunner(LINUX).run,
    os: "linux",
  });
  assert.strictEqual(empty.os_build, "Linux 6.8.0-45-generic");
});

Deno.test("probeMachineProfile() follows the macOS column", async () => {
  const { run } = fakeRunner({
    "sw_vers -buildVersion": "23G93\n",
    "sysctl -n machdep.cpu.brand_string": "Apple M3\n",
    "sysctl -n hw.memsize": `${24 * 2 ** 30}\n`,
  });
  const profile = await probeMachineProfile({ env: {}, run, os: "darwin", arch: "aarch64" });
  assert.deepStrictEqual(profile, M3);
  assert.strictEqual(machineProfileHash(profile), vectors.machine_profiles[0]?.hash);
});

Deno.test("probeMachineProfile() on macOS falls back to hw.model and sets ane_subtype", async () => {
  const { run, calls } = fakeRunner({
    "sw_vers -buildVersion": "25A1\n",
    "sysctl -n machdep.cpu.brand_string": "\n",
    "sysctl -n hw.model": "Apple M5 Max\n",
    "sysctl -n hw.memsize": `${128 * 2 ** 30}`,
  });
  const profile = await probeMachineProfile({ env: {}, run, os: "darwin", arch: "aarch64" });
  assert.strictEqual(profile.chip_model, "Apple M5 Max");
  assert.strictEqual(profile.ane_subtype, "h17");
  assert.strictEqual(profile.ram_class, "le_128_gib");
  assert.ok(calls.includes("sysctl -n hw.model"));
});

Deno.test("probeMachineProfile() refuses boot when a probe fails", async () => {
  const { run } = fakeRunner({ "uname -sr": new Error("no such command"), "uname -m": "x86_64" });
  await assert.rejects(
    probeMachineProfile({ env: {}, run, os: "linux" }),
    /Cannot probe machine profile: 'uname -sr' failed: no such command/,
  );
});

Deno.test("probeMachineProfile() refuses boot when a probe prints nothing", async () => {
  const { run } = fakeRunner({ "uname -sr": "Linux 6.8", "uname -m": "  \n" });
  await assert.rejects(
    probeMachineProfile({ env: {}, run, os: "linux" }),
    /'uname -m' printed nothing/,
  );
});

Deno.test("probeMachineProfile() refuses boot when macOS memsize is not a number", async () => {
  const { run } = fakeRunner({
    "sw_vers -buildVersion": "23G93",
    "sysctl -n machdep.cpu.brand_string": "Apple M3",
    "sysctl -n hw.memsize": "lots",
  });
  await assert.rejects(probeMachineProfile({ env: {}, run, os: "darwin" }), /hw\.memsize/);
});

Deno.test("probeMachineProfile() refuses boot when a probe exceeds its budget", async () => {
  // The runner hangs until aborted; the budget timer is ours, expired once the probe is running.
  let started!: () => void;
  const running = new Promise<void>((resolve) => started = resolve);
  let aborted = false;
  const hang: CommandRunner = (_command, _args, { signal }) =>
    new Promise((_, reject) => {
      signal.addEventListener("abort", () => {
        aborted = true;
        reject(signal.reason);
      });
      started();
    });
  const armed: number[] = [];
  let expire: (() => void) | undefined;
  let disarmed = 0;
  const armTimer = (ms: number, onExpire: () => void) => {
    armed.push(ms);
    expire = onExpire;
    return () => void disarmed++;
  };
  const probing = probeMachineProfile({ env: {}, run: hang, os: "linux", timeoutMs: 50, armTimer });
  await running;
  assert.deepStrictEqual(armed, [50], "one probe running, its budget armed at timeoutMs");
  assert.ok(!aborted, "nothing aborts before the budget expires");
  expire!();
  await assert.rejects(probing, /'uname -sr' timed out after 50 ms/);
  assert.ok(aborted, "the runner's signal was aborted");
  assert.strictEqual(disarmed, 1, "the expired timer is released");
});

Deno.test("probeMachineProfile() times out a runner that ignores its signal", async () => {
  const deaf: CommandRunner = () => new Promise(() => {});
  await assert.rejects(
    probeMachineProfile({ env: {}, run: deaf, os: "linux", timeoutMs: 20 }),
    /timed out after 20 ms/,
  );
});

Deno.test({
  name: "probeMachineProfile() probes this machine with real commands",
  ignore: Deno.build.os === "windows",
  fn: async () => {
    const profile = await probeMachineProfile({ env: {} });
    assert.ok(profile.os_build.length > 0);
    assert.ok(["x86_64", "aarch64"].includes(profile.arch));
    assert.ok(profile.chip_model.length > 0);
    assert.match(machineProfileHash(profile), /^[0-9a-f]{64}$/);
  },
});
