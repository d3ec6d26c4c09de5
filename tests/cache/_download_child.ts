/**
 * A separate process that downloads one file into a model cache, for the crash and
 * cross-process tests. Argument: JSON `{root, url, sha256, size?}`. Prints `progress` once the
 * first body bytes are on disk, then `ok <digest>` or `error <code> <details.reason>`.
 */
import { ModelCache } from "../../lib/cache/model_cache.ts";
import { SynapseError } from "../../lib/contract/errors.ts";

const args = JSON.parse(Deno.args[0]!) as {
  root: string;
  url: string;
  sha256: string;
  size?: number;
};
const cache = new ModelCache({ root: args.root, lockPollMs: 50 });
let told = false;
const say = (line: string) => Deno.stdout.writeSync(new TextEncoder().encode(line + "\n"));
try {
  const meta = await cache.download(args.url, {
    sha256: args.sha256,
    ...(args.size === undefined ? {} : { size: args.size }),
    onProgress: (p) => {
      if (!told && p.bytes_done > 0) {
        told = true;
        say("progress");
      }
    },
  });
  say(`ok ${meta.digest}`);
} catch (err) {
  say(`error ${err instanceof SynapseError ? `${err.code} ${err.details?.reason}` : String(err)}`);
  if (err instanceof SynapseError && err.code === "backend_unavailable") {
    say(JSON.stringify(err.details));
  }
  Deno.exit(1);
}
