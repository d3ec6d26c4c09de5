/**
 * The OpenAI completions doors, `POST /v1/completions` and `POST /v1/chat/completions`: mappings
 * around one `microllm.oneshot` call through the dispatcher, nothing more. The door maps OpenAI's
 * JSON onto the op's params (`prompt` or `messages`, `max_tokens`, `response_format`, `stop`) and
 * the op's result (or its `onText` pieces) back to OpenAI's JSON or server-sent events; the model,
 * the chat template, the schema's grammar, the limits and the decoding are the op's
 * (lib/ops/microllm.ts, docs/operations.md `microllm.oneshot`).
 *
 * - **Sampling, greedy by default** (docs/generation.md "Sampling"). `temperature` (0–2),
 *   `top_p` (above 0, at most 1), `seed` (0–4294967294), `presence_penalty` and
 *   `frequency_penalty` (−2–2) go to `microllm.oneshot` as they are, and so do the extras
 *   llama.cpp's and vLLM's OpenAI servers take in the same body: `top_k`, `min_p`,
 *   `repeat_penalty`, `repeat_last_n`. `temperature` absent or 0 is greedy (OpenAI's own default
 *   is 1: Synapse keeps greedy decoding, what its probes certify, unless a temperature is sent).
 *   A value out of range is refused naming the field and the range. The answer's
 *   `synapse.sampling` is the op's report (a sampled answer's seed, sent or picked: sent back, it
 *   replays the answer); `system_fingerprint` stays the model's fingerprint. What the engine
 *   does not give is refused by name (`invalid_request`, `reason: "not_supported"`): `best_of`
 *   other than 1, `echo: true`, a `suffix`. A non-empty `logit_bias` goes to
 *   `microllm.oneshot {logit_bias}` (each bias added to its token's logit before every pick).
 * - **`n`** goes to `microllm.oneshot {n}`: n choices, each its own generation, choice i sampled
 *   with the seed plus i (`synapse.choices` has each one's seed); `usage` sums them. Refused
 *   with `stream: true`.
 * - **`logprobs`** (chat: `logprobs: true` with `top_logprobs` 0–20; completions: `logprobs`
 *   0–5) go to `microllm.oneshot {logprobs}` and come back in OpenAI's shapes
 *   (`choices[].logprobs.content` / `{tokens, token_logprobs, top_logprobs, text_offset}`): the
 *   model's own log-probabilities, so greedy decoding only; the op refuses them with a
 *   temperature, penalties, a grammar or `stop`, and the door with `stream: true`.
 * - **`max_tokens`** (chat: `max_completion_tokens` or `max_tokens`) above the service's
 *   `microllm_max_tokens` is refused naming the field, never clamped. Absent: 16 for
 *   `/v1/completions` (OpenAI's default), `microllm_max_tokens` for chat.
 * - **`stop`** (a string or up to 4) goes to `microllm.oneshot {stop}`: the text ends before the
 *   earliest match of any of them (the smallest start position), `finish_reason` is `stop`, and
 *   the generation ends as soon as that cut is decided (the worker is sent CANCEL; it stops
 *   within a token and the lane frees). `usage.completion_tokens` counts the tokens generated.
 *   Refused together with a JSON `response_format` (a cut would break the JSON).
 * - **`response_format`** `{type: "json_object"}` or `{type: "json_schema", json_schema: {name,
 *   schema, strict?}}` goes to `microllm.oneshot {response_format}`, which compiles it to a GBNF
 *   grammar (the subset it supports: lib/grammar/json_schema_gbnf.ts) before generating; an
 *   unsupported keyword is refused naming its path. It needs `grammar_enabled` (else
 *   `grammar_disabled`, 403, naming `response_format`). An output that hit `max_tokens` before the
 *   JSON was complete answers `finish_reason: "length"` and `synapse.json_complete: false`: it is
 *   not valid JSON.
 * - **Chat** messages become one prompt through the model's GGUF chat template where it has one,
 *   else a `role: content` fallback (`microllm.oneshot {messages}`); the answer says which
 *   (`synapse.chat_template`, header `x-synapse-chat-template`).
 * - **`stream: true`** answers server-sent events in OpenAI's chunk shapes, ending `data:
 *   [DONE]`, token by token: the events start with the first final text (every refusal before
 *   it is a plain JSON error) and each chunk carries the text `microllm.oneshot` hands its
 *   `onText` (decoded from the worker's TEXT_PART ids, with an incomplete UTF-8 character, or
 *   text a `stop` string may still cut, held back until the next tokens tell), so the deltas
 *   join to exactly the non-streamed text. The last chunk has `finish_reason` and `synapse` (`streamed: "tokens"`),
 *   then `usage` with `stream_options.include_usage`. A failure after the first event is an
 *   `{error}` event and no `[DONE]`. A client that goes away while the generation runs cancels
 *   it (the request's signal, or the body's reader going away, reaches the worker).
 * - **Fields without effect** (F24) are accepted and named in `synapse.ignored_fields`: `user`,
 *   `stream_options` without `stream: true`, and on chat `metadata`, `store: false`,
 *   `service_tier`, `tool_choice: "none"`, `tools: []`, `parallel_tool_calls`. What would ask for
 *   something is refused by name: non-empty `tools`, any other `tool_choice`, an assistant
 *   message with `tool_calls`, `store: true`. An assistant message's `content: null` (and
 *   `refusal: null`, as an answer comes back) is empty content.
 * - `finish_reason`: `stop_token`, `grammar_complete` and `stop_string` → `stop`; `max_tokens` and `cancelled`
 *   → `length`; the engine's own reason is in `synapse.finish_reason`.
 *
 * Every answer carries `system_fingerprint` (the model's Synapse fingerprint, 64 hex), the header
 * `x-synapse-fingerprint`, and Synapse's facts under `synapse`.
 *
 * @module
 */
import { z } from "zod";
import { SynapseError } from "../../contract/errors.ts";
import { parseDoorParams, RESPONSE_FORMAT, wellFormedName } from "../../contract/schemas.ts";
import type { ChatMessageParam, ResponseFormat } from "../../contract/schemas.ts";
import type { OpOutcome } from "../../ops/dispatcher.ts";
import { SEED_MAX } from "../../ops/microllm.ts";
import type {
  GeneratedLogprob,
  MicrollmParams,
  MicrollmResult,
  TokenWithLogprob,
} from "../../ops/microllm.ts";
import type { RoutingParams } from "../../ops/op_types.ts";
import type { GenerationStart } from "../../ops/context.ts";
import type { DoorBackend, RequestFacts } from "../../ops/door_backend.ts";
import { openAiError } from "./openai.ts";

/** The two doors. */
export type CompletionsDoor = "/v1/completions" | "/v1/chat/completions";

/** `max_tokens` of a `/v1/completions` request that sends none (OpenAI's default). */
export const COMPLETIONS_DEFAULT_MAX_TOKENS = 16;

const nullish = <T extends z.ZodType>(t: T) => t.nullable().optional();

/** A number in `[min, max]`, refused naming the range. */
function ranged(min: number, max: number, more = ""): z.ZodNumber {
  const message = `must be a number from ${min} to ${max}${more}`;
  return z.number().min(min, { message }).max(max, { message });
}

/**
 * The sampling fields both doors map onto `microllm.oneshot`'s params of the same names, with
 * OpenAI's ranges (and llama.cpp's for its extras `top_k`, `min_p`, `repeat_penalty`,
 * `repeat_last_n`).
 */
const SAMPLING = {
  temperature: nullish(ranged(0, 2, " (0 is greedy)")),
  top_p: nullish(
    z.number().gt(0, { message: "must be above 0 and at most 1 (send temperature 0 for greedy)" })
      .max(1, { message: "must be above 0 and at most 1 (send temperature 0 for greedy)" }),
  ),
  presence_penalty: nullish(ranged(-2, 2)),
  frequency_penalty: nullish(ranged(-2, 2)),
  seed: nullish(
    z.number().int({ message: `must be an integer from 0 to ${SEED_MAX}` })
      .min(0, { message: `must be an integer from 0 to ${SEED_MAX}` })
      .max(SEED_MAX, { message: `must be an integer from 0 to ${SEED_MAX}` }),
  ),
  top_k: nullish(
    z.number().int({ message: "must be an integer from 0 (all tokens) to 1000000" }).min(0, {
      message: "must be an integer from 0 (all tokens) to 1000000",
    }).max(1_000_000, { message: "must be an integer from 0 (all tokens) to 1000000" }),
  ),
  min_p: nullish(ranged(0, 1)),
  repeat_penalty: nullish(
    z.number().gt(0, { message: "must be above 0 and at most 10 (1 is off)" })
      .max(10, { message: "must be above 0 and at most 10 (1 is off)" }),
  ),
  repeat_last_n: nullish(
    z.number().int({ message: "must be an integer from 0 (off) to 1000000" }).min(0, {
      message: "must be an integer from 0 (off) to 1000000",
    }).max(1_000_000, { message: "must be an integer from 0 (off) to 1000000" }),
  ),
};

/** The {@link SAMPLING} fields, in the order they are mapped. */
const SAMPLING_FIELDS = Object.keys(SAMPLING) as (keyof typeof SAMPLING)[];

/** Fields both doors take (the ones the engine cannot serve are parsed, then refused by name). */
const COMMON = {
  model: wellFormedName().min(1).optional(),
  max_tokens: nullish(z.number().int().positive()),
  ...SAMPLING,
  n: nullish(z.number().int()),
  logit_bias: nullish(z.record(z.string(), z.number())),
  stop: nullish(z.union([z.string().min(1), z.array(z.string().min(1)).min(1).max(4)])),
  stream: nullish(z.boolean()),
  stream_options: nullish(z.strictObject({ include_usage: z.boolean().optional() })),
  user: nullish(wellFormedName()),
  response_format: RESPONSE_FORMAT.optional(),
};

const CompletionsRequest = z.strictObject({
  ...COMMON,
  prompt: z.union([
    z.string(),
    z.array(z.string()).length(1, {
      message: "takes one prompt per call (a string, or a list of one string)",
    }),
  ]),
  best_of: nullish(z.number().int()),
  echo: nullish(z.boolean()),
  logprobs: nullish(
    z.number().int({ message: "must be an integer from 0 to 5" }).min(0, {
      message: "must be an integer from 0 to 5",
    }).max(5, { message: "must be an integer from 0 to 5" }),
  ),
  suffix: nullish(z.string()),
});

const ContentPart = z.strictObject({ type: z.literal("text"), text: z.string() });

const ChatRequest = z.strictObject({
  ...COMMON,
  messages: z.array(z.strictObject({
    role: z.enum(["system", "developer", "user", "assistant"]),
    // `null` (or absent) is accepted on an assistant message only, as empty content (F24).
    content: nullish(z.union([z.string(), z.array(ContentPart)])),
    name: wellFormedName().optional(),
    // An earlier answer sent back as it came (`refusal: null`, no tool calls) is accepted.
    refusal: z.null().optional(),
    tool_calls: nullish(z.array(z.unknown())),
  })).min(1),
  max_completion_tokens: nullish(z.number().int().positive()),
  logprobs: nullish(z.boolean()),
  top_logprobs: nullish(
    z.number().int({ message: "must be an integer from 0 to 20" }).min(0, {
      message: "must be an integer from 0 to 20",
    }).max(20, { message: "must be an integer from 0 to 20" }),
  ),
  // Fields real clients send that cannot change a token (F24): accepted, without effect, and
  // named in `synapse.ignored_fields`; the values that would ask for something are refused.
  metadata: nullish(z.record(z.string(), z.string())),
  store: nullish(z.boolean()),
  service_tier: nullish(z.string()),
  tool_choice: nullish(z.union([z.string(), z.record(z.string(), z.unknown())])),
  tools: nullish(z.array(z.unknown())),
  parallel_tool_calls: nullish(z.boolean()),
});

/**
 * The fields a door accepts and ignores when present (not `null`), in the order
 * `synapse.ignored_fields` names them. `stream_options` is ignored only without `stream: true`.
 */
const IGNORED_FIELDS: Readonly<Record<CompletionsDoor, readonly string[]>> = {
  "/v1/completions": ["user", "stream_options"],
  "/v1/chat/completions": [
    "metadata",
    "store",
    "service_tier",
    "tool_choice",
    "tools",
    "parallel_tool_calls",
    "user",
    "stream_options",
  ],
};

/** What the completions doors need of the instance: its door backend's `call`. */
export type CompletionsBackend = Pick<DoorBackend, "call">;

/** A served completions request: the response, and what the request log needs. */
export interface CompletionsServed {
  response: Response;
  /** The `microllm.oneshot` params it called with. */
  params: Record<string, unknown>;
  /** True while the generation still runs behind a streamed response. */
  live: boolean;
  /**
   * The call's request facts, as the instance worked them out (answered with its outcome), once
   * the generation has ended: before the response starts, or (`live`) after it; undefined when
   * the call failed outright (a bug).
   */
  facts: Promise<RequestFacts | undefined>;
}

/** The mapped request. */
interface Mapped {
  door: CompletionsDoor;
  /** `microllm.oneshot` params: `{prompt, max_tokens}` or `{messages, max_tokens?}`, and the rest. */
  params: MicrollmParams & Record<string, unknown>;
  /** The field that set max_tokens (errors name it). */
  maxTokensField: string;
  stream: boolean;
  includeUsage: boolean;
  /** The request's fields that were accepted and had no effect (`synapse.ignored_fields`). */
  ignored: string[];
  /** With logprobs asked for: how many alternatives per token. */
  logprobs?: number;
  constrained?: "json_object" | "json_schema";
}

/**
 * Serves a completions request: maps the body, calls `microllm.oneshot` through the dispatcher,
 * and answers OpenAI's shape (JSON, or server-sent events for `stream: true`).
 *
 * @param backend The instance.
 * @param door Which door.
 * @param body The parsed JSON body.
 * @param signal The request's signal (a client that goes away cancels the generation).
 * @param routing The request's routing constraints (its `x-synapse-*` headers,
 *   lib/doors/http/routing_headers.ts), passed to `microllm.oneshot` as its params.
 * @returns The response and the call's facts.
 * @throws {SynapseError} every refusal, its `details.field` the request's own field name (the
 *   server answers it in OpenAI's error body): malformed bodies, sampling values out of range
 *   and fields the engine cannot serve (`invalid_request`, naming the field), unsupported
 *   schemas (naming the keyword's path), and the dispatcher's errors (`unknown_model`,
 *   `grammar_disabled`, `queue_full`, …).
 */
export async function serveCompletions(
  backend: CompletionsBackend,
  door: CompletionsDoor,
  body: unknown,
  signal: AbortSignal,
  routing: RoutingParams = {},
): Promise<CompletionsServed> {
  const m = mapRequest(door, body, routing);
  if (m.stream) return await serveStreamed(backend, m, signal);
  const { outcome, facts } = await backend.call("microllm.oneshot", m.params, { signal });
  if (outcome.kind !== "result") throw inDoorTerms(outcome.error, m);
  const res = outcome.body.result as MicrollmResult;
  const answer = answerOf(res, m);
  const response = new Response(JSON.stringify(answer.body), {
    status: 200,
    headers: withType(headersOf(res), "application/json; charset=utf-8", false),
  });
  return { response, params: m.params, live: false, facts: Promise.resolve(facts) };
}

/** The headers of an answer: the fingerprint, and the chat template that made the prompt. */
function headersOf(start: GenerationStart): Headers {
  const headers = new Headers({ "x-synapse-fingerprint": start.fingerprint });
  if (start.chat_template !== undefined) {
    headers.set("x-synapse-chat-template", start.chat_template);
  }
  return headers;
}

/**
 * `stream: true`: calls `microllm.oneshot` with an `onText` hook and answers server-sent events
 * from the first final text on. Until that token the request is not answered, so every
 * refusal (validation, admission, queueing) is still a plain JSON error; a generation that ends
 * before its first part (an end token first) is answered whole, as events.
 */
async function serveStreamed(
  backend: CompletionsBackend,
  m: Mapped,
  signal: AbortSignal,
): Promise<CompletionsServed> {
  /** Text received before the stream started, then the live sink. */
  const early: string[] = [];
  let sink: ((text: string) => void) | undefined;
  const first = Promise.withResolvers<"part">();
  // The op hands over the answer's text as it becomes final (decoded, with nothing a stop
  // string may still cut): the deltas join to exactly the non-streamed text.
  const onText = (text: string): void => {
    if (sink !== undefined) return sink(text);
    early.push(text);
    first.resolve("part");
  };
  // The model that generates, told by the op before its first text.
  let started: GenerationStart | undefined;
  const onStart = (start: GenerationStart): void => void (started = start);
  // The body's reader going away (the client hung up mid-stream) stops the generation too.
  const gone = new AbortController();
  const called = backend.call("microllm.oneshot", m.params, {
    signal: AbortSignal.any([signal, gone.signal]),
    onStart,
    onText,
  });
  const call: Promise<OpOutcome> = called.then((r) => r.outcome);
  // Known once the call has settled, with its outcome.
  const facts: Promise<RequestFacts | undefined> = called.then((r) => r.facts, () => undefined);
  const firstEvent = await Promise.race([call, first.promise]);
  if (firstEvent !== "part") {
    const outcome = firstEvent;
    if (outcome.kind !== "result") throw inDoorTerms(outcome.error, m);
    const res = outcome.body.result as MicrollmResult;
    const answer = answerOf(res, m);
    const events = new SseEvents(
      m,
      answer.id,
      answer.created,
      res.requested_model ?? res.model_id,
      res.fingerprint,
    );
    const lines = [...events.opening(), ...events.delta(answer.text), ...events.closing(answer)];
    const response = new Response(lines.join("") + SSE_DONE, {
      status: 200,
      headers: withType(headersOf(res), SSE_TYPE, true),
    });
    return { response, params: m.params, live: false, facts };
  }
  // Generating: the op told which model before its first text.
  const model = started;
  if (model === undefined) {
    gone.abort();
    throw new Error("microllm.oneshot sent text before onStart. This is a bug");
  }
  const chat = m.door === "/v1/chat/completions";
  const id = `${chat ? "chatcmpl" : "cmpl"}-${crypto.randomUUID().replaceAll("-", "")}`;
  const events = new SseEvents(
    m,
    id,
    Math.floor(Date.now() / 1000),
    model.requested_model ?? model.model_id,
    model.fingerprint,
  );
  const enc = new TextEncoder();
  let open = true;
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      const write = (lines: string[]): void => {
        if (!open || lines.length === 0) return;
        try {
          controller.enqueue(enc.encode(lines.join("")));
        } catch {
          open = false;
        }
      };
      write(events.opening());
      sink = (text) => write(events.delta(text));
      sink(early.splice(0).join(""));
      void call.then((outcome) => {
        if (outcome.kind !== "result") {
          write([sseLine(openAiError(inDoorTerms(outcome.error, m)).body)]);
        } else {
          const res = outcome.body.result as MicrollmResult;
          const answer = answerOf(res, m, { id: events.id, created: events.created });
          write([...events.closing(answer), SSE_DONE]);
        }
      }, (err) => {
        const e = err instanceof SynapseError
          ? err
          : new SynapseError("internal_error", `Cannot finish the stream: ${String(err)}`);
        write([sseLine(openAiError(e).body)]);
      }).finally(() => {
        if (!open) return;
        open = false;
        try {
          controller.close();
        } catch { /* already closed */ }
      });
    },
    cancel() {
      open = false;
      gone.abort(new DOMException("the client went away", "AbortError"));
    },
  });
  const response = new Response(body, {
    status: 200,
    headers: withType(headersOf(model), SSE_TYPE, true),
  });
  return { response, params: m.params, live: true, facts };
}

function withType(headers: Headers, type: string, stream: boolean): Headers {
  headers.set("content-type", type);
  if (stream) headers.set("cache-control", "no-cache");
  return headers;
}

/** The chat request's texts: the operation refuses a lone surrogate in one, naming the message. */
const CHAT_TEXTS = ["messages.*.content", "messages.*.content.*.text"];

/**
 * Maps a body to `microllm.oneshot` params. The door refuses what is OpenAI's shape alone
 * (sampling ranges, what the engine cannot serve, tools, two disagreeing max_tokens fields); the
 * operation checks the rest (limits, schema, messages) before it generates.
 */
function mapRequest(door: CompletionsDoor, body: unknown, routing: RoutingParams): Mapped {
  const chat = door === "/v1/chat/completions";
  const p = chat
    ? parseDoorParams(door, ChatRequest, body, CHAT_TEXTS)
    : parseDoorParams(door, CompletionsRequest, body, ["prompt", "prompt.*"]);
  refuseUnserved(p as Record<string, unknown>);
  if (chat) refuseTools(p as z.infer<typeof ChatRequest>);
  let maxTokens = p.max_tokens ?? undefined;
  let maxTokensField = "max_tokens";
  if (chat) {
    const mct = (p as z.infer<typeof ChatRequest>).max_completion_tokens ?? undefined;
    if (mct !== undefined) {
      if (maxTokens !== undefined && maxTokens !== mct) {
        throw refusal(
          "max_completion_tokens",
          `Cannot generate: max_completion_tokens ${mct} and max_tokens ${maxTokens} disagree; send one of them`,
        );
      }
      maxTokens = mct;
      maxTokensField = "max_completion_tokens";
    }
  } else {
    maxTokens ??= COMPLETIONS_DEFAULT_MAX_TOKENS;
  }
  const logprobs = logprobsOf(door, p as Record<string, unknown>, p.stream === true);
  const n = p.n ?? 1;
  if (n > 1 && p.stream === true) {
    throw refusal(
      "n",
      `Cannot honour n ${n} with stream true: a streamed answer is one generation; drop stream or n`,
      { reason: "not_supported", value: n },
    );
  }
  // Chat without a max_tokens: the operation's own default, microllm_max_tokens.
  const stop = p.stop == null ? [] : typeof p.stop === "string" ? [p.stop] : p.stop;
  const rf: ResponseFormat | undefined = p.response_format;
  const stream = p.stream === true;
  const includeUsage = stream && p.stream_options?.include_usage === true;
  const input: { prompt: string } | { messages: ChatMessageParam[] } = chat
    ? {
      messages: (p as z.infer<typeof ChatRequest>).messages.map((msg) => ({
        role: msg.role,
        content: msg.content == null
          ? null
          : typeof msg.content === "string"
          ? msg.content
          : msg.content.map((part) => part.text).join(""),
        ...(msg.name === undefined ? {} : { name: msg.name }),
      })),
    }
    : { prompt: promptOf((p as z.infer<typeof CompletionsRequest>).prompt) };
  return {
    door,
    params: {
      ...input,
      ...(maxTokens === undefined ? {} : { max_tokens: maxTokens }),
      ...(p.model === undefined ? {} : { model: p.model }),
      ...(rf === undefined ? {} : { response_format: rf }),
      ...(stop.length === 0 ? {} : { stop }),
      ...samplingOf(p),
      ...(logprobs === undefined ? {} : { logprobs }),
      ...(n === 1 ? {} : { n }),
      ...(p.logit_bias == null || Object.keys(p.logit_bias).length === 0
        ? {}
        : { logit_bias: p.logit_bias }),
      ...routing,
    } as MicrollmParams & Record<string, unknown>,
    maxTokensField,
    stream,
    includeUsage,
    ignored: ignoredFields(door, p as Record<string, unknown>, stream),
    ...(logprobs === undefined ? {} : { logprobs }),
    ...(rf === undefined || rf.type === "text" ? {} : { constrained: rf.type }),
  };
}

/** The one prompt of a `/v1/completions` request (a string, or a list of one string). */
function promptOf(prompt: string | string[]): string {
  return typeof prompt === "string" ? prompt : prompt[0]!;
}

/** The sampling fields the request sent (not `null`): the op's params of the same names. */
function samplingOf(p: { [K in keyof typeof SAMPLING]?: number | null | undefined }): {
  [K in keyof typeof SAMPLING]?: number;
} {
  const out: { [K in keyof typeof SAMPLING]?: number } = {};
  for (const name of SAMPLING_FIELDS) {
    const v = p[name];
    if (v !== undefined && v !== null) out[name] = v;
  }
  return out;
}

/**
 * How many alternatives per token a request's logprobs ask for (chat: `logprobs: true` with
 * `top_logprobs`; completions: `logprobs: k`), or undefined for none.
 *
 * @throws {SynapseError} channel `invalid_request`: `top_logprobs` without `logprobs: true`
 *   (as OpenAI refuses it), logprobs with `stream: true` (the streamed deltas are text, not
 *   tokens).
 */
function logprobsOf(
  door: CompletionsDoor,
  p: Record<string, unknown>,
  stream: boolean,
): number | undefined {
  let k: number | undefined;
  if (door === "/v1/chat/completions") {
    const top = p.top_logprobs as number | null | undefined;
    if (p.logprobs === true) k = top ?? 0;
    else if (top != null && top > 0) {
      throw refusal(
        "top_logprobs",
        "Cannot honour top_logprobs without logprobs: send logprobs true with it",
        { reason: "logprobs_required" },
      );
    }
  } else {
    k = (p.logprobs as number | null | undefined) ?? undefined;
  }
  if (k !== undefined && stream) {
    throw refusal(
      "logprobs",
      "Cannot honour logprobs with stream true: the streamed deltas are text, not tokens; drop stream or logprobs",
      { reason: "not_supported" },
    );
  }
  return k;
}

/** The fields the engine cannot serve and the one value each accepts (it asks for nothing). */
const UNSERVED: readonly [string, (v: unknown) => boolean, string][] = [
  [
    "best_of",
    (v) => v === 1,
    "Synapse does not rank choices server-side; omit best_of or send 1, and send n for several choices",
  ],
  ["echo", (v) => v === false, "the prompt is not repeated in the answer; omit echo"],
  ["suffix", (v) => v === "", "insertion is not supported; omit suffix"],
];

/**
 * Refuses, by name, any field the engine cannot serve set to a value that asks for something.
 *
 * @throws {SynapseError} channel `invalid_request` `{field, reason: "not_supported", value}`.
 */
function refuseUnserved(p: Record<string, unknown>): void {
  for (const [name, harmless, advice] of UNSERVED) {
    const v = p[name];
    if (v === undefined || v === null || harmless(v)) continue;
    throw refusal(name, `Cannot honour ${name} ${JSON.stringify(v)}: ${advice}`, {
      reason: "not_supported",
      value: v,
    });
  }
}

/**
 * Refuses what would ask for tool calls (F24): a non-empty `tools`, a `tool_choice` other than
 * `"none"`, an assistant message with tool calls. `tool_choice: "none"`, `tools: []` and
 * `parallel_tool_calls` (without tools it has nothing to do) are accepted and ignored; so is
 * `store: false`, while `store: true` asks for a stored completion Synapse never keeps.
 *
 * @throws {SynapseError} channel `invalid_request` `{field, reason}`.
 */
function refuseTools(p: z.infer<typeof ChatRequest>): void {
  if (p.tools != null && p.tools.length > 0) {
    throw refusal(
      "tools",
      "Cannot honour tools: Synapse does not call tools (function calling is not supported); omit tools",
      { reason: "tools_not_supported" },
    );
  }
  if (p.tool_choice != null && p.tool_choice !== "none") {
    throw refusal(
      "tool_choice",
      `Cannot honour tool_choice ${
        JSON.stringify(p.tool_choice)
      }: Synapse does not call tools; omit tool_choice or send "none"`,
      { reason: "tools_not_supported", value: p.tool_choice },
    );
  }
  p.messages.forEach((msg, i) => {
    if (msg.tool_calls != null && msg.tool_calls.length > 0) {
      throw refusal(
        `messages.${i}.tool_calls`,
        `Cannot render message ${i}: it carries tool calls, and Synapse does not call tools; send the assistant's text as content`,
        { reason: "tools_not_supported" },
      );
    }
  });
  if (p.store === true) {
    throw refusal(
      "store",
      "Cannot honour store true: Synapse does not store completions (nothing is kept for later retrieval, distillation or evals); omit store or send false",
      { reason: "store_not_supported" },
    );
  }
}

/** The accepted fields of the request that had no effect, in {@link IGNORED_FIELDS} order. */
function ignoredFields(
  door: CompletionsDoor,
  p: Record<string, unknown>,
  stream: boolean,
): string[] {
  return IGNORED_FIELDS[door].filter((name) =>
    p[name] !== undefined && p[name] !== null && !(name === "stream_options" && stream)
  );
}

function refusal(field: string, message: string, more: Record<string, unknown> = {}): SynapseError {
  return new SynapseError("invalid_request", message, {
    channel: true,
    details: { field, ...more },
  });
}

/**
 * A dispatcher error named in the door's terms: `max_tokens` → the field the request used (in
 * the message too), `prompt` → `messages` for chat.
 */
function inDoorTerms(e: SynapseError, m: Mapped): SynapseError {
  const field = e.details?.field;
  const rename: Record<string, string> = {
    max_tokens: m.maxTokensField,
    ...(m.door === "/v1/chat/completions" ? { prompt: "messages" } : {}),
  };
  if (typeof field !== "string" || rename[field] === undefined || rename[field] === field) {
    return e;
  }
  const message = field === "max_tokens"
    ? e.message.replace("max_tokens exceeds", `${rename[field]} exceeds`)
    : e.message;
  return new SynapseError(e.code, message, {
    details: { ...e.details, field: rename[field] },
    channel: e.channel,
    cause: e,
    ...(e.retryAfterMs === undefined ? {} : { retryAfterMs: e.retryAfterMs }),
  });
}

/** OpenAI's finish reason of a microllm finish reason. */
export function openAiFinishReason(reason: MicrollmResult["finish_reason"]): "stop" | "length" {
  return reason === "stop_token" || reason === "grammar_complete" || reason === "stop_string"
    ? "stop"
    : "length";
}

interface Answer {
  body: Record<string, unknown>;
  id: string;
  created: number;
  text: string;
  finish: "stop" | "length";
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  synapse: Record<string, unknown>;
}

function answerOf(
  res: MicrollmResult,
  m: Mapped,
  ids?: { id: string; created: number },
): Answer {
  const text = res.text;
  const finish = openAiFinishReason(res.finish_reason);
  const synapse: Record<string, unknown> = {
    fingerprint: res.fingerprint,
    model_id: res.model_id,
    module_generation: res.module_generation,
    // `certified: false` in warn mode, as every native answer says (docs/certification.md).
    provenance: res.provenance,
    finish_reason: res.finish_reason,
    sampling: res.sampling,
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
        `the generation ended (${res.finish_reason}) before the JSON was complete: the text is not valid JSON; raise max_tokens`;
    }
  }
  if (res.chat_template !== undefined) {
    synapse.chat_template = res.chat_template;
    if (res.chat_template_reason !== undefined) {
      synapse.chat_template_reason = res.chat_template_reason;
    }
  }
  if (res.text_repair !== undefined) synapse.text_repair = res.text_repair;
  if (m.stream) synapse.streamed = "tokens";
  if (m.ignored.length > 0) synapse.ignored_fields = m.ignored;
  const choices = res.choices ?? [{
    index: 0,
    text: res.text,
    finish_reason: res.finish_reason,
    n_gen: res.n_gen,
    ...(res.logprobs === undefined ? {} : { logprobs: res.logprobs }),
  }];
  const completionTokens = choices.reduce((a, c) => a + c.n_gen, 0);
  const usage = {
    prompt_tokens: res.n_prompt,
    completion_tokens: completionTokens,
    total_tokens: res.n_prompt + completionTokens,
  };
  if (res.choices !== undefined) {
    // Each choice's own facts: the engine's finish reason, tokens, and (sampled) its seed.
    synapse.choices = res.choices.map((c) => ({
      index: c.index,
      finish_reason: c.finish_reason,
      n_gen: c.n_gen,
      ...(c.seed === undefined ? {} : { seed: c.seed }),
      ...(c.stop_matched === undefined ? {} : { stop_matched: c.stop_matched }),
    }));
    if (m.constrained !== undefined) {
      synapse.json_complete = res.choices.every((c) => c.finish_reason === "grammar_complete");
    }
  }
  const chat = m.door === "/v1/chat/completions";
  const id = ids?.id ?? `${chat ? "chatcmpl" : "cmpl"}-${crypto.randomUUID().replaceAll("-", "")}`;
  const created = ids?.created ?? Math.floor(Date.now() / 1000);
  const choiceOf = (c: (typeof choices)[number]) => {
    const logprobs = m.logprobs === undefined || c.logprobs === undefined
      ? null
      : chat
      ? chatLogprobs(c.logprobs)
      : completionLogprobs(c.logprobs, c.text, m.logprobs);
    const reason = openAiFinishReason(c.finish_reason);
    return chat
      ? {
        index: c.index,
        message: { role: "assistant", content: c.text, refusal: null },
        logprobs,
        finish_reason: reason,
      }
      : { index: c.index, text: c.text, logprobs, finish_reason: reason };
  };
  const body = {
    id,
    object: chat ? "chat.completion" : "text_completion",
    created,
    // The name the request gave (a model alias, docs/config.md); `synapse.model_id` served it.
    model: res.requested_model ?? res.model_id,
    system_fingerprint: res.fingerprint,
    choices: choices.map(choiceOf),
    usage,
    synapse,
  };
  return { body, id, created, text, finish, usage, synapse };
}

/** Chat's `choices[].logprobs`: `{content: [{token, logprob, bytes, top_logprobs}], refusal}`. */
function chatLogprobs(lps: GeneratedLogprob[]): Record<string, unknown> {
  const one = (t: TokenWithLogprob) => ({ token: t.token, logprob: t.logprob, bytes: t.bytes });
  return {
    content: lps.map((t) => ({ ...one(t), top_logprobs: t.top.map(one) })),
    refusal: null,
  };
}

/**
 * Completions' `choices[].logprobs`: `{tokens, token_logprobs, top_logprobs, text_offset}`;
 * `top_logprobs` (one `{token: logprob}` per token) is null for `logprobs: 0`, and `text_offset`
 * is each token's offset in the answer's text (UTF-16 code units; a leading space the decoder
 * stripped from the text counts from 0).
 */
function completionLogprobs(
  lps: GeneratedLogprob[],
  text: string,
  k: number,
): Record<string, unknown> {
  const joined = lps.map((t) => t.token).join("");
  const lead = joined.endsWith(text) ? joined.length - text.length : 0;
  const offsets: number[] = [];
  let at = 0;
  for (const t of lps) {
    offsets.push(Math.max(0, at - lead));
    at += t.token.length;
  }
  return {
    tokens: lps.map((t) => t.token),
    token_logprobs: lps.map((t) => t.logprob),
    top_logprobs: k === 0
      ? null
      : lps.map((t) => Object.fromEntries(t.top.map((a) => [a.token, a.logprob]))),
    text_offset: offsets,
  };
}

const SSE_TYPE = "text/event-stream; charset=utf-8";
const SSE_DONE = "data: [DONE]\n\n";

function sseLine(event: unknown): string {
  return `data: ${JSON.stringify(event)}\n\n`;
}

/** The server-sent events of one streamed answer, in OpenAI's chunk shapes. */
class SseEvents {
  readonly id: string;
  readonly created: number;
  #m: Mapped;
  #chat: boolean;
  #base: Record<string, unknown>;
  #usage: Record<string, unknown>;

  constructor(m: Mapped, id: string, created: number, model: string, fingerprint: string) {
    this.id = id;
    this.created = created;
    this.#m = m;
    this.#chat = m.door === "/v1/chat/completions";
    this.#base = {
      id,
      object: this.#chat ? "chat.completion.chunk" : "text_completion",
      created,
      model,
      system_fingerprint: fingerprint,
    };
    this.#usage = m.includeUsage ? { usage: null } : {};
  }

  /** Chat: the first chunk, `delta: {role: "assistant", content: ""}`. */
  opening(): string[] {
    return this.#chat ? [this.#event(this.#piece("", null, true))] : [];
  }

  /** One chunk of text (none for ""). */
  delta(text: string): string[] {
    return text === "" ? [] : [this.#event(this.#piece(text, null))];
  }

  /** The chunk with `finish_reason` and `synapse`, then the usage chunk when asked for. */
  closing(a: Answer): string[] {
    const out = [sseLine({
      ...this.#base,
      choices: [this.#piece("", a.finish)],
      ...this.#usage,
      synapse: a.synapse,
    })];
    if (this.#m.includeUsage) out.push(sseLine({ ...this.#base, choices: [], usage: a.usage }));
    return out;
  }

  #event(choice: unknown): string {
    return sseLine({ ...this.#base, choices: [choice], ...this.#usage });
  }

  #piece(text: string, finish: string | null, first = false): unknown {
    return this.#chat
      ? {
        index: 0,
        delta: finish !== null
          ? {}
          : first
          ? { role: "assistant", content: text }
          : { content: text },
        logprobs: null,
        finish_reason: finish,
      }
      : { index: 0, text, logprobs: null, finish_reason: finish };
  }
}
