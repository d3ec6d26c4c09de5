/**
 * Defaults of `model.load` read from the model itself: the task ({@link inferTask}) and the
 * model id (from the file or directory name).
 *
 * **Task of a GGUF (F36)**, the first rule that applies:
 * 1. an explicit task in its config.json (`task` or `synapse_task`: embed, generate) or in its
 *    metadata (`general.type` naming `embedding`/`embed`, or `generate`/`text-generation`);
 * 2. an embedding-only architecture (`general.architecture` is one of
 *    {@link EMBEDDING_ONLY_ARCHS}: bert, nomic-bert, jina-bert-v2, t5encoder, …) → embed;
 * 3. a decoder that lacks an output head and says it is an embedder — a `<arch>.pooling_type`
 *    key, no `output.weight` tensor, and `embed` in `general.name` (a converted Qwen3-Embedding,
 *    say) → embed, said as a surprising choice;
 * 4. anything else → generate. A chat template (`tokenizer.chat_template`) settles it; a decoder
 *    architecture with a `<arch>.pooling_type` key is still a decoder (llama.cpp reads the key for
 *    every architecture, and converters write it for generators too, so alone it says nothing),
 *    which the pull says, naming `--task embed` for the other reading.
 *
 * An ONNX whose config.json names a `…ForSequenceClassification` architecture is a reranker, else
 * an embedder.
 *
 * @module
 */
import { gguf } from "@huggingface/gguf";
import type { ModelEngine, ModelTask } from "./model.ts";
import type { LoadRequest, PlannedFile } from "./_load_request.ts";

/** llama.cpp architectures that only embed (no causal output head). */
export const EMBEDDING_ONLY_ARCHS: ReadonlySet<string> = new Set([
  "bert",
  "nomic-bert",
  "nomic-bert-moe",
  "neo-bert",
  "jina-bert-v2",
  "jina-bert-v3",
  "modern-bert",
  "t5encoder",
  "gemma-embedding",
]);

/** The task of a model and why it was chosen. */
export interface InferredTask {
  task: ModelTask;
  /** Why, in words (e.g. "its GGUF architecture 'llama' is a decoder"). */
  reason: string;
  /**
   * Set when the file gave mixed signals and the other reading is plausible: the sentence a
   * pull prints (e.g. "loaded as generate though … ; pass --task embed to override").
   */
  surprise?: string;
}

/**
 * The task of a model when the request names none (see the module doc).
 *
 * @param modelPath The model blob.
 * @param configPath The config.json blob, if any.
 * @returns The task, the reason, and a note when the choice may surprise.
 */
export async function inferTask(
  engine: ModelEngine,
  modelPath: string,
  configPath: string | undefined,
): Promise<InferredTask> {
  const cfg = configPath === undefined ? undefined : await readJson(configPath);
  if (engine === "llama") {
    const explicit = explicitTask(cfg?.task ?? cfg?.synapse_task);
    if (explicit !== undefined) {
      return { task: explicit, reason: `its config.json says task '${explicit}'` };
    }
    let meta: Record<string, unknown>;
    let tensors: string[];
    try {
      const parsed = await gguf(modelPath, { allowLocalFile: true });
      meta = parsed.metadata as Record<string, unknown>;
      tensors = parsed.tensorInfos.map((t) => t.name);
    } catch {
      return { task: "generate", reason: "its GGUF metadata could not be read (the default)" };
    }
    return ggufTask(meta, tensors);
  }
  const archs: string[] = Array.isArray(cfg?.architectures) ? cfg.architectures.map(String) : [];
  if (archs.some((a) => a.endsWith("ForSequenceClassification"))) {
    return { task: "rerank", reason: `its config.json names ${archs.join(", ")}` };
  }
  return { task: "embed", reason: "an ONNX encoder (not a sequence classifier)" };
}

/**
 * The task a GGUF's metadata and tensor names say (rules 1–4 of the module doc, without the
 * config.json).
 *
 * @param meta GGUF metadata.
 * @param tensors Tensor names.
 */
export function ggufTask(meta: Record<string, unknown>, tensors: readonly string[]): InferredTask {
  const arch = String(meta["general.architecture"] ?? "");
  const type = explicitTask(meta["general.type"]);
  if (type !== undefined) {
    return { task: type, reason: `its GGUF general.type is '${String(meta["general.type"])}'` };
  }
  if (EMBEDDING_ONLY_ARCHS.has(arch)) {
    return { task: "embed", reason: `its GGUF architecture '${arch}' only embeds` };
  }
  const pooling = meta[`${arch}.pooling_type`] !== undefined;
  const head = tensors.includes("output.weight");
  const template = typeof meta["tokenizer.chat_template"] === "string";
  const name = String(meta["general.name"] ?? "");
  if (pooling && !head && /embed/i.test(name)) {
    return {
      task: "embed",
      reason: `its GGUF has ${arch}.pooling_type, no output head and the name '${name}'`,
      surprise: `loaded as embed because its GGUF has ${arch}.pooling_type, no output.weight ` +
        `and 'embed' in its name, though '${arch}' is a decoder architecture; pass --task ` +
        "generate to override",
    };
  }
  if (template) {
    return {
      task: "generate",
      reason: `its GGUF carries a chat template (architecture '${arch}')`,
    };
  }
  if (pooling) {
    return {
      task: "generate",
      reason: `its GGUF architecture '${arch}' is a decoder`,
      surprise: `loaded as generate though its GGUF has ${arch}.pooling_type: '${arch}' is a ` +
        "decoder architecture and the key alone does not make an embedding model; pass --task " +
        "embed to override",
    };
  }
  return { task: "generate", reason: `its GGUF architecture '${arch}' is a decoder` };
}

/** A task named by a config or metadata value, or undefined. */
function explicitTask(v: unknown): ModelTask | undefined {
  if (typeof v !== "string") return undefined;
  const t = v.toLowerCase();
  if (t === "embed" || t === "embedding" || t === "embeddings" || t === "feature-extraction") {
    return "embed";
  }
  if (t === "generate" || t === "generation" || t === "text-generation") return "generate";
  return undefined;
}

// deno-lint-ignore no-explicit-any
async function readJson(path: string): Promise<any> {
  try {
    return JSON.parse(await Deno.readTextFile(path));
  } catch {
    return undefined; // validated already; the defaults apply
  }
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
