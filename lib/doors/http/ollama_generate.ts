/**
 * Ollama's generation API: `POST /api/generate`, `POST /api/chat` (mappings onto one
 * `microllm.oneshot` call through the dispatcher), `POST /api/show` (onto `model.info`) and
 * `GET /api/ps` (onto `models.list`). Nothing here generates, renders or reads a file: the door maps
 * Ollama's JSON onto the operations' params and their results (or the op's `onText` pieces) back
 * to Ollama's JSON or NDJSON stream.
 *
 * - **`stream` defaults to true**, as in Ollama: NDJSON (`application/x-ndjson`), one object per
 *   line: `{model, created_at, response | message: {role, content}, done: false}` pieces, then one
 *   `done: true` object with `done_reason` (`stop`, `length`), the durations in nanoseconds and
 *   the counts, and Synapse's facts under `synapse`. The pieces are the text the operation hands
 *   its `onText` as it becomes final, so they join to exactly the non-streamed text. Until the
 *   first piece nothing is answered, so a refusal is a plain `{error}` with its status; after it
 *   a failure is a last `{error}` line. A client that goes away cancels the generation.
 * - **`/api/generate`** renders `[system?, user: prompt]` through the model's chat template
 *   (Synapse's `role: content` fallback for a model without one; the answer says which, as
 *   Ollama applies the model's template); `raw: true` sends the prompt as it is (with `system`,
 *   `template` or `context` refused, as Ollama refuses them). `template`, `suffix`, a non-empty
 *   `context` or `images`, `think` (true or a level), `logprobs`, `truncate: true` and
 *   `_debug_render_only` are refused by name.
 * - **`/api/chat`** messages: `system`, `user`, `assistant`, and `developer` (→ `system`); the
 *   `tool` role, `tool_calls`, `tool_name`, `images`, `thinking` and non-empty `tools` are refused
 *   naming the field.
 * - **`format`**: `"json"` → `response_format {type: "json_object"}`; a JSON schema → `{type:
 *   "json_schema", json_schema: {name: "ollama", schema}}`.
 * - **`options`** ({@link mapOptions}): `num_predict` → `max_tokens` (-1, -2 or absent: the
 *   service's `microllm_max_tokens`), `stop`, `num_ctx` → `max_context_tokens` (below the model's
 *   context a call that does not fit is refused naming `options.num_ctx`; at or above it nothing
 *   changes), and the sampling options under their own names (`temperature`, `top_k`, `top_p`,
 *   `min_p`, `seed` — Ollama's `-1` is "pick one" —, `repeat_penalty`, `repeat_last_n`,
 *   `frequency_penalty`, `presence_penalty`). `temperature` absent or 0 is greedy (Ollama's own
 *   default is 0.8: Synapse stays greedy unless asked); the answer's `synapse.sampling` reports
 *   every value applied, and the seed a sampled answer used. Samplers the engine lacks
 *   (`typical_p`, `tfs_z`, `mirostat`) are refused by name when on and listed as ignored when
 *   off; runner options (threads, GPU layers, mmap, batch, …) and sampler options greedy decoding
 *   did not read are listed in `synapse.ignored_options`, unknown names in
 *   `synapse.unknown_options`: nothing is dropped silently.
 * - **`keep_alive`** is accepted and listed in `synapse.ignored_fields` (a model stays loaded while
 *   it is configured). A call with no prompt (no messages) is Ollama's warm-up: the model is
 *   checked as a generation would check it (`model.info` with task `generate`) and the answer is
 *   `done_reason: "load"`; with `keep_alive: 0` it is Ollama's unload request, answered
 *   `done_reason: "unload"` without unloading (`synapse.unloaded: false`).
 * - Model names: `m:latest` names `m`; the answers' `model` is the name the client sent, the model
 *   that served it is `synapse.model_id`. An unknown model is 404 `{error: "model 'x' not
 *   found"}`, as Ollama answers.
 *
 * @module
 */
import { z } from "zod";
import { SynapseError } from "../../contract/errors.ts";
import { parseDoorParams, wellFormedName } from "../../contract/schemas.ts";
import type { ResponseFormat } from "../../contract/schemas.ts";
import type { GenerationStart } from "../../ops/context.ts";
import type { RequestFacts } from "../../ops/door_backend.ts";
import type { OpOutcome } from "../../ops/dispatcher.ts";
import type { MicrollmResult } from "../../ops/microllm.ts";
import type { ModelInfoResult } from "../../ops/model_info.ts";
import type { ModelsListResult } from "../../ops/models.ts";
import {
  type AdapterAnswer,
  type AdapterIo,
  type AdapterRoute,
  callOp,
  doorMessage,
  doorStatus,
} from "./_adapter.ts";
import { openAiFinishReason } from "./openai_completions.ts";

/** The NDJSON content type of a streamed answer. */
export const NDJSON_TYPE = "application/x-ndjson";

/**
 * `expires_at` of a loaded model in `/api/ps`: what Ollama answers for a model kept loaded
 * forever (`keep_alive: -1`, a duration of 2^63-1 ns from now), which its CLI prints "Forever".
 */
const FOREVER_MS = 9_223_372_036_854;

const nullish = <T extends z.ZodType>(t: T) => t.nullable().optional();

/** Fields both generation routes take. */
const COMMON = {
  model: wellFormedName(),
  stream: nullish(z.boolean()),
  format: nullish(z.union([z.string(), z.record(z.string(), z.unknown())])),
  keep_alive: nullish(z.union([z.string(), z.number()])),
  options: nullish(z.record(z.string(), z.unknown())),
  think: nullish(z.union([z.boolean(), z.string()])),
  truncate: nullish(z.boolean()),
  shift: nullish(z.boolean()),
  _debug_render_only: nullish(z.boolean()),
  logprobs: nullish(z.boolean()),
  top_logprobs: nullish(z.number().int()),
};

/** `POST /api/generate` (Ollama's `GenerateRequest`); other fields are refused naming them. */
const GenerateRequest = z.strictObject({
  ...COMMON,
  prompt: nullish(z.string()),
  suffix: nullish(z.string()),
  system: nullish(z.string()),
  template: nullish(z.string()),
  context: nullish(z.array(z.number().int())),
  raw: nullish(z.boolean()),
  images: nullish(z.array(z.string())),
});

/** One message of `POST /api/chat` (Ollama's `Message`). */
const OllamaMessage = z.strictObject({
  role: z.string(),
  content: nullish(z.string()),
  thinking: nullish(z.string()),
  images: nullish(z.array(z.string())),
  tool_calls: nullish(z.array(z.unknown())),
  tool_name: nullish(z.string()),
  tool_call_id: nullish(z.string()),
});

/** `POST /api/chat` (Ollama's `ChatRequest`). */
const ChatRequest = z.strictObject({
  ...COMMON,
  messages: nullish(z.array(OllamaMessage)),
  tools: nullish(z.array(z.unknown())),
});

/** `POST /api/show` (Ollama's `ShowRequest`: `model`, or the older `name`). */
const ShowRequest = z.strictObject({
  model: nullish(wellFormedName()),
  name: nullish(wellFormedName()),
  system: nullish(z.string()),
  template: nullish(z.string()),
  verbose: nullish(z.boolean()),
  options: nullish(z.record(z.string(), z.unknown())),
});

/** Which generation route. */
type GenDoor = "/api/generate" | "/api/chat";

/**
 * The route of an Ollama generation path (`/api/generate`, `/api/chat`, `/api/show`, `/api/ps`),
 * or undefined.
 *
 * @param path The request path.
 */
export function ollamaGenerateRoute(path: string): AdapterRoute | undefined {
  if (path === "/api/generate" || path === "/api/chat") {
    return {
      op: "microllm.oneshot",
      method: "POST",
      serve: (io) => serveGeneration(io, path),
      error: ollamaGenerationError,
    };
  }
  if (path === "/api/show") {
    return { op: "model.info", method: "POST", serve: serveShow, error: ollamaGenerationError };
  }
  if (path === "/api/ps") {
    return { op: "models.list", method: "GET", serve: servePs, error: ollamaGenerationError };
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// Mapping a request

/** A mapped generation request. */
interface Mapped {
  door: GenDoor;
  /** The model name as the client sent it (the answers' `model`). */
  name: string;
  /** The model id it names (`m:latest` → `m`). */
  modelId: string;
  /** `microllm.oneshot` params; undefined for a warm-up (no prompt, no messages). */
  params: Record<string, unknown> | undefined;
  /** The warm-up is Ollama's unload request (`keep_alive: 0`). */
  unload: boolean;
  stream: boolean;
  /** Request fields accepted with no effect (`synapse.ignored_fields`). */
  ignoredFields: string[];
  /** Options accepted with no effect (`synapse.ignored_options`). */
  ignoredOptions: string[];
  /** Option names Ollama does not know either (`synapse.unknown_options`). */
  unknownOptions: string[];
  constrained?: "json_object" | "json_schema";
  /** The op's field names in the request's terms (`max_tokens` → `options.num_predict`, …). */
  rename: Record<string, string>;
}

/** `m:latest` names `m`: Synapse models have no tags (any other tag stays part of the id). */
function modelIdOf(name: string): string {
  return name.endsWith(":latest") ? name.slice(0, -":latest".length) : name;
}

function refusal(field: string, message: string, more: Record<string, unknown> = {}): SynapseError {
  return new SynapseError("invalid_request", message, {
    channel: true,
    details: { field, ...more },
  });
}

/** True for a `keep_alive` of zero (`0`, `"0"`, `"0s"`, `"0m"`, …): Ollama's unload request. */
function isZeroDuration(v: string | number | null | undefined): boolean {
  if (typeof v === "number") return v === 0;
  if (typeof v === "string") return /^0+(\.0+)?(ns|us|µs|ms|s|m|h)?$/.test(v.trim());
  return false;
}

/** Maps `format` onto `response_format`: `"json"`, a JSON schema, or `""` (none). */
function formatOf(format: string | Record<string, unknown> | null | undefined) {
  if (format === undefined || format === null || format === "") return undefined;
  if (typeof format === "string") {
    if (format !== "json") {
      throw refusal(
        "format",
        `Cannot honour format ${
          JSON.stringify(format)
        }: format is "json" or a JSON schema (an object)`,
        { reason: "unsupported_format" },
      );
    }
    return { type: "json_object" } satisfies ResponseFormat;
  }
  return {
    type: "json_schema",
    json_schema: { name: "ollama", schema: format },
  } satisfies ResponseFormat;
}

/** Refuses what both routes would ask for and Synapse does not do. */
function refuseCommon(p: z.infer<typeof GenerateRequest> | z.infer<typeof ChatRequest>): void {
  if (p.think === true || typeof p.think === "string") {
    throw refusal(
      "think",
      `Cannot honour think ${
        JSON.stringify(p.think)
      }: Synapse's models do not think before answering (no reasoning mode); omit think or send false`,
      { reason: "thinking_not_supported" },
    );
  }
  if (p.logprobs === true) {
    throw refusal(
      "logprobs",
      "Cannot honour logprobs: Synapse does not return log-probabilities; omit logprobs",
      { reason: "logprobs_not_supported" },
    );
  }
  if (p.top_logprobs !== undefined && p.top_logprobs !== null && p.top_logprobs !== 0) {
    throw refusal(
      "top_logprobs",
      "Cannot honour top_logprobs: Synapse does not return log-probabilities; omit top_logprobs",
      { reason: "logprobs_not_supported" },
    );
  }
  if (p.truncate === true) {
    throw refusal(
      "truncate",
      "Cannot honour truncate true: Synapse never cuts a prompt (one that does not fit the context is refused); omit truncate or send false",
      { reason: "truncation_not_supported" },
    );
  }
  if (p._debug_render_only === true) {
    throw refusal(
      "_debug_render_only",
      "Cannot honour _debug_render_only: Synapse does not answer the rendered template instead of a generation; omit it",
      { reason: "debug_render_not_supported" },
    );
  }
}

/** The request fields accepted with no effect, in a fixed order. */
function ignoredFieldsOf(p: Record<string, unknown>): string[] {
  const out: string[] = [];
  if (p.keep_alive !== undefined && p.keep_alive !== null) out.push("keep_alive");
  if (p.think === false) out.push("think");
  if (p.truncate === false) out.push("truncate");
  if (p.shift !== undefined && p.shift !== null) out.push("shift");
  if (p.logprobs === false) out.push("logprobs");
  if (p.top_logprobs === 0) out.push("top_logprobs");
  if (p._debug_render_only === false) out.push("_debug_render_only");
  return out;
}

function mapRequest(door: GenDoor, body: unknown, limit: number): Mapped {
  const chat = door === "/api/chat";
  const p = chat
    ? parseDoorParams(door, ChatRequest, body)
    : parseDoorParams(door, GenerateRequest, body);
  refuseCommon(p);
  const ignoredFields = ignoredFieldsOf(p as Record<string, unknown>);
  const name = p.model;
  const modelId = modelIdOf(name);
  const base = {
    door,
    name,
    modelId,
    stream: p.stream !== false,
    ignoredFields,
  };
  const rename: Record<string, string> = { model_id: "model" };
  let input: Record<string, unknown> | undefined;
  if (chat) {
    const c = p as z.infer<typeof ChatRequest>;
    if (c.tools != null && c.tools.length > 0) {
      throw refusal(
        "tools",
        "Cannot honour tools: Synapse does not call tools (function calling is not supported); omit tools",
        { reason: "tools_not_supported" },
      );
    }
    if (c.tools != null) ignoredFields.push("tools");
    const messages = (c.messages ?? []).map((m, i) => chatMessage(m, i));
    if (messages.length > 0) input = { messages };
    rename.prompt = "messages";
  } else {
    const g = p as z.infer<typeof GenerateRequest>;
    for (
      const [field, value, why] of [
        [
          "template",
          g.template,
          "Synapse renders with the model's own chat template; send raw: true with a prompt you templated yourself",
        ],
        ["suffix", g.suffix, "insertion (fill-in-the-middle) is not supported"],
      ] as const
    ) {
      if (value !== undefined && value !== null && value !== "") {
        throw refusal(field, `Cannot honour ${field}: ${why}; omit ${field}`, {
          reason: `${field}_not_supported`,
        });
      }
    }
    // Ollama's `context` (the token ids of an earlier answer), by another name here.
    const { context: earlier } = g;
    if (earlier != null && earlier.length > 0) {
      throw refusal(
        "context",
        "Cannot honour context: Synapse keeps no conversation between calls (context is deprecated in Ollama too); send the conversation to /api/chat as messages",
        { reason: "context_not_supported" },
      );
    }
    if (g.images != null && g.images.length > 0) {
      throw refusal(
        "images",
        "Cannot honour images: Synapse's generation models read text only; omit images",
        { reason: "images_not_supported" },
      );
    }
    const system = g.system ?? "";
    const prompt = g.prompt ?? "";
    if (g.raw === true) {
      if (system !== "") {
        throw refusal(
          "system",
          "Cannot honour system with raw: true: raw mode does not support template, system, or context; put the system text in the prompt",
          { reason: "raw_with_system" },
        );
      }
      if (prompt !== "") input = { prompt };
    } else if (prompt !== "") {
      // The model's template over the system text and the prompt, as Ollama renders a generate.
      input = {
        messages: [
          ...(system === "" ? [] : [{ role: "system", content: system }]),
          { role: "user", content: prompt },
        ],
      };
      rename["messages"] = "prompt";
      rename["messages.0.content"] = system === "" ? "prompt" : "system";
      if (system !== "") rename["messages.1.content"] = "prompt";
    }
  }
  const format = formatOf(p.format);
  const opts = mapOptions(p.options ?? {});
  Object.assign(rename, opts.rename);
  if (input === undefined) {
    // A warm-up (or unload) call: no generation, so nothing else of the request applies.
    return {
      ...base,
      params: undefined,
      unload: isZeroDuration(p.keep_alive),
      ignoredOptions: opts.ignored,
      unknownOptions: opts.unknown,
      rename,
    };
  }
  const needsMax = "prompt" in input;
  const maxTokens = opts.maxTokens ?? (needsMax ? limit : undefined);
  const params: Record<string, unknown> = {
    ...input,
    model: modelId,
    ...(maxTokens === undefined ? {} : { max_tokens: maxTokens }),
    ...(format === undefined ? {} : { response_format: format }),
    ...opts.params,
  };
  return {
    ...base,
    params,
    unload: false,
    ignoredOptions: opts.ignored,
    unknownOptions: opts.unknown,
    rename: { ...rename, response_format: "format" },
    ...(format === undefined ? {} : { constrained: format.type }),
  };
}

/** One Ollama chat message as `microllm.oneshot`'s: refuses what cannot be rendered, by name. */
function chatMessage(
  m: z.infer<typeof OllamaMessage>,
  i: number,
): { role: "system" | "user" | "assistant"; content: string } {
  // Ollama reads roles case-insensitively.
  const role = m.role.toLowerCase();
  const at = `messages.${i}`;
  if (role === "tool") {
    throw refusal(
      `${at}.role`,
      `Cannot render message ${i}: the tool role carries a tool's result, and Synapse does not call tools`,
      { reason: "tools_not_supported" },
    );
  }
  if (role !== "system" && role !== "user" && role !== "assistant" && role !== "developer") {
    throw refusal(
      `${at}.role`,
      `Cannot render message ${i}: role ${
        JSON.stringify(m.role)
      } is not one of system, user, assistant (or developer)`,
      { reason: "unknown_role" },
    );
  }
  for (
    const [field, value] of [
      ["tool_calls", m.tool_calls],
      ["tool_name", m.tool_name],
      ["tool_call_id", m.tool_call_id],
    ] as const
  ) {
    if (value !== undefined && value !== null && value.length > 0) {
      throw refusal(
        `${at}.${field}`,
        `Cannot render message ${i}: it carries ${field}, and Synapse does not call tools; send the text as content`,
        { reason: "tools_not_supported" },
      );
    }
  }
  if (m.images != null && m.images.length > 0) {
    throw refusal(
      `${at}.images`,
      `Cannot render message ${i}: Synapse's generation models read text only; omit images`,
      { reason: "images_not_supported" },
    );
  }
  if (m.thinking != null && m.thinking !== "") {
    throw refusal(
      `${at}.thinking`,
      `Cannot render message ${i}: Synapse's models do not think (no reasoning mode), so a thinking text has no place in the prompt; omit it`,
      { reason: "thinking_not_supported" },
    );
  }
  // A developer message is a system message to the templates (they know system/user/assistant).
  return { role: role === "developer" ? "system" : role, content: m.content ?? "" };
}

// ---------------------------------------------------------------------------------------------
// Options

/**
 * Ollama's runner options: how its own runner loads and runs a model (threads, GPU layers,
 * memory mapping, batch). They have no meaning here and are listed in `synapse.ignored_options`.
 */
const RUNNER_OPTIONS: ReadonlySet<string> = new Set([
  "num_keep",
  "num_batch",
  "num_gpu",
  "main_gpu",
  "low_vram",
  "f16_kv",
  "logits_all",
  "vocab_only",
  "use_mmap",
  "use_mlock",
  "embedding_only",
  "num_thread",
  "numa",
  "num_gqa",
  "rope_frequency_base",
  "rope_frequency_scale",
  "draft_num_predict",
  "penalize_newline",
]);

/**
 * Ollama's sampling options that `microllm.oneshot` takes under the same names: `temperature` 0
 * or absent is greedy, above 0 sampled with `top_k`, `top_p`, `min_p` and `seed`; the penalties
 * apply in both modes (docs/generation.md "Sampling").
 */
const OP_SAMPLING: ReadonlySet<string> = new Set([
  "temperature",
  "top_k",
  "top_p",
  "min_p",
  "seed",
  "repeat_penalty",
  "repeat_last_n",
  "frequency_penalty",
  "presence_penalty",
]);

/**
 * Ollama's samplers the engine here does not have, with the value at which each is off: off (or
 * under greedy decoding, which reads none of them) they change nothing and are listed as ignored;
 * on, they are refused by name. `mirostat` replaces the sampler, so it is refused whenever it is
 * on; its `mirostat_tau` / `mirostat_eta` then have nothing to tune.
 */
const UNSERVED_SAMPLERS: Readonly<Record<string, number>> = {
  typical_p: 1,
  tfs_z: 1,
  mirostat: 0,
  mirostat_tau: Number.NaN,
  mirostat_eta: Number.NaN,
};

/** What `options` maps to. */
interface MappedOptions {
  /** `num_predict` → `max_tokens` (undefined: the caller's default). */
  maxTokens: number | undefined;
  /** Other `microllm.oneshot` params (`stop`, `max_context_tokens`). */
  params: Record<string, unknown>;
  ignored: string[];
  unknown: string[];
  /** The op's field names in the request's terms. */
  rename: Record<string, string>;
}

/**
 * Maps Ollama's `options` onto `microllm.oneshot` params (module doc). Values are checked by
 * type, as Ollama checks them, naming `options.<name>`.
 *
 * @throws {SynapseError} channel `invalid_request` `{field: "options.<name>", reason}`.
 */
export function mapOptions(options: Record<string, unknown>): MappedOptions {
  const out: MappedOptions = {
    maxTokens: undefined,
    params: {},
    ignored: [],
    unknown: [],
    rename: {},
  };
  const num = (key: string, v: unknown, integer = false): number => {
    if (typeof v !== "number" || !Number.isFinite(v) || (integer && !Number.isInteger(v))) {
      throw refusal(
        `options.${key}`,
        `Cannot read options.${key}: it must be ${integer ? "an integer" : "a number"}`,
        { reason: "invalid_type" },
      );
    }
    return v;
  };
  // Greedy unless temperature is above 0: samplers that greedy decoding does not read are inert.
  const temperature = options.temperature;
  const sampled = typeof temperature === "number" && temperature > 0;
  for (const [key, v] of Object.entries(options)) {
    if (v === null) continue; // Ollama skips a null option
    if (key === "num_predict") {
      const n = num(key, v, true);
      if (n === -1 || n === -2) continue; // "no limit" / "fill the context": the service's limit
      if (n < 1) {
        throw refusal(
          "options.num_predict",
          `Cannot generate ${n} tokens: options.num_predict is a positive number of tokens, or -1 for the service's limit`,
          { reason: "invalid_value", value: n },
        );
      }
      out.maxTokens = n;
      out.rename.max_tokens = "options.num_predict";
      continue;
    }
    if (key === "stop") {
      const stops = typeof v === "string" ? [v] : v;
      if (!Array.isArray(stops) || !stops.every((s) => typeof s === "string")) {
        throw refusal("options.stop", "Cannot read options.stop: it must be a list of strings", {
          reason: "invalid_type",
        });
      }
      const kept = (stops as string[]).filter((s) => s !== "");
      if (kept.length > 0) out.params.stop = kept;
      out.rename.stop = "options.stop";
      continue;
    }
    if (key === "num_ctx") {
      out.params.max_context_tokens = num(key, v, true);
      if ((out.params.max_context_tokens as number) < 1) {
        throw refusal("options.num_ctx", "Cannot read options.num_ctx: it must be at least 1", {
          reason: "invalid_value",
        });
      }
      out.rename.max_context_tokens = "options.num_ctx";
      continue;
    }
    if (OP_SAMPLING.has(key)) {
      const n = num(key, v, key === "top_k" || key === "seed" || key === "repeat_last_n");
      // Ollama's seed -1 (its default) is "pick one": the service picks it and reports it.
      if (key === "seed" && n === -1) continue;
      out.params[key] = n;
      out.rename[key] = `options.${key}`;
      continue;
    }
    if (Object.hasOwn(UNSERVED_SAMPLERS, key)) {
      const n = num(key, v);
      const off = UNSERVED_SAMPLERS[key]!;
      const on = key === "mirostat" ? n !== off : sampled && !Number.isNaN(off) && n !== off;
      if (on) {
        throw refusal(
          `options.${key}`,
          `Cannot honour options.${key} ${n}: Synapse samples with temperature, top_k, top_p, min_p and seed, not ${key}; omit it${
            Number.isNaN(off) ? "" : ` or send ${off}`
          }`,
          { reason: "sampler_not_supported", value: n },
        );
      }
      out.ignored.push(key);
      continue;
    }
    if (RUNNER_OPTIONS.has(key)) out.ignored.push(key);
    else out.unknown.push(key);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Serving a generation

async function serveGeneration(io: AdapterIo, door: GenDoor): Promise<AdapterAnswer> {
  const started = performance.now();
  const backend = io.backend();
  const m = mapRequest(door, await io.body(), backend.microllmMaxTokens);
  if (m.params === undefined) return await warmUp(io, m);
  const params = { ...m.params, ...(io.routing ?? {}) };
  io.record.params = params;
  const timing = new Timing(started);
  if (!m.stream) {
    const { outcome, facts } = await backend.call("microllm.oneshot", params, {
      signal: io.signal,
      onStart: () => timing.start(),
      onTokens: () => timing.token(),
    });
    io.record.facts = facts;
    if (outcome.kind !== "result") return errorAnswer(inDoorTerms(outcome.error, m), m);
    const res = outcome.body.result as MicrollmResult;
    const body = finalObject(res, m, timing, res.text);
    return { status: 200, fingerprint: res.fingerprint, body };
  }
  return await serveStreamed(io, m, params, timing);
}

/** The durations of one generation, measured at the door from the op's hooks. */
class Timing {
  #started: number;
  #start: number | undefined;
  #firstToken: number | undefined;

  constructor(started: number) {
    this.#started = started;
  }

  /** The op has chosen the model (`onStart`): the queue and the prompt come next. */
  start(): void {
    this.#start ??= performance.now();
  }

  /** The worker sent ids (`onTokens`): the first time, the prompt has been read. */
  token(): void {
    this.#firstToken ??= performance.now();
  }

  /**
   * Ollama's metrics in nanoseconds: `total_duration` (the request), `load_duration` (0: models
   * are loaded before requests), `prompt_eval_duration` (from the start, less the queue, to the
   * first generated ids), `eval_duration` (from there to the end).
   */
  durations(res: MicrollmResult): Record<string, number> {
    const end = performance.now();
    const ns = (ms: number) => Math.max(0, Math.round(ms * 1e6));
    const start = this.#start ?? end;
    const first = this.#firstToken ?? end;
    return {
      total_duration: ns(end - this.#started),
      load_duration: 0,
      prompt_eval_count: res.n_prompt,
      prompt_eval_duration: ns(first - start - res.queue_time_ms),
      eval_count: res.n_gen,
      eval_duration: ns(end - first),
    };
  }
}

/**
 * The warm-up call (no prompt, no messages): the model is checked as a generation of it would be
 * (`model.info` with task `generate`: unknown, loading, failed or of another task is refused as
 * the generation would be), then answered as Ollama answers a load (or an unload).
 */
async function warmUp(io: AdapterIo, m: Mapped): Promise<AdapterAnswer> {
  const outcome = await callOp(io, "model.info", { model_id: m.modelId, task: "generate" });
  if (outcome.kind !== "result") return errorAnswer(inDoorTerms(outcome.error, m), m);
  const info = outcome.body.result as ModelInfoResult;
  const synapse: Record<string, unknown> = {
    model_id: info.model_id,
    fingerprint: info.fingerprint,
    state: info.state,
  };
  if (m.unload) {
    synapse.unloaded = false;
    synapse.note =
      "Synapse keeps a model loaded while it is configured: the unload request was answered and nothing was unloaded";
  }
  addListed(synapse, m);
  if (info.test_model) synapse.test_model = true;
  const reply = m.door === "/api/chat"
    ? { message: { role: "assistant", content: "" } }
    : { response: "" };
  return {
    status: 200,
    ...(info.fingerprint === null ? {} : { fingerprint: info.fingerprint }),
    body: {
      model: m.name,
      created_at: new Date().toISOString(),
      ...reply,
      done: true,
      done_reason: m.unload ? "unload" : "load",
      synapse,
    },
  };
}

function addListed(synapse: Record<string, unknown>, m: Mapped): void {
  if (m.ignoredFields.length > 0) synapse.ignored_fields = m.ignoredFields;
  if (m.ignoredOptions.length > 0) synapse.ignored_options = m.ignoredOptions;
  if (m.unknownOptions.length > 0) synapse.unknown_options = m.unknownOptions;
}

/** A piece of text in the door's shape (`done: false`), stamped when it is sent. */
function pieceObject(m: Mapped, text: string): Record<string, unknown> {
  return {
    model: m.name,
    created_at: new Date().toISOString(),
    ...(m.door === "/api/chat" ? { message: { role: "assistant", content: text } } : {
      response: text,
    }),
    done: false,
  };
}

/** The `done: true` object: the text (empty when streamed), the reason, metrics, `synapse`. */
function finalObject(
  res: MicrollmResult,
  m: Mapped,
  timing: Timing,
  text: string,
): Record<string, unknown> {
  const synapse: Record<string, unknown> = {
    fingerprint: res.fingerprint,
    model_id: res.model_id,
    module_generation: res.module_generation,
    provenance: res.provenance,
    finish_reason: res.finish_reason,
    n_prompt: res.n_prompt,
    n_gen: res.n_gen,
    queue_time_ms: res.queue_time_ms,
    inference_time_ms: res.inference_time_ms,
  };
  if (res.test_model) synapse.test_model = true;
  if (res.stop_matched !== undefined) synapse.stop_matched = res.stop_matched;
  if (m.constrained !== undefined) {
    synapse.response_format = m.constrained;
    synapse.json_complete = res.finish_reason === "grammar_complete";
    if (res.schema_notes !== undefined) synapse.schema_notes = res.schema_notes;
    if (!synapse.json_complete) {
      synapse.warning =
        `the generation ended (${res.finish_reason}) before the JSON was complete: the text is not valid JSON; raise options.num_predict`;
    }
  }
  if (res.chat_template !== undefined) {
    synapse.chat_template = res.chat_template;
    if (res.chat_template_reason !== undefined) {
      synapse.chat_template_reason = res.chat_template_reason;
    }
  }
  if (res.text_repair !== undefined) synapse.text_repair = res.text_repair;
  // Every sampling value applied (the seed a sampled answer used, to send back to replay it).
  synapse.sampling = res.sampling;
  if (m.stream) synapse.streamed = "tokens";
  // The sampler options greedy decoding did not read are ignored options too.
  const inert = (res.sampling.without_effect ?? []).filter((k) => !m.ignoredOptions.includes(k));
  addListed(synapse, { ...m, ignoredOptions: [...m.ignoredOptions, ...inert] });
  return {
    model: m.name,
    created_at: new Date().toISOString(),
    ...(m.door === "/api/chat" ? { message: { role: "assistant", content: text } } : {
      response: text,
    }),
    done: true,
    done_reason: openAiFinishReason(res.finish_reason),
    ...timing.durations(res),
    synapse,
  };
}

/**
 * `stream: true` (the default): calls `microllm.oneshot` with an `onText` hook and answers NDJSON
 * from the first final text on. Until then nothing is answered, so every refusal is still a
 * plain `{error}` with its status; a generation that ends before any text is answered whole, as
 * one `done: true` line.
 */
async function serveStreamed(
  io: AdapterIo,
  m: Mapped,
  params: Record<string, unknown>,
  timing: Timing,
): Promise<AdapterAnswer> {
  const early: string[] = [];
  let sink: ((text: string) => void) | undefined;
  const first = Promise.withResolvers<"part">();
  const onText = (text: string): void => {
    if (sink !== undefined) return sink(text);
    early.push(text);
    first.resolve("part");
  };
  let started: GenerationStart | undefined;
  const onStart = (start: GenerationStart): void => {
    started = start;
    timing.start();
  };
  // The body's reader going away (the client hung up mid-stream) stops the generation too.
  const gone = new AbortController();
  const called = io.backend().call("microllm.oneshot", params, {
    signal: AbortSignal.any([io.signal, gone.signal]),
    onStart,
    onText,
    onTokens: () => timing.token(),
  });
  const call: Promise<OpOutcome> = called.then((r) => r.outcome);
  const facts: Promise<RequestFacts | undefined> = called.then((r) => r.facts, () => undefined);
  const firstEvent = await Promise.race([call, first.promise]);
  const enc = new TextEncoder();
  const line = (o: unknown): Uint8Array => enc.encode(JSON.stringify(o) + "\n");
  if (firstEvent !== "part") {
    io.record.facts = await facts;
    if (firstEvent.kind !== "result") return errorAnswer(inDoorTerms(firstEvent.error, m), m);
    const res = firstEvent.body.result as MicrollmResult;
    const lines = [
      ...(res.text === "" ? [] : [line(pieceObject(m, res.text))]),
      line(finalObject(res, m, timing, "")),
    ];
    const settled = Promise.resolve();
    return {
      status: 200,
      fingerprint: res.fingerprint,
      body: undefined,
      stream: {
        body: new ReadableStream({
          start(c) {
            for (const l of lines) c.enqueue(l);
            c.close();
          },
        }),
        contentType: NDJSON_TYPE,
        settled,
      },
    };
  }
  const model = started;
  if (model === undefined) {
    gone.abort();
    throw new Error("microllm.oneshot sent text before onStart. This is a bug");
  }
  let open = true;
  const done = Promise.withResolvers<void>();
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      const write = (bytes: Uint8Array): void => {
        if (!open) return;
        try {
          controller.enqueue(bytes);
        } catch {
          open = false;
        }
      };
      sink = (text) => {
        if (text !== "") write(line(pieceObject(m, text)));
      };
      sink(early.splice(0).join(""));
      void call.then((outcome) => {
        if (outcome.kind !== "result") {
          write(line({ error: ollamaMessage(inDoorTerms(outcome.error, m), m) }));
        } else {
          const res = outcome.body.result as MicrollmResult;
          write(line(finalObject(res, m, timing, "")));
        }
      }, (err) => {
        write(line({ error: `Cannot finish the stream: ${String(err)}` }));
      }).finally(() => {
        if (open) {
          open = false;
          try {
            controller.close();
          } catch { /* already closed */ }
        }
        done.resolve();
      });
    },
    cancel() {
      open = false;
      gone.abort(new DOMException("the client went away", "AbortError"));
    },
  });
  const settled = facts.then((f) => {
    if (f !== undefined) io.record.facts = f;
  }).then(() => done.promise);
  return {
    status: 200,
    fingerprint: model.fingerprint,
    body: undefined,
    stream: { body, contentType: NDJSON_TYPE, settled },
  };
}

/**
 * An operation's error in the request's terms: its field renamed (`max_tokens` →
 * `options.num_predict`, `max_context_tokens` → `options.num_ctx`, `stop` → `options.stop`,
 * `response_format` → `format`, a rendered message → `prompt` / `system`), the message too.
 */
function inDoorTerms(e: SynapseError, m: Mapped): SynapseError {
  const field = e.details?.field;
  if (typeof field !== "string") {
    // A prompt longer than the model reads is named by the request's prompt field.
    if (e.code !== "sequence_too_long") return e;
    return new SynapseError(e.code, e.message, {
      details: { ...e.details, field: m.door === "/api/chat" ? "messages" : "prompt" },
      channel: e.channel,
      cause: e,
    });
  }
  const to = m.rename[field] ?? renamePrefix(field, m.rename);
  if (to === undefined || to === field) return e;
  // The name as a word of the message (`max_tokens`, not the tail of `microllm_max_tokens`).
  const escaped = field.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const word = new RegExp(`(?<![\\w.])${escaped}(?!\\w)`, "g");
  const message = e.message.replace(word, to);
  return new SynapseError(e.code, message, {
    details: { ...e.details, field: to },
    channel: e.channel,
    cause: e,
    ...(e.retryAfterMs === undefined ? {} : { retryAfterMs: e.retryAfterMs }),
  });
}

/** `response_format.json_schema.schema.x` → `format.x`. */
function renamePrefix(field: string, rename: Record<string, string>): string | undefined {
  const schema = "response_format.json_schema.schema";
  if (rename.response_format === "format" && field.startsWith(schema)) {
    return `format${field.slice(schema.length)}`;
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// /api/show and /api/ps

/** Ollama's `HumanNumber`: 4170048 → `4.17M`, 8000000000 → `8B`. */
export function humanNumber(n: number): string {
  const fmt = (v: number, decimals: number, unit: string) =>
    `${v === Math.floor(v) ? v.toFixed(0) : v.toFixed(decimals)}${unit}`;
  if (n >= 1e9) return fmt(n / 1e9, 1, "B");
  if (n >= 1e6) return fmt(n / 1e6, 2, "M");
  if (n >= 1e3) return `${(n / 1e3).toFixed(0)}K`;
  return String(n);
}

/** Ollama's capabilities of a model's task. */
function capabilitiesOf(task: ModelInfoResult["task"]): string[] {
  return task === "generate" ? ["completion"] : task === "embed" ? ["embedding"] : [];
}

/**
 * Serves `POST /api/show {model}` (or `name`): the model as Ollama describes one, from
 * `model.info` — `template` (the GGUF chat template, `""` without one), `details`, `model_info`
 * (the GGUF metadata; an ONNX model's architecture, context and width), `capabilities`
 * (`completion` or `embedding`), `parameters` and `modelfile` (what Synapse runs it with).
 * `verbose` answers the metadata's long arrays whole and the tensors.
 */
async function serveShow(io: AdapterIo): Promise<AdapterAnswer> {
  const p = parseDoorParams("/api/show", ShowRequest, await io.body());
  const name = p.model ?? p.name;
  if (name === undefined || name === null || name === "") {
    throw refusal("model", "Cannot show a model: send its name as model", {
      reason: "required",
    });
  }
  for (const field of ["system", "template"] as const) {
    const v = p[field];
    if (v !== undefined && v !== null && v !== "") {
      throw refusal(
        field,
        `Cannot honour ${field} in /api/show: Synapse has no Modelfile to override; omit ${field}`,
        { reason: `${field}_not_supported` },
      );
    }
  }
  if (p.options != null && Object.keys(p.options).length > 0) {
    throw refusal(
      "options",
      "Cannot honour options in /api/show: Synapse has no Modelfile to override; omit options",
      { reason: "options_not_supported" },
    );
  }
  const m = { name, rename: { model_id: "model" } } as Pick<Mapped, "name" | "rename">;
  const outcome = await callOp(io, "model.info", {
    model_id: modelIdOf(name),
    ...(p.verbose === true ? { verbose: true } : {}),
  });
  if (outcome.kind !== "result") return errorAnswer(outcome.error, m);
  const info = outcome.body.result as ModelInfoResult;
  const family = info.architecture ?? info.task;
  const context = info.context_tokens ?? info.max_tokens;
  const modelInfo: Record<string, unknown> = info.format === "gguf" ? { ...info.metadata } : {
    "general.architecture": family,
    [`${family}.context_length`]: context,
    ...(info.dims === undefined || info.task !== "embed"
      ? {}
      : { [`${family}.embedding_length`]: info.dims }),
  };
  const parameters = `${"num_ctx".padEnd(30)} ${context}`;
  const template = info.chat_template ?? "";
  const modelfile = [
    `# Modelfile generated by Synapse for "${info.model_id}"`,
    `FROM ${info.model_id}`,
    ...(template === "" ? [] : [`TEMPLATE """${template}"""`]),
    `PARAMETER num_ctx ${context}`,
    "",
  ].join("\n");
  const synapse: Record<string, unknown> = {
    model_id: info.model_id,
    task: info.task,
    engine: info.engine,
    state: info.state,
    fingerprint: info.fingerprint,
    chat_template: info.chat_template === undefined ? "fallback" : "gguf",
  };
  if (info.test_model) synapse.test_model = true;
  return {
    status: 200,
    ...(info.fingerprint === null ? {} : { fingerprint: info.fingerprint }),
    body: {
      modelfile,
      parameters,
      template,
      details: {
        parent_model: "",
        format: info.format,
        family,
        families: [family],
        parameter_size: info.parameter_count === undefined ? "" : humanNumber(info.parameter_count),
        quantization_level: (info.quant ?? info.dtype).toUpperCase(),
      },
      model_info: modelInfo,
      ...(info.tensors === undefined ? {} : { tensors: info.tensors }),
      capabilities: capabilitiesOf(info.task),
      modified_at: new Date(info.loaded_at_ms).toISOString(),
      synapse,
    },
  };
}

/**
 * Serves `GET /api/ps`: the loaded (ready) models as Ollama's running models `{models: [{name,
 * model, size, digest, details, expires_at, size_vram}]}`. `size` is the model
 * file's bytes, `size_vram` the same on a GPU build and 0 on CPU, `expires_at` what Ollama
 * answers for a model kept loaded forever (a model stays loaded while it is configured),
 * `details` as `/api/tags` gives them.
 */
async function servePs(io: AdapterIo): Promise<AdapterAnswer> {
  const outcome = await callOp(io, "models.list", {});
  if (outcome.kind !== "result") return ollamaGenerationError(outcome.error);
  const list = outcome.body.result as ModelsListResult;
  const expires = new Date(Date.now() + FOREVER_MS).toISOString();
  return {
    status: 200,
    body: {
      models: list.models.filter((m) => m.state === "ready").map((m) => {
        const size = m.artifact_bytes ?? 0;
        return {
          name: m.model_id,
          model: m.model_id,
          size,
          digest: m.fingerprints[0] ?? "",
          details: ollamaDetails(m),
          expires_at: expires,
          size_vram: m.device_class === "cpu" ? 0 : size,
          synapse: {
            task: m.task,
            device_class: m.device_class,
            ...(m.worker_rss_bytes === undefined ? {} : { worker_rss_bytes: m.worker_rss_bytes }),
            ...(m.test_model ? { test_model: true } : {}),
          },
        };
      }),
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Errors

/** The message of an error as Ollama words it: an unknown model is "model 'x' not found". */
function ollamaMessage(e: SynapseError, m?: Pick<Mapped, "name">): string {
  if (e.code === "unknown_model" && m !== undefined) return `model '${m.name}' not found`;
  return doorMessage(e);
}

function errorAnswer(e: SynapseError, m: Pick<Mapped, "name">): AdapterAnswer {
  const answer = ollamaGenerationError(e);
  const body = answer.body as Record<string, unknown>;
  const error = ollamaMessage(e, m);
  // Ollama's own words for an unknown model, and Synapse's (what is served) beside them.
  if (error !== body.error) body.message = body.error;
  body.error = error;
  return answer;
}

/**
 * Ollama's error body `{error, code, field?, retry_after_ms?}` with the status of the one status
 * table (an unknown model: 404, as Ollama).
 *
 * @param e The error.
 */
export function ollamaGenerationError(e: SynapseError): AdapterAnswer {
  const field = e.details?.field;
  return {
    status: doorStatus(e),
    error: e,
    body: {
      error: doorMessage(e),
      code: e.code,
      ...(typeof field === "string" ? { field: field === "model_id" ? "model" : field } : {}),
      ...(e.retryAfterMs === undefined ? {} : { retry_after_ms: e.retryAfterMs }),
    },
  };
}

/**
 * Ollama's `details` of a model row in `/api/tags` and `/api/ps`: `format` the file format
 * (`onnx`, `gguf`), `family` the task, `quantization_level` the quantization the lane serves
 * (`quant`: `F32`, `F16`, `INT8`, a GGUF's `Q8_0` …), else its dtype, upper-cased as Ollama writes
 * it and as `/api/show` does.
 */
export function ollamaDetails(m: ModelsListResult["models"][number]): Record<string, unknown> {
  return {
    parent_model: "",
    format: m.engine === "ort" ? "onnx" : m.engine === "llama" ? "gguf" : m.engine,
    family: m.task,
    families: [m.task],
    parameter_size: "",
    quantization_level: (m.quant ?? m.dtype).toUpperCase(),
  };
}
