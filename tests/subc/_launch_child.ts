/**
 * Child process of tests/subc/launch_test.ts: reads the launch nonce the way a launched module
 * does (`launchNonce()`, the cached reader, twice), then reads again uncached to show what the
 * first read left at the descriptor, and prints one JSON line.
 */
import { launchNonce, readLaunchNonce } from "../../lib/subc/launch.ts";
import { SubcWireError } from "../../lib/subc/errors.ts";

function attempt(read: () => unknown): unknown {
  try {
    const n = read() as { value: string; source: string } | undefined;
    return n === undefined ? null : { value: n.value, source: n.source, json: JSON.stringify(n) };
  } catch (e) {
    if (e instanceof SubcWireError) return { reason: e.reason, message: e.message };
    throw e;
  }
}

const first = attempt(launchNonce);
const second = attempt(launchNonce);
const again = attempt(() => readLaunchNonce());
console.log(JSON.stringify({ first, second, again }));
