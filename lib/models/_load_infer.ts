/**
 * Defaults of `model.load` read from the model itself: the task (a GGUF with a pooling type is an
 * embedding model, else a generator; an ONNX whose config.json names a
 * `…ForSequenceClassification` architecture is a reranker, else an embedder) and the model id
 * (from the file or directory name).
 *
 * @module
 */
import { gguf } from "@huggingface/gguf";
import type { ModelEngine, ModelTask } from "./model.ts";
import type { LoadRequest, PlannedFile } from "./_load_request.ts";

/**
 * The task of a model when the request names none.
 *
 * @param modelPath The model blob.
 * @param configPath The config.json blob, if any.
 */
export async function inferTask(
  engine: ModelEngine,
  modelPath: string,
  configPath: string | undefined,
): Promise<ModelTask> {
  if (engine === "llama") {
    try {
      const meta = (await gguf(modelPath, { allowLocalFile: true })).metadata as Record<
        string,
        unknown
      >;
      const arch = String(meta["general.architecture"] ?? "");
      return meta[`${arch}.pooling_type`] !== undefined ? "embed" : "generate";
    } catch {
      return "generate";
    }
  }
  if (configPath !== undefined) {
    try {
      const cfg = JSON.parse(await Deno.readTextFile(configPath)) as { architectures?: unknown };
      if (
        Array.isArray(cfg.architectures) &&
        cfg.architectures.some((a) => String(a).endsWith("ForSequenceClassification"))
      ) {
        return "rerank";
      }
    } catch { /* validated already; default below */ }
  }
  return "embed";
}

/**
 * The model id when the request names none: a directory's name when the model file is
 * `model.onnx` / `model.gguf`, else the file name without its extension; for `hf`, the repo's
 * name. Characters outside `[A-Za-z0-9._:-]` become `-`.
 */
export function modelIdFor(req: LoadRequest, plan: PlannedFile[]): string {
  let name: string;
  const ref = plan[0]!.ref;
  const where = ref.kind === "local" ? ref.path : new URL(ref.url).pathname;
  const parts = where.split("/").filter(Boolean);
  const file = parts.at(-1) ?? "model";
  if (req.repo !== undefined && /^model\.(onnx|gguf)$/.test(file)) {
    name = req.repo.split("/").at(-1)!;
  } else if (/^model\.(onnx|gguf)$/.test(file)) {
    name = parts.at(-2) === "onnx" ? parts.at(-3) ?? "model" : parts.at(-2) ?? "model";
  } else name = file.replace(/\.(onnx|gguf)$/i, "");
  name = name.replace(/[^A-Za-z0-9._:-]/g, "-").replace(/^[^A-Za-z0-9]+/, "");
  return name.slice(0, 128) || "model";
}
