/*
 * The raw-library baseline of bench:generate: a minimal greedy loop on the prebuilt libllama,
 * with none of Synapse (no worker, no protocol, no tokenizer). The benchmark builds it with the
 * machine's C compiler against llama.h of the bundled release (node_modules/.synapse/include,
 * kept by scripts/build_shim) and runs it in its own process.
 *
 * Usage: raw_llama MODEL.gguf THREADS N_CTX N_GEN ROUNDS < prompts
 *   prompts: one line per prompt, its token ids separated by spaces.
 * Prints, for each round and prompt, "ids <id> <id> …" (the generated ids, to compare with
 * Synapse's), then "total_tokens N" and "total_ms X" (prompt evaluation included, as Synapse's
 * microllm.oneshot is timed).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void quiet(enum ggml_log_level level, const char *text, void *data) {
  (void)level, (void)text, (void)data;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: raw_llama MODEL THREADS N_CTX N_GEN ROUNDS < prompts\n");
    return 2;
  }
  int threads = atoi(argv[2]), n_ctx = atoi(argv[3]), n_gen = atoi(argv[4]), rounds = atoi(argv[5]);
  llama_log_set(quiet, NULL);
  /* The CPU backend variants lie beside libllama (as the shim loads them). */
  Dl_info info;
  if (dladdr((void *)llama_backend_init, &info) != 0 && info.dli_fname != NULL) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    char *slash = strrchr(dir, '/');
    if (slash != NULL) *slash = '\0';
    ggml_backend_load_all_from_path(dir);
  }
  llama_backend_init();
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  struct llama_model *model = llama_model_load_from_file(argv[1], mp);
  if (model == NULL) return 1;
  const struct llama_vocab *vocab = llama_model_get_vocab(model);
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)n_ctx;
  cp.n_batch = (uint32_t)n_ctx;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.no_perf = true;
  struct llama_context *ctx = llama_init_from_model(model, cp);
  if (ctx == NULL) return 1;
  struct llama_sampler *greedy = llama_sampler_init_greedy();

  int32_t prompts[64][512];
  int n_prompt[64], n_prompts = 0;
  char line[8192];
  while (n_prompts < 64 && fgets(line, sizeof line, stdin) != NULL) {
    int n = 0;
    for (char *tok = strtok(line, " \n"); tok != NULL && n < 512; tok = strtok(NULL, " \n")) {
      prompts[n_prompts][n++] = atoi(tok);
    }
    if (n > 0) n_prompt[n_prompts++] = n;
  }
  long total = 0;
  double total_ms = 0;
  for (int r = 0; r < rounds; r++) {
    for (int p = 0; p < n_prompts; p++) {
      double t0 = now_ms();
      llama_memory_clear(llama_get_memory(ctx), true);
      if (llama_decode(ctx, llama_batch_get_one(prompts[p], n_prompt[p])) != 0) return 1;
      int32_t out[1024];
      int n = 0;
      while (n < n_gen) {
        llama_token t = llama_sampler_sample(greedy, ctx, -1);
        if (llama_vocab_is_eog(vocab, t)) break;
        out[n++] = t;
        if (n == n_gen) break;
        if (llama_decode(ctx, llama_batch_get_one(&t, 1)) != 0) return 1;
      }
      total_ms += now_ms() - t0;
      total += n;
      printf("ids");
      for (int i = 0; i < n; i++) printf(" %d", out[i]);
      printf("\n");
    }
  }
  printf("total_tokens %ld\ntotal_ms %.3f\n", total, total_ms);
  llama_sampler_free(greedy);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
