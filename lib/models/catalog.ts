/**
 * The shipped catalog (docs/internals.md "§10 Catalog"; `models.catalog` in docs/operations.md):
 * real models users want, each pinned by Hugging Face revision and per-file SHA-256, with one lane
 * per backend that can serve it here (`<catalog_id>-<backend>`). A file whose digest is unknown is
 * listed with `sha256: null` and `digest_source: null`: its lane is not runnable (`reason:
 * "digest_unverified"`), because an unpinned download is refused — pull it yourself with
 * `ck-synapse pull URL --sha256 H` once you know the digest.
 *
 * Each pinned file names, in `digest_source`, the public URL at which anyone can check its pin
 * ({@link digestSourceUrl}): for a file Hugging Face stores in Git LFS (`.onnx`, `.gguf`,
 * `.safetensors`, `.bin`, or over 10 MB) its LFS pointer,
 * `https://huggingface.co/<repo>/raw/<revision>/<path>`, which states `oid sha256:<hex>` and
 * `size`; for a small regular file (`tokenizer.json`, `config.json`) the file itself,
 * `https://huggingface.co/<repo>/resolve/<revision>/<path>`, whose SHA-256 is the pin. The pins
 * were taken from the reference implementation's parity manifest and from public code pinning the
 * same file at the same commit; none could be fetched from Hugging Face on the machines this build
 * was made on. A wrong pin fails the download with `artifact_invalid` (digest mismatch), never
 * serves other bytes.
 *
 * @module
 */
import { jcsSha256, type JsonValue } from "../identity/jcs.ts";
import type { Pooling } from "../engines/ort/pooling.ts";
import type { ModelEngine, ModelTask } from "./model.ts";
import type { PromptTable } from "./prompts.ts";

/** Revision of this catalog's schema and content as served by `models.catalog`. */
export const CATALOG_REVISION = 1;

/** One pinned file of a catalog lane. */
export interface CatalogFile {
  /** Hugging Face repository holding the file. */
  hf_repo: string;
  /** 40-hex commit of that repository (the revision the digest was stated for). */
  revision: string;
  /** Path inside the repository. */
  path: string;
  /** Lowercase hex SHA-256, or null when no public source states it (the lane is then not runnable). */
  sha256: string | null;
  /** Bytes, when a public source states it. */
  size: number | null;
  /**
   * Public URL that states the pinned digest at this revision ({@link digestSourceUrl}: the LFS
   * pointer of an LFS file, the file itself otherwise); null with `sha256: null`.
   */
  digest_source: string | null;
}

/**
 * Values a backend's catalog self-check must reproduce (lib/probe/self_check.ts): the first
 * values of the outputs of some of the fixture's inputs, as the reference measured them. None of
 * the shipped models pins any yet.
 */
export interface SelfCheckExpected {
  /**
   * The fixture revision (`SELF_CHECK_FIXTURE_REVISION`) the values were measured on; under
   * another revision the check fails `expected_values_stale` rather than compare other inputs.
   */
  fixture_revision: number;
  /** Largest \|Δ\| per value. */
  tolerance: number;
  /**
   * Per input: its index in the fixture and the first values of its output (embed: the vector's
   * first values; rerank: `[score]`).
   */
  inputs: { index: number; first_values: number[] }[];
}

/** One backend lane of a catalog model. */
export interface CatalogBackend {
  /** Backend name: `ort` (onnxruntime, CPU) or `llama` (llama.cpp). */
  backend: ModelEngine;
  files: { model: CatalogFile; tokenizer?: CatalogFile; config?: CatalogFile };
  pooling: Pooling;
  normalize: boolean;
  /** Longest input in tokens (8192 for the reference's catalog models). */
  max_tokens: number;
  /** Pinned values of the catalog self-check, where the catalog has them. */
  self_check_expected?: SelfCheckExpected;
  /**
   * The model's upstream prompt table (an asymmetric embedding model: queries carry an
   * instruction), exactly as its model card / `config_sentence_transformers.json` publish it;
   * part of the lane's numeric profile and of `manifest_digest`.
   */
  prompts?: PromptTable;
}

/** One catalog model. */
export interface CatalogModel {
  id: string;
  task: ModelTask;
  name: string;
  description: string;
  default_for_task: boolean;
  upstream: { hf_repo: string; revision: string };
  /** Vector width (embed), 1 (rerank), 0 (generate). */
  dims: number;
  /**
   * Matryoshka widths the upstream model was trained to be cut to (its model card), served by
   * `dimensions` under derived fingerprints (lib/models/matryoshka.ts); absent for a model not
   * Matryoshka-trained. Not part of `manifest_digest` (it changes no file and no lane).
   */
  matryoshka_dims?: number[];
  backends: CatalogBackend[];
  /** Why the model has no backend here, when `backends` is empty. */
  no_backend_reason?: string;
}

/** Pinned files larger than this are stored in Git LFS by Hugging Face whatever their name. */
const LFS_MIN_BYTES = 10 * 1024 * 1024;

/** File names Hugging Face's default `.gitattributes` stores in Git LFS. */
const LFS_NAME = /\.(onnx|gguf|safetensors|bin)$/;

/**
 * The public URL that states a pinned file's SHA-256 at its revision: for a Git-LFS file (by
 * name, or over 10 MB) its LFS pointer `https://huggingface.co/<repo>/raw/<revision>/<path>`
 * (`oid sha256:<hex>` and `size`), else the file itself at
 * `https://huggingface.co/<repo>/resolve/<revision>/<path>` (its SHA-256 is the digest).
 *
 * @param f The pinned file (repository, 40-hex revision, path, size in bytes or null).
 * @returns An absolute `https://huggingface.co/` URL.
 */
export function digestSourceUrl(
  f: Pick<CatalogFile, "hf_repo" | "revision" | "path" | "size">,
): string {
  const lfs = LFS_NAME.test(f.path) || (f.size !== null && f.size > LFS_MIN_BYTES);
  return `https://huggingface.co/${f.hf_repo}/${lfs ? "raw" : "resolve"}/${f.revision}/${f.path}`;
}

function hf(
  hf_repo: string,
  revision: string,
  path: string,
  sha256: string | null,
  size: number | null = null,
): CatalogFile {
  const digest_source = sha256 === null ? null : digestSourceUrl({ hf_repo, revision, path, size });
  return { hf_repo, revision, path, sha256, size, digest_source };
}

const GTE_EMBED = [
  "Alibaba-NLP/gte-modernbert-base",
  "e7f32e3c00f91d699e8c43b53106206bcc72bb22",
] as const;
const GTE_RERANK = [
  "Alibaba-NLP/gte-reranker-modernbert-base",
  "f7481e6055501a30fb19d090657df9ec1f79ab2c",
] as const;
const QWEN3_EMBED = [
  "Qwen/Qwen3-Embedding-0.6B",
  "97b0c614be4d77ee51c0cef4e5f07c00f9eb65b3",
] as const;
const QWEN3_EMBED_GGUF = [
  "Qwen/Qwen3-Embedding-0.6B-GGUF",
  "370f27d7550e0def9b39c1f16d3fbaa13aa67728",
] as const;
const QWEN3_RERANK = [
  "Qwen/Qwen3-Reranker-0.6B",
  "e61197ed45024b0ed8a2d74b80b4d909f1255473",
] as const;
const MINILM = [
  "sentence-transformers/all-MiniLM-L6-v2",
  "c9745ed1d9f207416be6d2e6f8de32d1f16199bf",
] as const;
const BGE_SMALL = ["BAAI/bge-small-en-v1.5", "5c38ec7c405ec4b44b94cc5a9bb96e735b38267a"] as const;
const MS_MARCO = [
  "cross-encoder/ms-marco-MiniLM-L-6-v2",
  "c5ee24cb16019beea0893ab7796b1df96625c6b8",
] as const;
const QWEN25_GGUF = [
  "Qwen/Qwen2.5-0.5B-Instruct-GGUF",
  "9217f5db79a29953eb74d5343926648285ec7e67",
] as const;
const QWEN3_GGUF = ["Qwen/Qwen3-0.6B-GGUF", "23749fefcc72300e3a2ad315e1317431b06b590a"] as const;
const SMOLLM2_GGUF = [
  "HuggingFaceTB/SmolLM2-360M-Instruct-GGUF",
  "593b5a2e04c8f3e4ee880263f93e0bd2901ad47f",
] as const;

/** A llama.cpp generation lane over one GGUF. */
function generator(file: CatalogFile): CatalogBackend {
  return {
    backend: "llama",
    files: { model: file },
    pooling: "last_token",
    normalize: false,
    max_tokens: 8192,
  };
}

/** The shipped catalog. */
export const CATALOG: readonly CatalogModel[] = Object.freeze(
  [
    {
      id: "gte-modernbert-base",
      task: "embed",
      name: "GTE ModernBERT base",
      description:
        "English text embeddings, 768 dims, CLS pooling, 8192-token context (ONNX, f32).",
      default_for_task: true,
      upstream: { hf_repo: GTE_EMBED[0], revision: GTE_EMBED[1] },
      dims: 768,
      backends: [{
        backend: "ort",
        files: {
          model: hf(
            ...GTE_EMBED,
            "onnx/model.onnx",
            "947f31df7effaeec4edb57c50e4ed7e0f2034d9336063f92615b92e3e0d24d78",
            596392315,
          ),
          tokenizer: hf(
            ...GTE_EMBED,
            "tokenizer.json",
            "6c8aaa9a542084f2457eab775d4eeb51f92a70c0fd9de28d5edb0ddec3c08d30",
          ),
          config: hf(
            ...GTE_EMBED,
            "config.json",
            "8ba54dc3d35d7194f5178a4194b649f146753e02dabd22bdca5c5cbac15069ed",
          ),
        },
        pooling: "cls",
        normalize: true,
        max_tokens: 8192,
      }],
    },
    {
      id: "all-minilm-l6-v2",
      task: "embed",
      name: "all-MiniLM-L6-v2",
      description:
        "Small English sentence embeddings, 384 dims, mean pooling, 256-token inputs (ONNX, f32).",
      default_for_task: false,
      upstream: { hf_repo: MINILM[0], revision: MINILM[1] },
      dims: 384,
      backends: [{
        backend: "ort",
        files: {
          model: hf(
            ...MINILM,
            "onnx/model.onnx",
            "6fd5d72fe4589f189f8ebc006442dbb529bb7ce38f8082112682524616046452",
            90405214,
          ),
          tokenizer: hf(
            ...MINILM,
            "tokenizer.json",
            "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
            466247,
          ),
          config: hf(
            ...MINILM,
            "config.json",
            "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
            612,
          ),
        },
        pooling: "mean",
        normalize: true,
        max_tokens: 256,
      }],
    },
    {
      id: "bge-small-en-v1.5",
      task: "embed",
      name: "BGE small en v1.5",
      description: "Small English embeddings, 384 dims, CLS pooling, 512-token inputs (ONNX, f32).",
      default_for_task: false,
      upstream: { hf_repo: BGE_SMALL[0], revision: BGE_SMALL[1] },
      dims: 384,
      backends: [{
        backend: "ort",
        files: {
          model: hf(
            ...BGE_SMALL,
            "onnx/model.onnx",
            "828e1496d7fabb79cfa4dcd84fa38625c0d3d21da474a00f08db0f559940cf35",
            133093490,
          ),
          tokenizer: hf(
            ...BGE_SMALL,
            "tokenizer.json",
            "d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66",
            711396,
          ),
          config: hf(
            ...BGE_SMALL,
            "config.json",
            "094f8e891b932f2000c92cfc663bac4c62069f5d8af5b5278c4306aef3084750",
            743,
          ),
        },
        pooling: "cls",
        normalize: true,
        max_tokens: 512,
        // The model card's query instruction for retrieval (passages are embedded bare); its
        // config_sentence_transformers.json carries no prompts.
        prompts: {
          prompts: { query: "Represent this sentence for searching relevant passages: " },
        },
      }],
    },
    {
      id: "qwen3-embedding-0.6b",
      task: "embed",
      name: "Qwen3 Embedding 0.6B",
      description:
        "Multilingual text embeddings, 1024 dims, last-token pooling (GGUF Q8_0 on llama.cpp).",
      default_for_task: false,
      upstream: { hf_repo: QWEN3_EMBED[0], revision: QWEN3_EMBED[1] },
      dims: 1024,
      // The model card: MRL support, "user-defined output dimensions ranging from 32 to 1024";
      // the usual widths of that range.
      matryoshka_dims: [32, 64, 128, 256, 512, 768, 1024],
      backends: [{
        backend: "llama",
        files: {
          model: hf(
            ...QWEN3_EMBED_GGUF,
            "Qwen3-Embedding-0.6B-Q8_0.gguf",
            "06507c7b42688469c4e7298b0a1e16deff06caf291cf0a5b278c308249c3e439",
            639150592,
          ),
        },
        pooling: "last_token",
        normalize: true,
        max_tokens: 8192,
        // Qwen/Qwen3-Embedding-0.6B config_sentence_transformers.json: `prompts` as published
        // (no space after "Query:"; documents bare), `default_prompt_name: null`.
        prompts: {
          prompts: {
            query:
              "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:",
            document: "",
          },
        },
      }],
    },
    {
      id: "gte-reranker-modernbert-base",
      task: "rerank",
      name: "GTE ModernBERT reranker base",
      description:
        "English cross-encoder reranker, one relevance logit per (query, document) (ONNX, f32).",
      default_for_task: true,
      upstream: { hf_repo: GTE_RERANK[0], revision: GTE_RERANK[1] },
      dims: 1,
      backends: [{
        backend: "ort",
        files: {
          model: hf(
            ...GTE_RERANK,
            "onnx/model.onnx",
            "c6d3226502addbcd4d2cf273802957ebf8a2a6bf94037dcb9b1d95bfc01e5d93",
            598803940,
          ),
          tokenizer: hf(
            ...GTE_RERANK,
            "tokenizer.json",
            "2aea6ff4701d063e7e029b6be695a1659f2caaa2ae4fb0e8b18285818271becd",
            3583499,
          ),
          config: hf(
            ...GTE_RERANK,
            "config.json",
            "c9316ff715158502dad782f35454eee18de984160618dc30afe7508feb46b7ce",
          ),
        },
        pooling: "cls",
        normalize: false,
        max_tokens: 8192,
      }],
    },
    {
      id: "ms-marco-minilm-l-6-v2",
      task: "rerank",
      name: "MS MARCO MiniLM L-6 v2 cross-encoder",
      description: "Small English cross-encoder reranker, 512-token pairs (ONNX, f32).",
      default_for_task: false,
      upstream: { hf_repo: MS_MARCO[0], revision: MS_MARCO[1] },
      dims: 1,
      backends: [{
        backend: "ort",
        files: {
          model: hf(
            ...MS_MARCO,
            "onnx/model.onnx",
            "5d3e70fd0c9ff14b9b5169a51e957b7a9c74897afd0a35ce4bd318150c1d4d4a",
            91011230,
          ),
          tokenizer: hf(
            ...MS_MARCO,
            "tokenizer.json",
            "d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66",
            711396,
          ),
          config: hf(
            ...MS_MARCO,
            "config.json",
            "380e02c93f431831be65d99a4e7e5f67c133985bf2e77d9d4eba46847190bacc",
            794,
          ),
        },
        pooling: "cls",
        normalize: false,
        max_tokens: 512,
      }],
    },
    {
      id: "qwen3-reranker-0.6b",
      task: "rerank",
      name: "Qwen3 Reranker 0.6B",
      description: "Multilingual reranker scored by the yes/no logits of a causal LM.",
      default_for_task: false,
      upstream: { hf_repo: QWEN3_RERANK[0], revision: QWEN3_RERANK[1] },
      dims: 1,
      backends: [],
      no_backend_reason:
        "no GGUF of it is pinned by digest in this build (none could be fetched and verified here): load a GGUF of it (llama.cpp's converter writes its yes/no head and prompt template) from a local path with engine 'ffi' and task 'rerank'",
    },
    {
      id: "qwen2.5-0.5b-instruct",
      task: "generate",
      name: "Qwen2.5 0.5B Instruct",
      description:
        "Small multilingual instruct model for short generations (GGUF Q8_0 on llama.cpp).",
      default_for_task: true,
      upstream: { hf_repo: QWEN25_GGUF[0], revision: QWEN25_GGUF[1] },
      dims: 0,
      backends: [generator(hf(
        ...QWEN25_GGUF,
        "qwen2.5-0.5b-instruct-q8_0.gguf",
        "ca59ca7f13d0e15a8cfa77bd17e65d24f6844b554a7b6c12e07a5f89ff76844e",
        675710816,
      ))],
    },
    {
      id: "qwen3-0.6b",
      task: "generate",
      name: "Qwen3 0.6B",
      description: "Small multilingual model with a thinking mode (GGUF Q8_0 on llama.cpp).",
      default_for_task: false,
      upstream: { hf_repo: QWEN3_GGUF[0], revision: QWEN3_GGUF[1] },
      dims: 0,
      backends: [generator(hf(
        ...QWEN3_GGUF,
        "Qwen3-0.6B-Q8_0.gguf",
        "9465e63a22add5354d9bb4b99e90117043c7124007664907259bd16d043bb031",
        639446688,
      ))],
    },
    {
      id: "smollm2-360m-instruct",
      task: "generate",
      name: "SmolLM2 360M Instruct",
      description: "Tiny English instruct model (GGUF Q8_0 on llama.cpp).",
      default_for_task: false,
      upstream: { hf_repo: SMOLLM2_GGUF[0], revision: SMOLLM2_GGUF[1] },
      dims: 0,
      backends: [generator(hf(
        ...SMOLLM2_GGUF,
        "smollm2-360m-instruct-q8_0.gguf",
        "48ab3034d0dd401fbc721eb1df3217902fee7dab9078992d66431f09b7750201",
        386404992,
      ))],
    },
  ] satisfies CatalogModel[],
);

/** Lane id of a catalog model's backend: `<catalog_id>-<backend>`. */
export function catalogLaneId(model: Pick<CatalogModel, "id">, backend: string): string {
  return `${model.id}-${backend}`;
}

/** The catalog model with this id, or undefined. */
export function catalogModel(
  id: string,
  catalog: readonly CatalogModel[] = CATALOG,
): CatalogModel | undefined {
  return catalog.find((m) => m.id === id);
}

/** The files of a backend, in a fixed order (model, tokenizer, config). */
export function backendFiles(
  b: CatalogBackend,
): [role: "model" | "tokenizer" | "config", f: CatalogFile][] {
  const out: [role: "model" | "tokenizer" | "config", f: CatalogFile][] = [[
    "model",
    b.files.model,
  ]];
  if (b.files.tokenizer) out.push(["tokenizer", b.files.tokenizer]);
  if (b.files.config) out.push(["config", b.files.config]);
  return out;
}

/**
 * `manifest_digest` of a catalog model: JCS-SHA256 of its id, upstream and every backend's pinned
 * files and serving facts. Changes whenever anything that shapes a download or a lane changes.
 */
export function manifestDigest(model: CatalogModel): string {
  return jcsSha256(
    {
      id: model.id,
      task: model.task,
      upstream: model.upstream,
      dims: model.dims,
      backends: model.backends as unknown as JsonValue,
    } as JsonValue,
  );
}

/** Why a backend cannot be downloaded or run here, or undefined when it can. */
export function backendUnrunnableReason(
  b: CatalogBackend,
  available: { llama: boolean },
): string | undefined {
  if (b.backend === "llama" && !available.llama) return "llama_engine_unavailable";
  for (const [, f] of backendFiles(b)) {
    if (f.sha256 === null || !/^[0-9a-f]{40}$/.test(f.revision)) return "digest_unverified";
  }
  return undefined;
}

/** The download URL of a pinned file: `<endpoint>/<repo>/resolve/<revision>/<path>` (Hugging Face's layout). */
export function fileUrl(f: CatalogFile, endpoint = "https://huggingface.co"): string {
  return `${endpoint.replace(/\/+$/, "")}/${f.hf_repo}/resolve/${f.revision}/${f.path}`;
}

/**
 * Upstream int8 files of catalog models (`ck-synapse pull --quant int8 ID`), by catalog id:
 * onnxruntime's dynamic quantization published beside the fp32 export (`onnx/model_qint8_*.onnx`:
 * U8S8, int8 weights), served with the model's `ort` backend's tokenizer, config and serving
 * facts as its own lane (`quant: "int8"`). Kept apart from {@link CATALOG} so no catalog model's
 * `manifest_digest` or lane changes.
 *
 * A model is listed only where public sources state the file's SHA-256 at a commit: the AVX-512
 * VNNI files of all-MiniLM-L6-v2 and bge-small-en-v1.5 (a public model-selection report lists
 * repository, commit and SHA-256; other public pin lists give the same digests with their sizes,
 * 23,026,053 and 34,118,638 bytes, the MiniLM digest also for the repository's `qint8_arm64` and
 * `qint8_avx512` files). Size and digest are both checked. The pins could not be checked against
 * Hugging Face from the machines this build was made on. Every other catalog model, and the AVX2 (`quint8`)
 * variants, have no int8 pin here (no public digest was found): `pull --quant int8 ID` then
 * quantizes the fp32 file with Synapse's own quantizer once its pull is done.
 */
export const CATALOG_INT8_FILES: Readonly<Record<string, CatalogFile>> = Object.freeze({
  "all-minilm-l6-v2": hf(
    MINILM[0],
    "d83dd3760b5bfe921f2fe125446b17bf0b7eda8c",
    "onnx/model_qint8_avx512_vnni.onnx",
    "4278337fd0ff3c68bfb6291042cad8ab363e1d9fbc43dcb499fe91c871902474",
    23_026_053,
  ),
  "bge-small-en-v1.5": hf(
    BGE_SMALL[0],
    "07e27b8edc19a66f020db6906126054f190f7284",
    "onnx/model_qint8_avx512_vnni.onnx",
    "c7663636f9d9d2660b1e5eb5ac3432109fa27a70d89a548dae8beae7b661890b",
    34_118_638,
  ),
});
