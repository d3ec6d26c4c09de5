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
 * **Content is text (field report F25).** Only the template's own scaffolding becomes special
 * tokens: the answer carries the prompt's `specialSpans`, the special-token strings the template
 * itself wrote (its `<|im_start|>`, `<|im_end|>`, `bos_token`, …), and `microllm.oneshot`
 * tokenizes everything else — every message's content and name — as plain text. A content
 * `hi<|im_end|>\n<|im_start|>system\n…` is the text it spells, never a forged system turn.
 * To know which strings are the template's, each special-token string in a content or name (and
 * a piece at its edge that could join the scaffolding beside it into one) is replaced, while the
 * template renders, by a placeholder of Unicode noncharacters no special token contains; the
 * special tokens are found in that rendering, then the placeholders are put back. A content with
 * no special-token string renders exactly as before.
 *
 * @module
 */
import { Template } from "@huggingface/jinja";
import { SynapseError } from "../contract/errors.ts";
import type { ReadyModel } from "../models/model.ts";
import type { SpecialSpan } from "../tokenize/tokenizer.ts";

/** One chat message after the door's checks: a role and its text. */
export interface ChatMessage {
  role: string;
  content: string;
  name?: string;
}

/** A rendered chat prompt and how it was made. */
export interface RenderedChat {
  prompt: string;
  /**
   * The spans of `prompt` that are the template's special tokens (for
   * `EncodeOptions.specialSpans`); everything else is text. Empty for the fallback.
   */
  specialSpans: SpecialSpan[];
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
    return {
      prompt: fallbackPrompt(messages),
      specialSpans: [],
      template: "fallback",
      reason: "no_chat_template",
    };
  }
  const template = templateOf(source);
  if (template instanceof Error) {
    return {
      prompt: fallbackPrompt(messages),
      specialSpans: [],
      template: "fallback",
      reason: `template_unparsable: ${template.message}`,
    };
  }
  const bos = model.gguf?.bosToken ?? "";
  const eos = model.gguf?.eosToken ?? "";
  const hider = new Hider(model.tokenizer);
  let prompt: string;
  try {
    prompt = template.render({
      messages: messages.map((m) => ({
        ...m,
        content: hider.hide(m.content),
        ...(m.name === undefined ? {} : { name: hider.hide(m.name) }),
      })),
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
  return { ...hider.restore(prompt, model.tokenizer.findSpecialTokens(prompt)), template: "gguf" };
}

/** Placeholder delimiters and digits: Unicode noncharacters, in no token and never rendered. */
const OPEN = "\uFDD0";
const CLOSE = "\uFDD1";
const DIGIT0 = 0xfde0;

/**
 * Hides the special-token strings of caller text behind placeholders while a template renders
 * (see the module doc), and puts them back.
 */
class Hider {
  #hidden: string[] = [];
  #tok: Pick<ReadyModel["tokenizer"], "findSpecialTokens" | "specialTokens">;
  #specials: readonly string[];

  constructor(tok: Pick<ReadyModel["tokenizer"], "findSpecialTokens" | "specialTokens">) {
    this.#tok = tok;
    this.#specials = tok.specialTokens.filter((t) => t.length > 0);
  }

  /** `text` with each special-token string, risky edge and delimiter as a placeholder. */
  hide(text: string): string {
    if (text === "") return text;
    const ranges: [number, number][] = this.#tok.findSpecialTokens(text).map(([a, b]) => [a, b]);
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c === 0xfdd0 || c === 0xfdd1) ranges.push([i, i + 1]);
    }
    let head = 0;
    let tail = 0;
    for (const t of this.#specials) {
      if (t.length > text.length && t.includes(text)) {
        // The whole text could be the middle of a special token the scaffolding completes.
        head = text.length;
        continue;
      }
      // The longest proper prefix of t ending the text, and proper suffix starting it.
      for (let k = Math.min(t.length - 1, text.length); k > tail; k--) {
        if (text.endsWith(t.slice(0, k))) {
          tail = k;
          break;
        }
      }
      for (let k = Math.min(t.length - 1, text.length); k > head; k--) {
        if (text.startsWith(t.slice(t.length - k))) {
          head = k;
          break;
        }
      }
    }
    if (head > 0 && text.slice(0, head).trim() !== "") ranges.push([0, head]);
    if (tail > 0 && text.slice(text.length - tail).trim() !== "") {
      ranges.push([text.length - tail, text.length]);
    }
    if (ranges.length === 0) return text;
    ranges.sort((a, b) => a[0] - b[0] || b[1] - a[1]);
    let out = "";
    let at = 0;
    for (const [a, b] of ranges) {
      if (b <= at) continue;
      const from = Math.max(a, at);
      out += text.slice(at, from) + this.#placeholder(text.slice(from, b));
      at = b;
    }
    return out + text.slice(at);
  }

  /**
   * The rendered prompt with the hidden text put back, and `spans` (found in the rendering) moved
   * to match.
   */
  restore(rendered: string, spans: readonly SpecialSpan[]): {
    prompt: string;
    specialSpans: SpecialSpan[];
  } {
    let prompt = "";
    const out: SpecialSpan[] = [];
    let at = 0;
    for (const [a, b] of spans) {
      prompt += this.#unhide(rendered.slice(at, a));
      out.push([prompt.length, prompt.length + (b - a)]);
      prompt += rendered.slice(a, b);
      at = b;
    }
    prompt += this.#unhide(rendered.slice(at));
    return { prompt, specialSpans: out };
  }

  #placeholder(original: string): string {
    const n = this.#hidden.push(original) - 1;
    let digits = "";
    for (const d of n.toString(16)) digits += String.fromCharCode(DIGIT0 + parseInt(d, 16));
    return OPEN + digits + CLOSE;
  }

  #unhide(text: string): string {
    if (!text.includes(OPEN)) return text;
    return text.replace(/\uFDD0([\uFDE0-\uFDEF]+)\uFDD1/g, (whole, digits: string) => {
      let n = 0;
      for (const ch of digits) n = n * 16 + (ch.charCodeAt(0) - DIGIT0);
      return this.#hidden[n] ?? whole;
    });
  }
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
