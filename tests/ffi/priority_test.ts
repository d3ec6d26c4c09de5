import assert from "node:assert/strict";
import { callingThreadId, setCallingThreadNice } from "../../ffi/priority.ts";

Deno.test("setCallingThreadNice() throws RangeError for values outside -20..19", () => {
  for (const bad of [-21, 20, 1.5, NaN, Infinity]) {
    assert.throws(() => setCallingThreadNice(bad), RangeError);
  }
});

Deno.test({
  name: "callingThreadId() names a thread of this process without reading /proc",
  ignore: Deno.build.os !== "linux",
  fn: async () => {
    const tid = callingThreadId();
    assert.ok(tid !== undefined && Number.isInteger(tid) && tid > 0, `tid ${tid}`);
    const out = await new Deno.Command("ps", {
      args: ["-L", "-o", "tid=", "-p", String(Deno.pid)],
      stdout: "piped",
    }).output();
    const tids = new TextDecoder().decode(out.stdout).split("\n").map((l) => Number(l.trim()));
    assert.ok(tids.includes(tid), `${tid} not among ${tids.join(", ")}`);
  },
});
