/** The CLI's note under an uncertified answer: how to certify a local lane, whose word a remote one is. */
import assert from "node:assert/strict";
import { noteUncertified } from "../../lib/cli/_command.ts";

function capture(): { lines: string[]; io: { out(l: string): void; err(l: string): void } } {
  const lines: string[] = [];
  return { lines, io: { out: () => {}, err: (l) => lines.push(l) } };
}

Deno.test("noteUncertified(): a local lane is told how to certify, a remote one names its provider's declared identity, a certified answer gets no note", () => {
  const local = capture();
  noteUncertified({ model_id: "m", provenance: { certified: false } }, local.io);
  assert.deepEqual(local.lines, [
    `note: m is not certified on this machine; it served because certification is "warn" (certify it: ck-synapse probe run --model m)`,
  ]);
  const remote = capture();
  noteUncertified(
    {
      model_id: "r",
      provenance: { certified: false, remote: { provider: "peer", assurance: "declared" } },
    },
    remote.io,
  );
  assert.deepEqual(remote.lines, [
    "note: r ran on remote provider 'peer', whose identity is declared by the provider, not proven here (you accepted it with --accept-declared)",
  ]);
  const certified = capture();
  noteUncertified({ model_id: "c", provenance: { certified: true } }, certified.io);
  assert.deepEqual(certified.lines, []);
});
