/*
 * synapse_engine.h — the C engine ABI of Synapse's native engines (ABI version 1).
 *
 * A shim is a shared library that loads one model and computes with it: token ids in, vectors,
 * scores or generated token ids out. Tokenization, params, admission and envelopes stay in the
 * service. The FFI worker (workers/ffi.ts) opens a shim with Deno.dlopen and serves it under the
 * worker protocol (docs/internals.md §7), so a crash inside a shim costs one worker process, never
 * the service. lib/engines/ffi/abi.ts declares the same symbols and struct layouts for Deno, and
 * tests/engines/ffi_abi_test.ts holds the two to each other through syn_abi_layout().
 *
 * Rules every function follows:
 * - Status: functions returning int32_t return SYN_OK (0) or one of enum syn_status. On failure
 *   syn_last_error_code() is that status and syn_last_error_message() says why (UTF-8, owned by
 *   the shim, valid until the next failing call). The error is process-wide, not per thread: a
 *   caller runs computing calls on a thread of its own and reads the error from another.
 * - Threads: one call at a time per process (the FFI worker serves one request at a time), from
 *   any thread; syn_engine_set_cancel_flag's flag may be written from any thread while a call
 *   runs.
 * - Memory: pointers returned by the shim (JSON strings) are owned by the engine and live until
 *   syn_engine_free; buffers passed in are owned by the caller and only read or written during
 *   the call.
 * - Strings are NUL-terminated UTF-8; JSON is one object, no comments.
 */
#ifndef SYNAPSE_ENGINE_H
#define SYNAPSE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The ABI version this header describes; syn_abi_version() of a compatible shim returns it. */
#define SYN_ABI_VERSION 1u

/** Status codes (stable; the worker maps them to worker ERR codes). */
enum syn_status {
  SYN_OK = 0,
  /** A NULL pointer, a count out of range, a token id outside the vocabulary. */
  SYN_ERR_INVALID_ARGUMENT = 1,
  /** The model file could not be loaded (not a GGUF, unsupported architecture, unreadable). */
  SYN_ERR_LOAD_FAILED = 2,
  /** The engine was not loaded for this call (embed on a generation engine, rank without a head). */
  SYN_ERR_UNSUPPORTED = 3,
  /** The cancel flag was set; the call stopped within one decode step. */
  SYN_ERR_CANCELLED = 4,
  /** A context or buffer could not be allocated. */
  SYN_ERR_OUT_OF_MEMORY = 5,
  /** The runtime failed a step (llama_decode returned an error). */
  SYN_ERR_ENGINE = 6,
  /** The sequences do not fit the context (more tokens or sequences than the limits). */
  SYN_ERR_CONTEXT_FULL = 7,
  /** A grammar the runtime refuses (GBNF parse error). */
  SYN_ERR_GRAMMAR_INVALID = 8,
};

/** One loaded model on one runtime (opaque). */
typedef struct syn_engine syn_engine;

/**
 * A batch of sequences for syn_embed and syn_score (40 bytes on LP64).
 * `ids` holds the sequences back to back: sequence i is seq_lens[i] ids starting at the sum of
 * the lengths before it; n_ids is the sum of all lengths.
 */
typedef struct syn_batch {
  /** Flat token ids, n_ids of them (offset 0). */
  const int32_t *ids;
  /** Length of each sequence in tokens, n_seqs of them, each >= 1 (offset 8). */
  const int32_t *seq_lens;
  /** Number of sequences (offset 16). */
  uint32_t n_seqs;
  /** Number of ids (offset 20). */
  uint32_t n_ids;
  /** Output, row-major [n_seqs, dims] floats (dims: the engine's `dims`; 1 for scores) (offset 24). */
  float *out;
  /** Per-sequence status, n_seqs of them (SYN_OK, or why that row has no output) (offset 32). */
  int32_t *seq_status;
} syn_batch;

/**
 * How a generation picks each token (56 bytes on LP64). temperature 0 is greedy after the logit
 * bias and the penalties (top_k, top_p, min_p and seed then change nothing). The penalties see
 * the last repeat_last_n ids of the prompt and the generation so far.
 */
typedef struct syn_sampling {
  float temperature;        /* offset 0: 0 (greedy) to 2 */
  int32_t top_k;            /* offset 4: 0 keeps all */
  float top_p;              /* offset 8: 1 keeps all */
  float min_p;              /* offset 12: 0 keeps all */
  uint32_t seed;            /* offset 16 */
  float repeat_penalty;     /* offset 20: 1 is off */
  int32_t repeat_last_n;    /* offset 24: 0 turns the penalties off */
  float frequency_penalty;  /* offset 28: 0 is off */
  float presence_penalty;   /* offset 32: 0 is off */
  uint32_t n_logit_bias;    /* offset 36: entries in bias_ids / bias_values */
  const int32_t *bias_ids;  /* offset 40: token ids */
  const float *bias_values; /* offset 48: added to each id's logit before each pick */
} syn_sampling;

/** SYN_ABI_VERSION of the shim. A caller refuses a shim whose version it was not built for. */
uint32_t syn_abi_version(void);

/**
 * sizeof and offsetof of the ABI's structs as the shim was compiled, as JSON:
 * {"syn_batch":{"size":40,"ids":0,…},"syn_sampling":{…}} (static storage).
 */
const char *syn_abi_layout(void);

/** Status of the last failing call (SYN_OK when none failed since the last load). */
int32_t syn_last_error_code(void);

/** Message of the last failing call ("" when none failed since the last load). */
const char *syn_last_error_message(void);

/**
 * Loads a model. `options_json` is one flat JSON object (NULL or "{}" for the defaults):
 *   "mode":       "embed" | "score" | "generate"          (default "embed")
 *   "n_ctx":      context size in tokens, >= 8           (default 2048)
 *   "n_seq_max":  sequences one embed or score call may hold, 1..256 (default 1; generate: 1)
 *   "n_threads":  CPU threads, >= 1                       (default 2)
 *   "readout":    score mode only: "rank" (a classification head, GGUF pooling "rank") or
 *                 "yes_no" (a causal LM: logit("yes") - logit("no") at each sequence's last
 *                 token; the ids are the vocabulary's single tokens "yes" and "no"). A rank
 *                 head of several labels other than "yes", "no" is SYN_ERR_UNSUPPORTED
 *                                                          (default "rank")
 * @returns The engine, or NULL (see syn_last_error_code: SYN_ERR_INVALID_ARGUMENT for bad
 *   options, SYN_ERR_LOAD_FAILED, SYN_ERR_OUT_OF_MEMORY, SYN_ERR_UNSUPPORTED).
 */
syn_engine *syn_engine_load(const char *path, const char *options_json);

/**
 * Engine identity as JSON: {"engine":"synapse-llama-shim","version":"…","build_flags":{…}}.
 * It enters the numeric profile (fingerprint) of every answer the engine gives. The same for every
 * engine of one shim build; NULL gives it too (the FFI worker announces it in HELLO before any
 * model is loaded).
 */
const char *syn_engine_identity(const syn_engine *engine);

/**
 * Limits and facts as JSON: {"max_sequence_tokens":N,"max_batch_tokens":N,"max_sequences":N,
 * "dims":N,"n_vocab":N,"pooling":"mean"|"cls"|"last"|"rank"|"none","mode":"…","readout":"…",
 * "yes_id":N,"no_id":N,"labels":N,"rank_score":"first"|"yes_minus_no"|"none"} (yes_id, no_id:
 * −1 unless readout "yes_no"; labels: the head's outputs, 0 without one).
 */
const char *syn_engine_limits(const syn_engine *engine);

/**
 * Points the engine at a cancel flag: while any call runs, a nonzero *flag stops it within one
 * decode step (llama_set_abort_callback) and the call returns SYN_ERR_CANCELLED. NULL detaches.
 * The flag must stay valid until it is detached or the engine is freed.
 */
void syn_engine_set_cancel_flag(syn_engine *engine, const int32_t *flag);

/**
 * Embeds a batch (mode "embed"): out gets one pooled vector of `dims` floats per sequence (the
 * GGUF's pooling; not normalised). All sequences run in as few decodes as the context allows.
 */
int32_t syn_embed(syn_engine *engine, const syn_batch *batch);

/**
 * Scores a batch (mode "score"): out gets one float per sequence. Readout "rank": the head's
 * output when it has one label; output 0 − output 1 when its two labels are "yes", "no" (a
 * Qwen3-Reranker GGUF as llama.cpp's converter writes it: the head's rows are the LM's "yes" and
 * "no" rows); any other head is refused at load. Readout "yes_no": logit("yes") − logit("no").
 */
int32_t syn_score(syn_engine *engine, const syn_batch *batch);

/**
 * Starts a generation (mode "generate"): clears the sequence, evaluates the prompt, sets up the
 * sampler. `sampling` NULL is greedy; `grammar` NULL is none (GBNF, root rule "root").
 * @returns SYN_OK, SYN_ERR_GRAMMAR_INVALID, SYN_ERR_CONTEXT_FULL, SYN_ERR_CANCELLED, …
 */
int32_t syn_generate_begin(syn_engine *engine, const int32_t *prompt, uint32_t n_prompt,
                           const syn_sampling *sampling, const char *grammar);

/**
 * Generates up to `max_tokens` more tokens into out_tokens, writing how many to *n_out and 1 to
 * *finished when the model produced an end-of-generation token (not written to out_tokens).
 * The last token written is evaluated lazily, at the start of the next call, so a generation
 * that stops at its limit never pays for an evaluation it does not use.
 * @returns SYN_OK (also when finished), SYN_ERR_CANCELLED (the tokens written stand),
 *   SYN_ERR_CONTEXT_FULL, SYN_ERR_ENGINE.
 */
int32_t syn_generate_next(syn_engine *engine, int32_t *out_tokens, uint32_t max_tokens,
                          uint32_t *n_out, int32_t *finished);

/** Ends a generation: frees its sampler. Idempotent. */
void syn_generate_end(syn_engine *engine);

/** Bytes syn_state_save needs for the generation sequence now (0 when it is empty). */
size_t syn_state_size(syn_engine *engine);

/**
 * Snapshots the generation sequence (its KV cells and positions) into buf.
 * @returns SYN_OK with *written set, or SYN_ERR_INVALID_ARGUMENT when cap is too small.
 */
int32_t syn_state_save(syn_engine *engine, uint8_t *buf, size_t cap, size_t *written);

/**
 * Restores a snapshot taken by syn_state_save on an engine of the same model and options; the
 * next syn_generate_begin with a prompt continuing it may then reuse it (n_reuse in the limits).
 * @returns SYN_OK or SYN_ERR_INVALID_ARGUMENT (a snapshot the runtime refuses).
 */
int32_t syn_state_restore(syn_engine *engine, const uint8_t *buf, size_t n);

/**
 * Evaluates `ids` after the restored (or current) sequence without sampling, so a snapshot can
 * be checked: writes the logits of the last position (n_vocab floats) to out_logits.
 */
int32_t syn_state_eval(syn_engine *engine, const int32_t *ids, uint32_t n_ids, float *out_logits);

/**
 * llama.cpp's tokenization of text (no BOS/EOS added; special-token strings parsed when
 * parse_special != 0): writes up to cap ids, returns how many there are (more than cap: call
 * again with a bigger buffer), or -1 on failure.
 */
int32_t syn_tokenize(syn_engine *engine, const char *text, int32_t text_len, int32_t parse_special,
                     int32_t *out, int32_t cap);

/** Frees the engine and everything it holds. NULL is a no-op. */
void syn_engine_free(syn_engine *engine);

/** Test hook: calls abort() inside the shim (the FFI worker's --test-shim-abort-after). */
void syn_test_abort(void);

#ifdef __cplusplus
}
#endif

#endif /* SYNAPSE_ENGINE_H */
