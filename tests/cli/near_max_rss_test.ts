/**
 * Field report F37: 300 calls of 8 near-max-length texts to `embed.batch` grew the service's RSS
 * 11–13 % from call 50 to call 300 elsewhere; the report asks for 5 %. The real launcher serves
 * the test model; the RSS is the served process's own (`ps -o rss=`), read between calls, with no
 * forced GC.
 *
 * Here it grew 20.9–27.8 % until the launcher bounded V8's young generation
 * (`--max-semi-space-size=2`: each isolate — main thread, tokenizer workers, ORT workers — grew its
 * semi-spaces to 16 MiB and kept them), then 9.8–16.5 % on an AMD EPYC with that bound alone: each
 * isolate's old generation grew toward its next GC limit for ~200 calls before it levelled off
 * (sampled to call 1200: no leak, a plateau). With `--optimize-for-size` beside it the process
 * grows 1.2–4.8 % (eight runs) and levels off ~35 MB lower. The report's 5 % is met in every run
 * measured, with 0.2 points to spare at worst, so this test allows {@link MAX_GROWTH} (7 %) for a
 * busy machine, which the bound alone fails in most runs, and prints the measured growth. docs/field-reports.md F37 says the same.
 *
 * @module
 */
import assert from "node:assert/strict";
import { isolatedEnv, serve } from "./_launcher.ts";
import { nearMaxTexts } from "../../bench/corpus.ts";

/** The growth this test allows: the report's 5 % plus 2 points for a busy machine (module doc). */
const MAX_GROWTH = 0.07;

/** The process's resident set in KiB, from `ps` (reading /proc/PID needs --allow-all in Deno). */
async function rssKiB(pid: number): Promise<number> {
  const out = await new Deno.Command("ps", { args: ["-o", "rss=", "-p", String(pid)] }).output();
  const text = new TextDecoder().decode(out.stdout).trim();
  assert.ok(out.success && /^\d+$/.test(text), `ps -o rss= -p ${pid}: ${text}`);
  return Number(text);
}

Deno.test({
  name:
    "F37: 300 embed.batch calls of 8 near-max texts grow the served process's RSS by at most 7 % from call 50 to call 300 (without the launcher's V8 flags it grew 10-28 %)",
  ignore: Deno.build.os !== "linux",
  fn: async () => {
    const home = await isolatedEnv();
    try {
      await using server = await serve(home);
      const texts = nearMaxTexts();
      const rss: Record<number, number> = {};
      for (let call = 1; call <= 300; call++) {
        const res = await fetch(`${server.url}/v1/ops/embed.batch`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ texts: texts(), truncate: true }),
        });
        const body = await res.json();
        assert.equal(res.status, 200, JSON.stringify(body).slice(0, 300));
        assert.equal(body.result.vectors.length, 8);
        if (call === 1) {
          // Near max: every row was cut to the model's limit.
          const cut = body.result.truncation_disclosures as { truncated: boolean }[];
          assert.equal(cut.length, 8, JSON.stringify(cut));
          assert.ok(cut.every((d) => d.truncated), JSON.stringify(cut));
        }
        if (call === 50 || call === 300) rss[call] = await rssKiB(server.child.pid);
      }
      const growth = rss[300]! / rss[50]! - 1;
      console.log(
        `F37: RSS call 50 ${rss[50]} KiB, call 300 ${rss[300]} KiB, growth ${
          (growth * 100).toFixed(1)
        } %`,
      );
      assert.ok(
        growth <= MAX_GROWTH,
        `RSS grew ${(growth * 100).toFixed(1)} % (call 50 ${rss[50]} KiB, call 300 ${
          rss[300]
        } KiB)`,
      );
    } finally {
      await Deno.remove(home.dir, { recursive: true });
    }
  },
});
