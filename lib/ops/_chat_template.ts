/**
 * Chat messages → one prompt for `microllm.oneshot`, with the model's own chat template where it
 * ships one (the GGUF metadata `tokenizer.chat_template`, rendered by `@huggingface/jinja`, the
 * Jinja subset Hugging Face uses for chat templates) and a plain, announced fallback otherwise.
 *
 * - `gguf`: the template rendered with `messages`, `add_generation_prompt: true`, `bos_token`,
 *   `eos_token` (the pieces of the GGUF's BOS/EOS ids). A leading `bos_token` is dropped when the
 *   tokenizer adds BOS itself, so the prompt never starts with two.
 * - `fallback`: the model has no template, or the template cannot be parsed by the renderer. Each
 *   message is a line `role: content`, then `assistant:` — a format no model was trained on; the
 *   answer says which was used (`chat_template` and `chat_template_reason`).
 *
 * Special-token strings inside message contents are not escaped: they tokenize as the model's
 * tokenizer reads them (as in a raw `microllm.oneshot` prompt).
 *
 * @module
 */
import { Template } from "@huggingface/jinja";
import { SynapseError } from "../contract/errors.ts";
import type { ReadyModel } from "../models/model.ts";

/** One chat message after the door's checks: a role and its text. */
export interface ChatMessage {
  role: string;
  content: string;
  name?: string;
}

/** A rendered chat prompt and how it was made. */
export interface RenderedChat {
  prompt: string;
  /** `gguf`: the model's own template; `fallback`: `role: content` lines. */
  template: "gguf" | "fallback";
  /** Why the fallback was used: `no_chat_template`, or `template_unparsable: <message>`. */
  reason?: string;
}

/** Parsed templates by source (a model's template is parsed once). */
const parsed = new Map<string, Template | Error>();
const PARSED_MAX = 32;

function templateOf(source: string): Template | Error {
  let t = parsed.get(source);
  if (t === undefined) {
    try {
      t = new Template(source);
    } catch (err) {
      t = err instanceof Error ? err : new Error(String(err));
    }
    if (parsed.size >= PARSED_MAX) parsed.delete(parsed.keys().next().value!);
    parsed.set(source, t);
  }
  return t;
}

/**
 * Renders chat messages into one prompt for `model` (see the module doc).
 *
 * @param model The generation model (its GGUF facts and tokenizer).
 * @param messages The messages, in order.
 * @returns The prompt and which template made it.
 * @throws {SynapseError} channel `invalid_request` naming `messages` when the model's template
 *   refuses the conversation (a `raise_exception` such as "roles must alternate") or fails while
 *   rendering it.
 */
export function renderChat(
  model: Pick<ReadyModel, "gguf" | "tokenizer" | "modelId">,
  messages: readonly ChatMessage[],
): RenderedChat {
  const source = model.gguf?.chatTemplate;
  if (source === undefined) {
    return { prompt: fallbackPrompt(messages), template: "fallback", reason: "no_chat_template" };
  }
  const template = templateOf(source);
  if (template instanceof Error) {
    return {
      prompt: fallbackPrompt(messages),
      template: "fallback",
      reason: `template_unparsable: ${template.message}`,
    };
  }
  const bos = model.gguf?.bosToken ?? "";
  const eos = model.gguf?.eosToken ?? "";
  let prompt: string;
  try {
    prompt = template.render({
      messages: messages.map((m) => ({ ...m })),
      add_generation_prompt: true,
      bos_token: bos,
      eos_token: eos,
    });
  } catch (err) {
    throw new SynapseError(
      "invalid_request",
      `Cannot render the chat for model '${model.modelId}': its chat template says: ${
        err instanceof Error ? err.message : String(err)
      }; change the messages to what the template accepts`,
      { channel: true, cause: err, details: { field: "messages", reason: "chat_template" } },
    );
  }
  if (bos !== "" && prompt.startsWith(bos) && addsBos(model)) prompt = prompt.slice(bos.length);
  return { prompt, template: "gguf" };
}

/** The fallback prompt: `role: content` lines, then `assistant:`. */
export function fallbackPrompt(messages: readonly ChatMessage[]): string {
  return messages.map((m) => `${m.role}: ${m.content}\n`).join("") + "assistant:";
}

const bosAdded = new WeakMap<object, boolean>();

/** True when the tokenizer puts the BOS piece first by itself (found once per tokenizer). */
function addsBos(model: Pick<ReadyModel, "gguf" | "tokenizer">): boolean {
  const bos = model.gguf?.bosToken;
  if (bos === undefined || model.tokenizer.singleSpecialTokens === 0) return false;
  let adds = bosAdded.get(model.tokenizer);
  if (adds === undefined) {
    try {
      const seq = model.tokenizer.encode("a", { maxTokens: 64 });
      adds = model.tokenizer.idToToken()[seq.ids[0]!] === bos;
    } catch {
      adds = false;
    }
    bosAdded.set(model.tokenizer, adds);
  }
  return adds;
}
