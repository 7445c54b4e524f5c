// The C client of tests/capi/parity.py. Reads a job file of sections: `model DIR`, `task T`,
// `threads N`, `device D`, `truncate 0|1`, `normalize -1|0|1`, `dimensions N`, then inputs
// `ids N id... M type...`, `text HEX` or `pair HEX HEX` ("-" = empty), ended by `run`. Runs
// each section's inputs in one call of the C API and prints every float's bits in hex:
//   V job input rows dim bits...    values (score, embedding rows, probabilities)
//   L job input label-hex bits...   classify: the best label's name and the logits
//   T job input label-hex...        classify: the labels over their thresholds
// A section of task `tokenize` holds `tok TEXT-HEX PAIR-HEX|~ 0|1` lines (~: no pair; 1: with
// special tokens) and prints `K i n ids... type-ids... offsets...` for each.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/sluice.h"

static void die(const char* what) {
  fprintf(stderr, "%s: %s (%s)\n", what, sluice_last_error(), "capi_parity_client");
  exit(1);
}

static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static char* unhex(const char* h) {
  if (strcmp(h, "-") == 0) h = "";
  size_t n = strlen(h) / 2;
  char* s = malloc(n + 1);
  for (size_t i = 0; i < n; ++i) {
    unsigned v;
    sscanf(h + 2 * i, "%2x", &v);
    s[i] = (char)v;
  }
  s[n] = 0;
  return s;
}

static void print_hex_string(const char* s) {
  if (!*s) printf("-");
  for (; *s; ++s) printf("%02x", (unsigned char)*s);
}

typedef struct {
  sluice_input* in;
  size_t n, cap;
} inputs;

static sluice_input* push(inputs* v) {
  if (v->n == v->cap) {
    v->cap = v->cap ? 2 * v->cap : 64;
    v->in = realloc(v->in, v->cap * sizeof *v->in);
  }
  memset(&v->in[v->n], 0, sizeof v->in[0]);
  return &v->in[v->n++];
}

static void free_inputs(inputs* v) {
  for (size_t i = 0; i < v->n; ++i) {
    free((void*)v->in[i].text);
    free((void*)v->in[i].text_pair);
    free((void*)v->in[i].ids);
    free((void*)v->in[i].type_ids);
  }
  v->n = 0;
}

static void tokenize(const char* model_dir, inputs* v) {
  sluice_model* m;
  if (sluice_model_load(model_dir, NULL, &m) != SLUICE_OK) die(model_dir);
  for (size_t i = 0; i < v->n; ++i) {
    sluice_tokens* t;
    /* num_ids carries the line's special-tokens flag */
    if (sluice_tokenize(m, v->in[i].text, v->in[i].text_pair, (int)v->in[i].num_ids, &t) !=
        SLUICE_OK) {
      die("sluice_tokenize");
    }
    const size_t n = sluice_tokens_count(t);
    printf("K %zu %zu", i, n);
    for (size_t k = 0; k < n; ++k) printf(" %d", (int)sluice_tokens_ids(t)[k]);
    for (size_t k = 0; k < n; ++k) printf(" %d", (int)sluice_tokens_type_ids(t)[k]);
    for (size_t k = 0; k < 2 * n; ++k) printf(" %u", (unsigned)sluice_tokens_offsets(t)[k]);
    printf("\n");
    sluice_tokens_free(t);
  }
  sluice_model_free(m);
}

static void run(int job, const char* model_dir, const char* task, const char* device, int threads,
                int truncate, int normalize, int dimensions, inputs* v) {
  sluice_load_options lo;
  sluice_load_options_init(&lo);
  lo.task = task;
  lo.threads = threads;
  lo.device = device;
  sluice_model* m;
  if (sluice_model_load(model_dir, &lo, &m) != SLUICE_OK) die(model_dir);
  sluice_run_options ro;
  sluice_run_options_init(&ro);
  ro.truncate = truncate;
  ro.normalize = normalize;
  ro.dimensions = dimensions;
  if (strcmp(task, "score") == 0) {
    float* s = malloc((v->n + 1) * sizeof *s);
    if (sluice_score(m, v->in, v->n, &ro, s) != SLUICE_OK) die("sluice_score");
    for (size_t i = 0; i < v->n; ++i) printf("V %d %zu 1 1 %08" PRIx32 "\n", job, i, bits(s[i]));
    free(s);
  } else {
    sluice_result* r;
    const int classify = strcmp(task, "classify") == 0;
    if ((classify ? sluice_classify(m, v->in, v->n, &ro, &r)
                  : sluice_embed(m, v->in, v->n, &ro, &r)) != SLUICE_OK) {
      die(task);
    }
    for (size_t i = 0; i < sluice_result_count(r); ++i) {
      size_t rows, dim;
      const float* x = sluice_result_values(r, i, &rows, &dim);
      printf("V %d %zu %zu %zu", job, i, rows, dim);
      for (size_t k = 0; k < rows * dim; ++k) printf(" %08" PRIx32, bits(x[k]));
      printf("\n");
      if (classify) {
        size_t nl;
        const float* lg = sluice_result_logits(r, i, &nl);
        int32_t best = sluice_result_label(r, i);
        const char* name = sluice_model_label(m, (size_t)best);
        char num[16];
        snprintf(num, sizeof num, "%d", (int)best);
        printf("L %d %zu ", job, i);
        print_hex_string(name ? name : num);
        for (size_t k = 0; k < nl; ++k) printf(" %08" PRIx32, bits(lg[k]));
        printf("\nT %d %zu", job, i);
        size_t no;
        const int32_t* over = sluice_result_labels_over_threshold(r, i, &no);
        for (size_t k = 0; k < no; ++k) {
          const char* nm = sluice_model_label(m, (size_t)over[k]);
          snprintf(num, sizeof num, "%d", (int)over[k]);
          printf(" ");
          print_hex_string(nm ? nm : num);
        }
        printf("\n");
      }
    }
    sluice_result_free(r);
  }
  sluice_model_free(m);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s JOB\n", argv[0]);
    return 2;
  }
  FILE* f = fopen(argv[1], "r");
  if (!f) return 2;
  static char line[1 << 20];
  char model[4096] = "", task[64] = "", device[64] = "cpu";
  int threads = 0, truncate = 0, normalize = -1, dimensions = 0, job = 0;
  inputs v = {0};
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (strncmp(line, "model ", 6) == 0) {
      snprintf(model, sizeof model, "%.4000s", line + 6);
    } else if (strncmp(line, "task ", 5) == 0) {
      snprintf(task, sizeof task, "%.60s", line + 5);
    } else if (strncmp(line, "device ", 7) == 0) {
      snprintf(device, sizeof device, "%.60s", line + 7);
    } else if (sscanf(line, "threads %d", &threads) == 1) {
    } else if (sscanf(line, "truncate %d", &truncate) == 1) {
    } else if (sscanf(line, "normalize %d", &normalize) == 1) {
    } else if (sscanf(line, "dimensions %d", &dimensions) == 1) {
    } else if (strncmp(line, "ids ", 4) == 0) {
      sluice_input* in = push(&v);
      char* p = line + 4;
      char* end;
      size_t n = strtoul(p, &end, 10);
      int32_t* ids = malloc((n + 1) * sizeof *ids);
      for (size_t k = 0; k < n; ++k) ids[k] = (int32_t)strtol(end, &end, 10);
      size_t nt = strtoul(end, &end, 10);
      in->ids = ids;
      in->num_ids = n;
      if (nt > 0) {
        int32_t* types = malloc(nt * sizeof *types);
        for (size_t k = 0; k < nt; ++k) types[k] = (int32_t)strtol(end, &end, 10);
        in->type_ids = types;
      }
    } else if (strncmp(line, "text ", 5) == 0) {
      push(&v)->text = unhex(line + 5);
    } else if (strncmp(line, "pair ", 5) == 0) {
      char* b = strchr(line + 5, ' ');
      *b = 0;
      sluice_input* in = push(&v);
      in->text = unhex(line + 5);
      in->text_pair = unhex(b + 1);
    } else if (strncmp(line, "tok ", 4) == 0) {
      char* b = strchr(line + 4, ' ');
      *b = 0;
      char* c = strchr(b + 1, ' ');
      *c = 0;
      sluice_input* in = push(&v);
      in->text = unhex(line + 4);
      in->text_pair = strcmp(b + 1, "~") == 0 ? NULL : unhex(b + 1);
      in->num_ids = (size_t)atoi(c + 1);
      in->ids = NULL;
    } else if (strcmp(line, "run") == 0 && strcmp(task, "tokenize") == 0) {
      tokenize(model, &v);
      free_inputs(&v);
    } else if (strcmp(line, "run") == 0) {
      run(job++, model, task, device, threads, truncate, normalize, dimensions, &v);
      free_inputs(&v);
    } else if (line[0]) {
      fprintf(stderr, "bad job line: %.80s\n", line);
      return 2;
    }
  }
  fclose(f);
  free(v.in);
  return 0;
}
