/**
 * `ck-synapse quantize MODEL [--out DIR] [--quant int8] [--json]`: the int8 quantizer
 * (lib/quant/quantize_onnx.ts) on a local fp32 ONNX model, in this process (no server). The
 * int8 file goes into the model cache, keyed by the fp32 file's digest and the quantizer's
 * revision (a second run is a cache hit); `--out DIR` also writes a model directory
 * (`model.onnx` and the source's tokenizer and config files) to serve or pull.
 *
 * @module
 */
import { resolve } from "node:path";
import { SynapseError } from "../../contract/errors.ts";
import { cliExitFor } from "../exit_codes.ts";
import { parseCommandArgs, UsageError } from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";
import { formatBytes } from "../_progress.ts";

const USAGE = `usage: ck-synapse quantize MODEL [--out DIR] [--quant int8] [--json]

Quantizes a local fp32 ONNX model to int8 (dynamic quantization: per-column symmetric int8
MatMul weights, activations quantized per call to uint8; embeddings and LayerNorm stay fp32).
The int8 file goes into the model cache, keyed by the fp32 file's SHA-256 and the quantizer's
revision, so quantizing the same file again does nothing. Same input, same output bytes.

  MODEL         an .onnx file, or a directory holding model.onnx or onnx/model.onnx
  --out DIR     also write DIR/model.onnx and the source's tokenizer.json, config.json, … (serve
                it from the config, or 'ck-synapse pull DIR')
  --quant int8  the quantization (int8, the only one; anything else is refused)
  --json        print {source_digest, digest, path, bytes, source_bytes, cache_hit, descriptor,
                quantized, skipped, out?, files?}

The int8 model serves as its own lane (quant int8, its own fingerprint) and needs a certificate:
load it with reference_model naming the fp32 model, then 'ck-synapse probe run --model ID'.
Or in one step: 'ck-synapse pull --quant int8 DIR'.

Exit status: 0 quantized (or found in the cache), 1 the model cannot be quantized (not ONNX,
external data, already quantized, no MatMul weights), 2 usage error.`;

/** The `quantize` command. */
export const quantizeCommand: Command = {
  name: "quantize",
  describe: "Quantize a local fp32 ONNX model to int8 (into the model cache, or --out DIR)",
  usage: USAGE,
  run: runQuantize,
};

/**
 * Refuses a `--quant` value other than `int8`.
 *
 * @throws {UsageError} naming the value and the accepted ones.
 */
export function checkQuant(quant: string | undefined, command: string): void {
  if (quant === undefined || quant === "int8") return;
  throw new UsageError(
    `Cannot ${command} with --quant ${quant}: unknown quantization '${quant}' (accepted: int8)`,
  );
}

async function runQuantize(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    out: { type: "string" },
    quant: { type: "string" },
    json: { type: "boolean" },
  });
  checkQuant(values.quant, "quantize");
  const [target, ...extra] = positionals;
  if (target === undefined) {
    throw new UsageError("Cannot quantize: give an .onnx file or a model directory");
  }
  if (extra.length > 0) throw new UsageError(`Cannot quantize: unexpected '${extra[0]}'`);
  const { resolveModelFiles, quantizeModelFile, writeQuantizedDir } = await import(
    "../../models/quantize_model.ts"
  );
  const { ModelCache } = await import("../../cache/model_cache.ts");
  let files: Awaited<ReturnType<typeof resolveModelFiles>>;
  let q: Awaited<ReturnType<typeof quantizeModelFile>>;
  try {
    files = await resolveModelFiles(resolve(Deno.cwd(), target));
    q = await quantizeModelFile(files.model, new ModelCache());
  } catch (err) {
    if (!(err instanceof SynapseError)) throw err;
    if (values.json) io.out(JSON.stringify({ ...err.toChannel(), details: err.details }, null, 2));
    else io.err(`error: ${err.code}: ${err.message}`);
    return cliExitFor("semantic");
  }
  const out = values.out === undefined ? undefined : resolve(Deno.cwd(), values.out);
  const written = out === undefined ? undefined : await writeQuantizedDir(out, q, files);
  if (values.json) {
    io.out(JSON.stringify(
      {
        source_digest: q.sourceDigest,
        digest: q.digest,
        path: q.path,
        bytes: q.bytes,
        source_bytes: q.sourceBytes,
        cache_hit: q.cacheHit,
        descriptor: q.descriptor,
        ...(q.quantized === undefined ? {} : { quantized: q.quantized, skipped: q.skipped }),
        ...(out === undefined ? {} : { out, files: written }),
      },
      null,
      2,
    ));
    return 0;
  }
  io.out(
    q.cacheHit
      ? `int8: ${q.digest} (${formatBytes(q.bytes)}), found in the model cache`
      : `int8: ${q.digest} (${formatBytes(q.bytes)}): ${q.quantized!.length} MatMuls quantized, ${
        q.skipped!.length
      } left fp32`,
  );
  io.out(`from: ${q.sourceDigest} (${formatBytes(q.sourceBytes)}) ${files.model}`);
  io.out(`blob: ${q.path}`);
  if (out !== undefined) io.out(`wrote: ${out} (${written!.join(", ")})`);
  return 0;
}
