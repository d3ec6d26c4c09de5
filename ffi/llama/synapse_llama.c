/*
 * libsynapse_llama — the llama shim: ffi/synapse_engine.h over llama.cpp's own C API (llama.h of
 * the release node-llama-cpp bundles), linked to the prebuilt libllama that
 * @node-llama-cpp/linux-x64 ships. scripts/setup builds it with the machine's C compiler
 * (scripts/build_shim.ts); nothing is downloaded.
 *
 * Over the node-llama-cpp lane it gives: many sequences per decode (embed and score), rank pooling
 * and the yes/no-logit readout for rerankers, an abort callback reading the cancel flag (CANCEL
 * lands inside a decode step), and the generation sequence's state snapshot and restore.
 */
#define _GNU_SOURCE
#include "../synapse_engine.h"

#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "llama.h"

#ifndef SYN_LLAMA_RELEASE
#define SYN_LLAMA_RELEASE "unknown"
#endif
/* Which libllama and ggml the shim links: @node-llama-cpp/linux-x64's prebuilt ones (no flag:
 * the identity as it always was), or ones built from the same release for this CPU by
 * scripts/build_shim --native (SYN_GGML_NATIVE: build_flags.ggml "native", its own fingerprint). */
#ifdef SYN_GGML_NATIVE
#define SYN_GGML_FLAG ",\"ggml\":\"native\""
#else
#define SYN_GGML_FLAG ""
#endif
/** Bumped when the shim computes anything differently (it enters the fingerprint). */
#define SYN_SHIM_VERSION "2"

enum syn_mode { MODE_EMBED, MODE_SCORE, MODE_GENERATE };
enum syn_readout { READOUT_RANK, READOUT_YES_NO };

struct syn_engine {
  struct llama_model *model;
  struct llama_context *ctx;
  const struct llama_vocab *vocab;
  enum syn_mode mode;
  enum syn_readout readout;
  uint32_t n_ctx;
  uint32_t n_seq_max;
  int32_t n_threads;
  int32_t dims;
  int32_t n_vocab;
  enum llama_pooling_type pooling;
  int32_t yes_id;
  int32_t no_id;
  /* Rank readout of a two-label head labelled "yes", "no" (a Qwen3-Reranker GGUF as llama.cpp's
   * converter writes it): the score is output 0 - output 1; else the score is output 0. */
  bool rank_yes_minus_no;
  /* llama.cpp ends a qwen3 / qwen3vl rank graph with a softmax over the head's outputs
   * (llama-graph.cpp, build_pooling): the pair is then probabilities, and the score their log
   * ratio, ln p(yes) - ln p(no), which is the logit difference again. */
  bool rank_softmaxed;
  uint32_t n_labels;
  const int32_t *cancel;
  /* generation */
  struct llama_sampler *sampler;
  int32_t n_past;
  int32_t pending; /* a token sampled and not yet evaluated, or -1 */
  struct llama_batch batch;
  char limits[512];
};

/* Process-wide, not per thread: computing calls run on a caller's worker thread and the caller
 * reads the error from another (ffi/synapse_engine.h: one call at a time per process). */
static int32_t last_code = SYN_OK;
static char last_message[1024];

static int32_t fail(int32_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_message, sizeof last_message, fmt, ap);
  va_end(ap);
  last_code = code;
  return code;
}

/*
 * Whether the GGUF holds a classification head (cls.weight or cls.output.weight). llama.cpp's
 * n_cls_out is 1 for any model without classifier labels, and its rank pooling without a head
 * reads a hidden state's first dimension: a score only a head makes. Read from the file's tensor
 * list (no tensor data is loaded).
 */
static bool has_rank_head(const char *path) {
  struct gguf_init_params params = {.no_alloc = true, .ctx = NULL};
  struct gguf_context *g = gguf_init_from_file(path, params);
  if (g == NULL) return false;
  bool found = gguf_find_tensor(g, "cls.output.weight") >= 0 || gguf_find_tensor(g, "cls.weight") >= 0;
  gguf_free(g);
  return found;
}

uint32_t syn_abi_version(void) { return SYN_ABI_VERSION; }

const char *syn_abi_layout(void) {
  static char buf[512];
  snprintf(buf, sizeof buf,
           "{\"syn_batch\":{\"size\":%zu,\"ids\":%zu,\"seq_lens\":%zu,\"n_seqs\":%zu,\"n_ids\":%zu,"
           "\"out\":%zu,\"seq_status\":%zu},"
           "\"syn_sampling\":{\"size\":%zu,\"temperature\":%zu,\"top_k\":%zu,\"top_p\":%zu,"
           "\"min_p\":%zu,\"seed\":%zu,\"repeat_penalty\":%zu,\"repeat_last_n\":%zu,"
           "\"frequency_penalty\":%zu,\"presence_penalty\":%zu,\"n_logit_bias\":%zu,"
           "\"bias_ids\":%zu,\"bias_values\":%zu}}",
           sizeof(syn_batch), offsetof(syn_batch, ids), offsetof(syn_batch, seq_lens),
           offsetof(syn_batch, n_seqs), offsetof(syn_batch, n_ids), offsetof(syn_batch, out),
           offsetof(syn_batch, seq_status), sizeof(syn_sampling),
           offsetof(syn_sampling, temperature), offsetof(syn_sampling, top_k),
           offsetof(syn_sampling, top_p), offsetof(syn_sampling, min_p),
           offsetof(syn_sampling, seed), offsetof(syn_sampling, repeat_penalty),
           offsetof(syn_sampling, repeat_last_n), offsetof(syn_sampling, frequency_penalty),
           offsetof(syn_sampling, presence_penalty), offsetof(syn_sampling, n_logit_bias),
           offsetof(syn_sampling, bias_ids), offsetof(syn_sampling, bias_values));
  return buf;
}

int32_t syn_last_error_code(void) { return last_code; }
const char *syn_last_error_message(void) { return last_message; }

/* ---- llama.cpp's log: warnings and errors to stderr as "llama.cpp <level>: …" lines ---------- */

static enum ggml_log_level log_last = GGML_LOG_LEVEL_INFO;
/** Set while a cancelled decode unwinds: llama.cpp's "failed to compute graph" lines are ours. */
static volatile int cancel_unwinding = 0;

static void on_log(enum ggml_log_level level, const char *text, void *data) {
  (void)data;
  if (level == GGML_LOG_LEVEL_CONT) level = log_last;
  else log_last = level;
  if (level < GGML_LOG_LEVEL_WARN || cancel_unwinding) return;
  size_t n = strlen(text);
  while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r')) n--;
  if (n == 0) return;
  fprintf(stderr, "llama.cpp %s: %.*s\n", level == GGML_LOG_LEVEL_WARN ? "warn" : "error", (int)n,
          text);
}

/** Once per process: the log, the backend, and the CPU backend variants beside libllama. */
static void init_once(void) {
  static bool done = false;
  if (done) return;
  done = true;
  llama_log_set(on_log, NULL);
  Dl_info info;
  if (dladdr((void *)llama_backend_init, &info) != 0 && info.dli_fname != NULL) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    char *slash = strrchr(dir, '/');
    if (slash != NULL) {
      *slash = '\0';
      ggml_backend_load_all_from_path(dir);
    }
  }
  if (ggml_backend_reg_count() == 0) ggml_backend_load_all();
  llama_backend_init();
}

/* ---- options: one flat JSON object of strings and numbers ------------------------------------ */

/** The raw value of key in a flat JSON object (a number or a string's inside), or NULL. */
static const char *json_value(const char *json, const char *key, char *out, size_t cap) {
  if (json == NULL) return NULL;
  size_t klen = strlen(key);
  for (const char *p = json; (p = strchr(p, '"')) != NULL;) {
    const char *k = p + 1;
    const char *end = strchr(k, '"');
    if (end == NULL) return NULL;
    const char *after = end + 1;
    while (*after == ' ' || *after == '\t' || *after == '\n' || *after == '\r') after++;
    if (*after != ':') { /* a string value: skip it */
      p = end + 1;
      continue;
    }
    after++;
    while (*after == ' ' || *after == '\t' || *after == '\n' || *after == '\r') after++;
    const char *v = after, *vend;
    if (*v == '"') {
      v++;
      vend = strchr(v, '"');
      if (vend == NULL) return NULL;
    } else {
      vend = v;
      while (*vend != '\0' && *vend != ',' && *vend != '}' && *vend != ' ' && *vend != '\n') vend++;
    }
    if ((size_t)(end - k) == klen && strncmp(k, key, klen) == 0) {
      size_t n = (size_t)(vend - v);
      if (n >= cap) return NULL;
      memcpy(out, v, n);
      out[n] = '\0';
      return out;
    }
    p = *vend == '"' ? vend + 1 : vend;
  }
  return NULL;
}

static bool json_int(const char *json, const char *key, long lo, long hi, long *out) {
  char buf[64];
  if (json_value(json, key, buf, sizeof buf) == NULL) return true; /* absent: keep default */
  char *end;
  long v = strtol(buf, &end, 10);
  if (*end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

/* ---- helpers -------------------------------------------------------------------------------- */

static bool on_abort(void *data) {
  const syn_engine *e = data;
  bool stop = e->cancel != NULL && __atomic_load_n(e->cancel, __ATOMIC_RELAXED) != 0;
  if (stop) cancel_unwinding = 1;
  return stop;
}

static const char *pooling_name(enum llama_pooling_type p) {
  switch (p) {
  case LLAMA_POOLING_TYPE_MEAN: return "mean";
  case LLAMA_POOLING_TYPE_CLS: return "cls";
  case LLAMA_POOLING_TYPE_LAST: return "last";
  case LLAMA_POOLING_TYPE_RANK: return "rank";
  default: return "none";
  }
}

/** The id of a vocabulary piece that is one whole token (text -> exactly one id), or -1. */
static int32_t single_token(const struct llama_vocab *vocab, const char *text) {
  llama_token ids[4];
  int32_t n = llama_tokenize(vocab, text, (int32_t)strlen(text), ids, 4, false, false);
  return n == 1 ? ids[0] : -1;
}

static int32_t decode_status(syn_engine *e, int32_t rc, const char *what) {
  cancel_unwinding = 0;
  if (rc == 0) return SYN_OK;
  if (rc == 2 || on_abort(e)) return fail(SYN_ERR_CANCELLED, "%s cancelled", what);
  if (rc == 1) return fail(SYN_ERR_CONTEXT_FULL, "%s: no room in the context", what);
  return fail(SYN_ERR_ENGINE, "%s: llama_decode returned %d", what, rc);
}

/* ---- load / free ---------------------------------------------------------------------------- */

syn_engine *syn_engine_load(const char *path, const char *options_json) {
  last_code = SYN_OK;
  last_message[0] = '\0';
  if (path == NULL) {
    fail(SYN_ERR_INVALID_ARGUMENT, "path is NULL");
    return NULL;
  }
  char mode[32] = "embed", readout[32] = "rank";
  long n_ctx = 2048, n_seq_max = 1, n_threads = 2;
  if (json_value(options_json, "mode", mode, sizeof mode) == NULL) strcpy(mode, "embed");
  if (json_value(options_json, "readout", readout, sizeof readout) == NULL) strcpy(readout, "rank");
  if (!json_int(options_json, "n_ctx", 8, 1 << 20, &n_ctx) ||
      !json_int(options_json, "n_seq_max", 1, 256, &n_seq_max) ||
      !json_int(options_json, "n_threads", 1, 512, &n_threads)) {
    fail(SYN_ERR_INVALID_ARGUMENT, "options: n_ctx >= 8, n_seq_max 1..256, n_threads >= 1");
    return NULL;
  }
  enum syn_mode m;
  if (strcmp(mode, "embed") == 0) m = MODE_EMBED;
  else if (strcmp(mode, "score") == 0) m = MODE_SCORE;
  else if (strcmp(mode, "generate") == 0) m = MODE_GENERATE;
  else {
    fail(SYN_ERR_INVALID_ARGUMENT, "options: mode must be embed, score or generate, not '%s'", mode);
    return NULL;
  }
  enum syn_readout r;
  if (strcmp(readout, "rank") == 0) r = READOUT_RANK;
  else if (strcmp(readout, "yes_no") == 0) r = READOUT_YES_NO;
  else {
    fail(SYN_ERR_INVALID_ARGUMENT, "options: readout must be rank or yes_no, not '%s'", readout);
    return NULL;
  }
  if (m == MODE_GENERATE) n_seq_max = 1;
  init_once();

  syn_engine *e = calloc(1, sizeof *e);
  if (e == NULL) {
    fail(SYN_ERR_OUT_OF_MEMORY, "cannot allocate the engine");
    return NULL;
  }
  e->mode = m;
  e->readout = r;
  e->pending = -1;
  e->yes_id = e->no_id = -1;
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  e->model = llama_model_load_from_file(path, mp);
  if (e->model == NULL) {
    fail(SYN_ERR_LOAD_FAILED, "llama.cpp cannot load the model file");
    free(e);
    return NULL;
  }
  e->vocab = llama_model_get_vocab(e->model);
  e->n_vocab = llama_vocab_n_tokens(e->vocab);

  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)n_ctx;
  cp.n_batch = (uint32_t)n_ctx;
  /* Pooled outputs need every token of a sequence in one ubatch: one ubatch is the context. */
  cp.n_ubatch = m == MODE_GENERATE ? (uint32_t)(n_ctx < 512 ? n_ctx : 512) : (uint32_t)n_ctx;
  cp.n_seq_max = (uint32_t)n_seq_max;
  cp.n_threads = (int32_t)n_threads;
  cp.n_threads_batch = (int32_t)n_threads;
  cp.kv_unified = true;
  cp.no_perf = true;
  cp.abort_callback = on_abort;
  cp.abort_callback_data = e;
  if (m == MODE_EMBED) {
    cp.embeddings = true;
  } else if (m == MODE_SCORE && r == READOUT_RANK) {
    cp.embeddings = true;
    cp.pooling_type = LLAMA_POOLING_TYPE_RANK;
  } else {
    cp.embeddings = false;
  }
  e->ctx = llama_init_from_model(e->model, cp);
  if (e->ctx == NULL) {
    fail(SYN_ERR_OUT_OF_MEMORY, "llama.cpp cannot create a context of %ld tokens", n_ctx);
    llama_model_free(e->model);
    free(e);
    return NULL;
  }
  e->n_ctx = llama_n_ctx(e->ctx);
  e->n_seq_max = (uint32_t)n_seq_max;
  e->n_threads = (int32_t)n_threads;
  e->pooling = llama_pooling_type(e->ctx);
  if (m == MODE_EMBED) {
    int32_t out = llama_model_n_embd_out(e->model);
    e->dims = out > 0 ? out : llama_model_n_embd(e->model);
    if (e->pooling == LLAMA_POOLING_TYPE_RANK) {
      syn_engine_free(e);
      fail(SYN_ERR_UNSUPPORTED, "the model pools with rank: load it in score mode");
      return NULL;
    }
  } else if (m == MODE_SCORE) {
    e->dims = 1;
    if (r == READOUT_RANK && (!has_rank_head(path) || llama_model_n_cls_out(e->model) < 1)) {
      syn_engine_free(e);
      fail(SYN_ERR_UNSUPPORTED, "the model has no classification head (rank readout)");
      return NULL;
    }
    if (r == READOUT_RANK) {
      e->n_labels = llama_model_n_cls_out(e->model);
      const char *l0 = e->n_labels == 2 ? llama_model_cls_label(e->model, 0) : NULL;
      const char *l1 = e->n_labels == 2 ? llama_model_cls_label(e->model, 1) : NULL;
      e->rank_yes_minus_no = l0 != NULL && l1 != NULL && strcmp(l0, "yes") == 0 &&
                             strcmp(l1, "no") == 0;
      char arch[64] = "";
      llama_model_meta_val_str(e->model, "general.architecture", arch, sizeof arch);
      e->rank_softmaxed = strcmp(arch, "qwen3") == 0 || strcmp(arch, "qwen3vl") == 0;
      /* One relevance score per pair: a head of one output, or the yes/no pair. Any other
       * multi-label head (a classifier) has no single score: refused, never its first output. */
      if (e->n_labels != 1 && !e->rank_yes_minus_no) {
        uint32_t n = e->n_labels;
        syn_engine_free(e);
        fail(SYN_ERR_UNSUPPORTED,
             "the classification head has %u labels, not one score nor the labels yes, no", n);
        return NULL;
      }
      /* llama.cpp's softmax over a single output is 1 for every pair: no score survives it. */
      if (e->n_labels == 1 && e->rank_softmaxed) {
        syn_engine_free(e);
        fail(SYN_ERR_UNSUPPORTED,
             "a one-output head of a %s GGUF scores 1 for every pair (llama.cpp softmaxes it)",
             arch);
        return NULL;
      }
    }
    if (r == READOUT_YES_NO) {
      e->yes_id = single_token(e->vocab, "yes");
      e->no_id = single_token(e->vocab, "no");
      if (e->yes_id < 0 || e->no_id < 0) {
        syn_engine_free(e);
        fail(SYN_ERR_UNSUPPORTED, "the vocabulary has no single-token 'yes' and 'no'");
        return NULL;
      }
    }
  } else {
    e->dims = 0;
  }
  uint32_t cap = m == MODE_GENERATE ? cp.n_batch : e->n_ctx;
  e->batch = llama_batch_init((int32_t)cap, 0, (int32_t)e->n_seq_max);
  snprintf(e->limits, sizeof e->limits,
           "{\"max_sequence_tokens\":%u,\"max_batch_tokens\":%u,\"max_sequences\":%u,\"dims\":%d,"
           "\"n_vocab\":%d,\"pooling\":\"%s\",\"mode\":\"%s\",\"readout\":\"%s\",\"yes_id\":%d,"
           "\"no_id\":%d,\"labels\":%u,\"rank_score\":\"%s\"}",
           e->n_ctx, e->n_ctx, e->n_seq_max, e->dims, e->n_vocab, pooling_name(e->pooling), mode,
           m == MODE_SCORE ? readout : "none", e->yes_id, e->no_id, e->n_labels,
           m != MODE_SCORE || r != READOUT_RANK ? "none"
           : e->rank_yes_minus_no                ? "yes_minus_no"
                                                 : "first");
  return e;
}

void syn_engine_free(syn_engine *e) {
  if (e == NULL) return;
  syn_generate_end(e);
  if (e->batch.token != NULL) llama_batch_free(e->batch);
  if (e->ctx != NULL) llama_free(e->ctx);
  if (e->model != NULL) llama_model_free(e->model);
  free(e);
}

_Static_assert(SYN_ABI_VERSION == 1u, "the identity string below names ABI 1");

const char *syn_engine_identity(const syn_engine *e) {
  (void)e; /* the same for every engine of this build */
  return "{\"engine\":\"synapse-llama-shim\",\"version\":\"" SYN_SHIM_VERSION
         "\",\"build_flags\":{\"abi\":\"1\",\"backend\":\"cpu\"" SYN_GGML_FLAG
         ",\"llama_cpp\":\"" SYN_LLAMA_RELEASE "\"}}";
}
const char *syn_engine_limits(const syn_engine *e) { return e == NULL ? "{}" : e->limits; }

void syn_engine_set_cancel_flag(syn_engine *e, const int32_t *flag) {
  if (e != NULL) e->cancel = flag;
}

/* ---- embed / score: many sequences per decode ------------------------------------------------ */

static int32_t check_batch(syn_engine *e, const syn_batch *b) {
  if (b == NULL || b->ids == NULL || b->seq_lens == NULL || b->out == NULL || b->seq_status == NULL)
    return fail(SYN_ERR_INVALID_ARGUMENT, "batch has a NULL pointer");
  uint64_t total = 0;
  for (uint32_t i = 0; i < b->n_seqs; i++) {
    if (b->seq_lens[i] < 1) return fail(SYN_ERR_INVALID_ARGUMENT, "sequence %u is empty", i);
    if ((uint32_t)b->seq_lens[i] > e->n_ctx)
      return fail(SYN_ERR_CONTEXT_FULL, "sequence %u has %d tokens, over %u", i, b->seq_lens[i],
                  e->n_ctx);
    total += (uint64_t)b->seq_lens[i];
  }
  if (total != b->n_ids) return fail(SYN_ERR_INVALID_ARGUMENT, "n_ids is not the sum of seq_lens");
  for (uint32_t i = 0; i < b->n_ids; i++) {
    if (b->ids[i] < 0 || b->ids[i] >= e->n_vocab)
      return fail(SYN_ERR_INVALID_ARGUMENT, "token id %d outside the vocabulary", b->ids[i]);
  }
  return SYN_OK;
}

/**
 * Runs sequences [first, first+count) of b as one decode (they fit: tokens <= n_ctx, count <=
 * n_seq_max) and writes their outputs.
 */
static int32_t run_group(syn_engine *e, const syn_batch *b, uint32_t first, uint32_t count,
                         const uint32_t *offsets) {
  llama_memory_clear(llama_get_memory(e->ctx), true);
  struct llama_batch *lb = &e->batch;
  lb->n_tokens = 0;
  bool pooled = e->pooling != LLAMA_POOLING_TYPE_NONE && e->mode != MODE_GENERATE &&
                !(e->mode == MODE_SCORE && e->readout == READOUT_YES_NO);
  int32_t *last_index = calloc(count, sizeof *last_index);
  if (last_index == NULL) return fail(SYN_ERR_OUT_OF_MEMORY, "cannot allocate the batch index");
  for (uint32_t s = 0; s < count; s++) {
    uint32_t seq = first + s;
    int32_t len = b->seq_lens[seq];
    const int32_t *ids = b->ids + offsets[seq];
    for (int32_t i = 0; i < len; i++) {
      int32_t k = lb->n_tokens++;
      lb->token[k] = ids[i];
      lb->pos[k] = i;
      lb->n_seq_id[k] = 1;
      lb->seq_id[k][0] = (llama_seq_id)s;
      lb->logits[k] = pooled || i == len - 1;
    }
    last_index[s] = lb->n_tokens - 1;
  }
  int32_t rc = llama_model_has_encoder(e->model) && !llama_model_has_decoder(e->model)
                   ? llama_encode(e->ctx, *lb)
                   : llama_decode(e->ctx, *lb);
  int32_t st = decode_status(e, rc, e->mode == MODE_SCORE ? "score" : "embed");
  if (st != SYN_OK) {
    free(last_index);
    return st;
  }
  for (uint32_t s = 0; s < count; s++) {
    uint32_t seq = first + s;
    float *out = b->out + (size_t)seq * (size_t)e->dims;
    const float *v;
    if (e->mode == MODE_SCORE && e->readout == READOUT_YES_NO) {
      const float *logits = llama_get_logits_ith(e->ctx, last_index[s]);
      if (logits == NULL) {
        b->seq_status[seq] = SYN_ERR_ENGINE;
        continue;
      }
      out[0] = logits[e->yes_id] - logits[e->no_id];
      b->seq_status[seq] = SYN_OK;
      continue;
    }
    v = pooled ? llama_get_embeddings_seq(e->ctx, (llama_seq_id)s)
               : llama_get_embeddings_ith(e->ctx, last_index[s]);
    if (v == NULL) {
      b->seq_status[seq] = SYN_ERR_ENGINE;
      continue;
    }
    if (e->mode == MODE_SCORE && e->rank_yes_minus_no) {
      /* logit("yes") - logit("no") through the head (from the softmaxed pair: its log ratio;
       * a pair whose "no" underflowed to 0 gives +inf, which the service reports as non-finite) */
      out[0] = e->rank_softmaxed ? logf(v[0]) - logf(v[1]) : v[0] - v[1];
    } else {
      memcpy(out, v, (size_t)e->dims * sizeof(float));
    }
    b->seq_status[seq] = SYN_OK;
  }
  free(last_index);
  return SYN_OK;
}

static int32_t run_batch(syn_engine *e, const syn_batch *b) {
  int32_t st = check_batch(e, b);
  if (st != SYN_OK) return st;
  uint32_t *offsets = malloc((b->n_seqs + 1) * sizeof *offsets);
  if (offsets == NULL) return fail(SYN_ERR_OUT_OF_MEMORY, "cannot allocate offsets");
  offsets[0] = 0;
  for (uint32_t i = 0; i < b->n_seqs; i++) offsets[i + 1] = offsets[i] + (uint32_t)b->seq_lens[i];
  uint32_t first = 0;
  while (first < b->n_seqs) {
    uint32_t count = 0, tokens = 0;
    while (first + count < b->n_seqs && count < e->n_seq_max &&
           tokens + (uint32_t)b->seq_lens[first + count] <= e->n_ctx) {
      tokens += (uint32_t)b->seq_lens[first + count];
      count++;
    }
    st = run_group(e, b, first, count, offsets);
    if (st != SYN_OK) break;
    first += count;
  }
  free(offsets);
  return st;
}

int32_t syn_embed(syn_engine *e, const syn_batch *b) {
  if (e == NULL) return fail(SYN_ERR_INVALID_ARGUMENT, "engine is NULL");
  if (e->mode != MODE_EMBED) return fail(SYN_ERR_UNSUPPORTED, "the engine was not loaded to embed");
  return run_batch(e, b);
}

int32_t syn_score(syn_engine *e, const syn_batch *b) {
  if (e == NULL) return fail(SYN_ERR_INVALID_ARGUMENT, "engine is NULL");
  if (e->mode != MODE_SCORE) return fail(SYN_ERR_UNSUPPORTED, "the engine was not loaded to score");
  return run_batch(e, b);
}

/* ---- generation ------------------------------------------------------------------------------ */

void syn_generate_end(syn_engine *e) {
  if (e == NULL) return;
  if (e->sampler != NULL) llama_sampler_free(e->sampler);
  e->sampler = NULL;
  e->pending = -1;
}

/** Evaluates ids at positions n_past.. in chunks of the batch size; logits for the last only. */
static int32_t eval_ids(syn_engine *e, const int32_t *ids, uint32_t n, const char *what) {
  uint32_t chunk = llama_n_batch(e->ctx);
  for (uint32_t off = 0; off < n; off += chunk) {
    uint32_t m = n - off < chunk ? n - off : chunk;
    if ((uint32_t)e->n_past + m > e->n_ctx)
      return fail(SYN_ERR_CONTEXT_FULL, "%s: %u tokens over the context of %u", what,
                  (uint32_t)e->n_past + m, e->n_ctx);
    struct llama_batch *lb = &e->batch;
    lb->n_tokens = 0;
    for (uint32_t i = 0; i < m; i++) {
      int32_t k = lb->n_tokens++;
      lb->token[k] = ids[off + i];
      lb->pos[k] = e->n_past + (int32_t)i;
      lb->n_seq_id[k] = 1;
      lb->seq_id[k][0] = 0;
      lb->logits[k] = off + i == n - 1;
    }
    int32_t st = decode_status(e, llama_decode(e->ctx, *lb), what);
    if (st != SYN_OK) return st;
    e->n_past += (int32_t)m;
  }
  return SYN_OK;
}

int32_t syn_generate_begin(syn_engine *e, const int32_t *prompt, uint32_t n_prompt,
                           const syn_sampling *s, const char *grammar) {
  if (e == NULL || prompt == NULL || n_prompt == 0)
    return fail(SYN_ERR_INVALID_ARGUMENT, "engine, prompt and a non-empty prompt are required");
  if (e->mode != MODE_GENERATE)
    return fail(SYN_ERR_UNSUPPORTED, "the engine was not loaded to generate");
  syn_generate_end(e);
  for (uint32_t i = 0; i < n_prompt; i++) {
    if (prompt[i] < 0 || prompt[i] >= e->n_vocab)
      return fail(SYN_ERR_INVALID_ARGUMENT, "token id %d outside the vocabulary", prompt[i]);
  }
  struct llama_sampler_chain_params scp = llama_sampler_chain_default_params();
  scp.no_perf = true;
  struct llama_sampler *chain = llama_sampler_chain_init(scp);
  if (s != NULL && s->n_logit_bias > 0) {
    llama_logit_bias *lb = malloc(s->n_logit_bias * sizeof *lb);
    if (lb == NULL) {
      llama_sampler_free(chain);
      return fail(SYN_ERR_OUT_OF_MEMORY, "cannot allocate the logit bias");
    }
    for (uint32_t i = 0; i < s->n_logit_bias; i++) {
      lb[i].token = s->bias_ids[i];
      lb[i].bias = s->bias_values[i];
    }
    llama_sampler_chain_add(chain, llama_sampler_init_logit_bias(e->n_vocab, (int32_t)s->n_logit_bias, lb));
    free(lb);
  }
  if (grammar != NULL) {
    struct llama_sampler *g = llama_sampler_init_grammar(e->vocab, grammar, "root");
    if (g == NULL) {
      llama_sampler_free(chain);
      return fail(SYN_ERR_GRAMMAR_INVALID, "llama.cpp refused the grammar");
    }
    llama_sampler_chain_add(chain, g);
  }
  if (s != NULL && s->repeat_last_n != 0 &&
      (s->repeat_penalty != 1.0f || s->frequency_penalty != 0.0f || s->presence_penalty != 0.0f)) {
    struct llama_sampler *p = llama_sampler_init_penalties(e->n_vocab, s->repeat_last_n, s->repeat_penalty,
                                                           s->frequency_penalty, s->presence_penalty);
    /* The penalties see the prompt too. */
    for (uint32_t i = 0; i < n_prompt; i++) llama_sampler_accept(p, prompt[i]);
    llama_sampler_chain_add(chain, p);
  }
  if (s == NULL || s->temperature <= 0.0f) {
    llama_sampler_chain_add(chain, llama_sampler_init_greedy());
  } else {
    if (s->top_k > 0) llama_sampler_chain_add(chain, llama_sampler_init_top_k(s->top_k));
    if (s->top_p < 1.0f) llama_sampler_chain_add(chain, llama_sampler_init_top_p(s->top_p, 1));
    if (s->min_p > 0.0f) llama_sampler_chain_add(chain, llama_sampler_init_min_p(s->min_p, 1));
    llama_sampler_chain_add(chain, llama_sampler_init_temp(s->temperature));
    llama_sampler_chain_add(chain, llama_sampler_init_dist(s->seed));
  }
  e->sampler = chain;
  llama_memory_clear(llama_get_memory(e->ctx), true);
  e->n_past = 0;
  int32_t st = eval_ids(e, prompt, n_prompt, "prompt");
  if (st != SYN_OK) syn_generate_end(e);
  return st;
}

int32_t syn_generate_next(syn_engine *e, int32_t *out, uint32_t max, uint32_t *n_out,
                          int32_t *finished) {
  if (e == NULL || out == NULL || n_out == NULL || finished == NULL)
    return fail(SYN_ERR_INVALID_ARGUMENT, "a NULL argument");
  *n_out = 0;
  *finished = 0;
  if (e->sampler == NULL) return fail(SYN_ERR_INVALID_ARGUMENT, "no generation was begun");
  while (*n_out < max) {
    if (e->pending >= 0) {
      int32_t tok = e->pending;
      e->pending = -1;
      int32_t st = eval_ids(e, &tok, 1, "generate");
      if (st != SYN_OK) return st;
    }
    llama_token tok = llama_sampler_sample(e->sampler, e->ctx, -1);
    if (llama_vocab_is_eog(e->vocab, tok)) {
      *finished = 1;
      return SYN_OK;
    }
    out[(*n_out)++] = tok;
    e->pending = tok;
  }
  return SYN_OK;
}

/* ---- state ---------------------------------------------------------------------------------- */

size_t syn_state_size(syn_engine *e) {
  return e == NULL || e->mode != MODE_GENERATE ? 0 : llama_state_seq_get_size(e->ctx, 0);
}

int32_t syn_state_save(syn_engine *e, uint8_t *buf, size_t cap, size_t *written) {
  if (e == NULL || buf == NULL || written == NULL)
    return fail(SYN_ERR_INVALID_ARGUMENT, "a NULL argument");
  if (e->mode != MODE_GENERATE) return fail(SYN_ERR_UNSUPPORTED, "state is of generation engines");
  size_t need = llama_state_seq_get_size(e->ctx, 0);
  if (cap < need) return fail(SYN_ERR_INVALID_ARGUMENT, "buffer of %zu bytes, %zu needed", cap, need);
  *written = llama_state_seq_get_data(e->ctx, buf, cap, 0);
  return SYN_OK;
}

int32_t syn_state_restore(syn_engine *e, const uint8_t *buf, size_t n) {
  if (e == NULL || buf == NULL) return fail(SYN_ERR_INVALID_ARGUMENT, "a NULL argument");
  if (e->mode != MODE_GENERATE) return fail(SYN_ERR_UNSUPPORTED, "state is of generation engines");
  syn_generate_end(e);
  llama_memory_clear(llama_get_memory(e->ctx), true);
  if (llama_state_seq_set_data(e->ctx, buf, n, 0) == 0) {
    e->n_past = 0;
    return fail(SYN_ERR_INVALID_ARGUMENT, "llama.cpp refused the snapshot");
  }
  e->n_past = llama_memory_seq_pos_max(llama_get_memory(e->ctx), 0) + 1;
  return SYN_OK;
}

int32_t syn_state_eval(syn_engine *e, const int32_t *ids, uint32_t n, float *out_logits) {
  if (e == NULL || ids == NULL || n == 0 || out_logits == NULL)
    return fail(SYN_ERR_INVALID_ARGUMENT, "a NULL argument or no ids");
  if (e->mode != MODE_GENERATE) return fail(SYN_ERR_UNSUPPORTED, "state is of generation engines");
  int32_t st = eval_ids(e, ids, n, "eval");
  if (st != SYN_OK) return st;
  const float *logits = llama_get_logits_ith(e->ctx, -1);
  if (logits == NULL) return fail(SYN_ERR_ENGINE, "no logits");
  memcpy(out_logits, logits, (size_t)e->n_vocab * sizeof(float));
  return SYN_OK;
}

/* ---- tokenize / test hooks ------------------------------------------------------------------ */

int32_t syn_tokenize(syn_engine *e, const char *text, int32_t len, int32_t parse_special, int32_t *out,
                     int32_t cap) {
  if (e == NULL || text == NULL || (out == NULL && cap > 0)) {
    fail(SYN_ERR_INVALID_ARGUMENT, "a NULL argument");
    return -1;
  }
  int32_t n = llama_tokenize(e->vocab, text, len, out, cap, false, parse_special != 0);
  return n < 0 ? -n : n;
}

void syn_test_abort(void) {
  fprintf(stderr, "synapse llama shim: abort() (test hook)\n");
  abort();
}
