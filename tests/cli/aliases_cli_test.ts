/**
 * `ck-synapse alias declare|retract` and `ck-synapse aliases check|list` through the real
 * launcher: embedded (the rows outlive the process) and against a running server found from its
 * record (the owner's key sent for the mutating op); refused without `alias_admin_enabled`.
 */
import assert from "node:assert/strict";
import { cliIn, isolatedEnv, serve } from "./_launcher.ts";
import { sha256Hex } from "../../lib/identity/sha256.ts";

const A = sha256Hex("cli fingerprint a");
const B = sha256Hex("cli fingerprint b");
const [LO, HI] = [A, B].sort();

Deno.test("alias declare, aliases check / list, then alias retract against a running server flips check to migration_required", async () => {
  const home = await isolatedEnv({
    SYNAPSE_CONFIG_JSON: JSON.stringify({ alias_admin_enabled: true }),
  });
  try {
    const declared = await cliIn(home, ["alias", "declare", A, B, "--evidence", '{"note":"cli"}']);
    assert.equal(declared.code, 0, declared.stderr);
    assert.equal(declared.stdout, `declared: ${A} ~ ${B} (table epoch 1)\n`);
    const again = await cliIn(home, ["alias", "declare", "--json", B, A]);
    assert.equal(again.code, 0, again.stderr);
    const againJson = JSON.parse(again.stdout);
    assert.equal(againJson.changed, false);
    assert.equal(againJson.table_epoch, 1);

    const list = await cliIn(home, ["aliases", "list"]);
    assert.equal(list.code, 0, list.stderr);
    assert.match(
      list.stdout,
      new RegExp(`^table epoch  1\\n${LO} ~ ${HI}  declared  from \\S+  active\\n$`),
    );

    const valid = await cliIn(home, [
      "aliases",
      "check",
      "--index",
      A,
      "--provenance",
      `${A},${B}`,
    ]);
    assert.equal(valid.code, 0, valid.stderr);
    assert.equal(valid.stdout, "valid (table epoch 1)\n");

    await using server = await serve(home);
    const retracted = await cliIn(home, ["alias", "retract", A, B]);
    assert.equal(retracted.code, 0, retracted.stderr);
    assert.equal(retracted.stdout, `retracted: ${A} ~ ${B} (table epoch 2)\n`);
    const flipped = await cliIn(home, [
      "aliases",
      "check",
      "--json",
      "--url",
      server.url,
      "--index",
      A,
      "--provenance",
      A,
      "--provenance",
      B,
    ]);
    assert.equal(flipped.code, 1, flipped.stderr);
    const body = JSON.parse(flipped.stdout);
    assert.equal(body.status, "migration_required");
    assert.equal(body.table_epoch, 2);
    assert.deepEqual(
      [body.retracted_pair.fingerprint_a, body.retracted_pair.fingerprint_b],
      [LO, HI],
    );
    assert.equal(body.rebuild_target, A);
    assert.equal(body.rebuild_target_served, false);
    const human = await cliIn(home, ["aliases", "check", "--index", A, "--provenance", B]);
    assert.equal(human.code, 1);
    assert.match(human.stdout, /^migration_required \(table epoch 2\)\n {2}retracted pair {2}/);
    assert.match(
      human.stdout,
      /rebuild under {3}[0-9a-f]{64} \(no loaded model serves it: load one first\)\n$/,
    );
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});

Deno.test("alias declare refuses without alias_admin_enabled, naming the key; usage errors exit 2", async () => {
  const home = await isolatedEnv();
  try {
    const refused = await cliIn(home, ["alias", "declare", A, B]);
    assert.equal(refused.code, 1, refused.stdout);
    assert.match(
      refused.stderr,
      /^error: invalid_request: Cannot alias\.declare: .*alias_admin_enabled is false/,
    );
    const bad = await cliIn(home, ["alias", "declare", A]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /give two fingerprints A B/);
    const noIndex = await cliIn(home, ["aliases", "check", "--provenance", A]);
    assert.equal(noIndex.code, 2);
    assert.match(noIndex.stderr, /give --index FP/);
    const malformed = await cliIn(home, ["aliases", "check", "--index", "nope"]);
    assert.equal(malformed.code, 2, malformed.stderr);
    assert.match(malformed.stderr, /index_fingerprint/);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});
