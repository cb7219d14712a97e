/*
 * Runs an aotc-compiled library from C with nothing but aotc.h:
 *   cc -I abi/include examples/c/run_model.c -ldl -o run_model
 *   ./run_model model.so [calls] [batch]
 * Every float32 input is filled with 0.01 * i (i = element index); dynamic dimensions take
 * `batch` (default: their minimum). Prints metadata, each call's outputs and the buffers,
 * then shows the error a wrong input count gives.
 */
#include "aotc.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define LOAD(name) name##_fn name = (name##_fn)dlsym(lib, #name); if (!name) { fprintf(stderr, "missing %s\n", #name); return 1; }
typedef uint32_t (*aotc_abi_version_fn)(void);
typedef const char *(*aotc_last_error_fn)(void);
typedef AotcStatus (*aotc_model_create_fn)(const char *, AotcModel **);
typedef void (*aotc_model_destroy_fn)(AotcModel *);
typedef const char *(*aotc_in_spec_fn)(const AotcModel *);
typedef int64_t (*aotc_input_count_fn)(const AotcModel *);
typedef AotcStatus (*aotc_input_info_fn)(const AotcModel *, int64_t, AotcValueInfo *);
typedef int64_t (*aotc_output_count_fn)(const AotcModel *);
typedef int64_t (*aotc_buffer_count_fn)(const AotcModel *);
typedef AotcStatus (*aotc_buffer_info_fn)(const AotcModel *, int64_t, AotcValueInfo *);
typedef AotcStatus (*aotc_buffer_read_fn)(const AotcModel *, const char *, const AotcTensor *);
typedef AotcStatus (*aotc_run_fn)(AotcModel *, const AotcTensor *, int64_t, AotcTensor *, int64_t);

static int64_t numel(int32_t ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int32_t i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: %s model.so [calls] [batch]\n", argv[0]); return 2; }
  int calls = argc > 2 ? atoi(argv[2]) : 1;
  int64_t batch = argc > 3 ? atoll(argv[3]) : -1;
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
  LOAD(aotc_abi_version) LOAD(aotc_last_error) LOAD(aotc_model_create) LOAD(aotc_model_destroy)
  LOAD(aotc_in_spec) LOAD(aotc_input_count) LOAD(aotc_input_info) LOAD(aotc_output_count)
  LOAD(aotc_buffer_count) LOAD(aotc_buffer_info) LOAD(aotc_buffer_read) LOAD(aotc_run)

  printf("abi version %u\n", aotc_abi_version());
  AotcModel *m = NULL;
  if (aotc_model_create("cpu", &m) != AOTC_OK) { fprintf(stderr, "create: %s\n", aotc_last_error()); return 1; }
  printf("in_spec %s\n", aotc_in_spec(m));

  int64_t n_in = aotc_input_count(m), n_out = aotc_output_count(m);
  AotcTensor *inputs = calloc((size_t)n_in, sizeof(AotcTensor));
  for (int64_t i = 0; i < n_in; i++) {
    AotcValueInfo info;
    aotc_input_info(m, i, &info);
    int64_t *shape = calloc((size_t)info.ndim + 1, sizeof(int64_t));
    for (int32_t d = 0; d < info.ndim; d++)
      shape[d] = info.sizes[d] >= 0 ? info.sizes[d] : (batch > 0 ? batch : info.dim_min[d]);
    int64_t n = numel(info.ndim, shape);
    printf("input %lld: %s ndim %d dtype code %u bits %u, %lld elements\n", (long long)i, info.name, info.ndim,
           info.dtype.code, info.dtype.bits, (long long)n);
    if (info.kind != AOTC_KIND_TENSOR || info.dtype.code != 2 || info.dtype.bits != 32) {
      fprintf(stderr, "this example fills float32 tensors only\n");
      return 1;
    }
    float *data = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t e = 0; e < n; e++) data[e] = 0.01f * (float)e;
    inputs[i] = (AotcTensor){data, {1, 0}, info.ndim, info.dtype, shape, NULL, 0};
  }

  AotcTensor *outputs = calloc((size_t)n_out, sizeof(AotcTensor));
  for (int c = 0; c < calls; c++) {
    if (aotc_run(m, inputs, n_in, outputs, n_out) != AOTC_OK) { fprintf(stderr, "run: %s\n", aotc_last_error()); return 1; }
    for (int64_t o = 0; o < n_out; o++) {
      const float *v = (const float *)outputs[o].data;
      int64_t n = numel(outputs[o].ndim, outputs[o].shape);
      printf("call %d output %lld:", c, (long long)o);
      for (int64_t e = 0; e < n; e++) printf(" %.9g", v[e]);
      printf("\n");
    }
  }

  for (int64_t b = 0; b < aotc_buffer_count(m); b++) {
    AotcValueInfo info;
    aotc_buffer_info(m, b, &info);
    int64_t n = numel(info.ndim, info.sizes);
    float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
    AotcTensor dst = {v, {1, 0}, info.ndim, info.dtype, (int64_t *)info.sizes, NULL, 0};
    if (aotc_buffer_read(m, info.name, &dst) != AOTC_OK) { fprintf(stderr, "buffer: %s\n", aotc_last_error()); return 1; }
    printf("buffer %s:", info.name);
    for (int64_t e = 0; e < n && info.dtype.code == 2; e++) printf(" %g", v[e]);
    printf("\n");
    free(v);
  }

  AotcStatus st = aotc_run(m, inputs, n_in + 1, outputs, n_out);
  printf("wrong input count -> status %d: %s\n", (int)st, aotc_last_error());
  st = aotc_run(NULL, inputs, n_in, outputs, n_out);
  printf("null model -> status %d: %s\n", (int)st, aotc_last_error());

  aotc_model_destroy(m);
  dlclose(lib);
  return 0;
}
