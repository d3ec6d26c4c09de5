/**
 * A writer process for the concurrent-append test (day_file_test.ts): appends COUNT r2 lines to
 * the day file in DIR through its own {@link LogDayFile}, with a fixed clock so every process
 * writes the same file. Each line carries `writer=TAG i=N len=L pad=<L characters>`, L varying
 * from 0 to 6000 so a torn or interleaved line would show.
 *
 * Usage: deno run --allow-read --allow-write _append_lines.ts DIR TAG COUNT AT_MS
 */
import { LogDayFile } from "../../lib/log/day_file.ts";
import { formatLogLine } from "../../lib/log/line.ts";

const [dir, tag, count, at] = Deno.args;
if (dir === undefined || tag === undefined || count === undefined || at === undefined) {
  console.error("usage: _append_lines.ts DIR TAG COUNT AT_MS");
  Deno.exit(2);
}
const now = Number(at);
using file = new LogDayFile(dir, "synapse", { now: () => now });
// A cheap deterministic spread of lengths (no Math.random: a failure must reproduce).
let x = tag.charCodeAt(0) * 7919;
for (let i = 0; i < Number(count); i++) {
  x = (x * 1103515245 + 12345) % 2147483648;
  const len = x % 6001;
  const pad = tag.repeat(len).slice(0, len);
  file.write(formatLogLine({
    at: now,
    level: "info",
    logger: "synapse.http",
    message: "append",
    fields: { writer: tag, i, len, pad },
  }));
}
