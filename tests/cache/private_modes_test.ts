/**
 * The model cache is private to its owner (field report F39): its directories are 0700 (an
 * existing one of ours with group or other bits is tightened when the cache opens) and every
 * file it writes is 0600, so a copy of a file only the owner can read is never readable by
 * others. A real cache on disk, a real import.
 */
import assert from "node:assert/strict";
import { MODELS } from "../_helpers.ts";
import { ModelCache } from "../../lib/cache/model_cache.ts";

async function modes(root: string): Promise<[string, number, boolean][]> {
  const out: [string, number, boolean][] = [];
  const walk = async (d: string) => {
    const st = await Deno.lstat(d);
    out.push([d, st.mode! & 0o777, st.isDirectory]);
    if (!st.isDirectory) return;
    for await (const e of Deno.readDir(d)) await walk(`${d}/${e.name}`);
  };
  await walk(root);
  return out;
}

Deno.test({
  name: "the cache's directories are 0700 and its files 0600; loose dirs of ours are tightened",
  ignore: Deno.build.os === "windows",
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "synapse-cache-modes-" });
    try {
      const root = `${dir}/models`;
      // A cache made by an older build: 0755 directories.
      for (const d of ["", "/blobs", "/meta", "/tmp", "/leases"]) {
        await Deno.mkdir(`${root}${d}`, { recursive: true });
        await Deno.chmod(`${root}${d}`, 0o755);
      }
      const cache = new ModelCache({ root });
      const meta = await cache.importFile(`${MODELS}/synapse-tiny-embed/model.onnx`);
      assert.match(meta.digest, /^sha256:[0-9a-f]{64}$/);
      const all = await modes(root);
      assert.ok(all.some(([p]) => p.includes("/blobs/")), JSON.stringify(all));
      assert.ok(all.some(([p]) => p.includes("/meta/")), JSON.stringify(all));
      for (const [p, mode, isDir] of all) {
        if (isDir) assert.equal(mode, 0o700, `${p}: 0${mode.toString(8)}`);
        else assert.equal(mode & 0o077, 0, `${p}: 0${mode.toString(8)}`);
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
