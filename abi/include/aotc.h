/*
 * aotc.h: the C ABI of a shared library compiled by aotc (ABI version 1).
 *
 * A compiled model.so exports exactly the functions below. Load it with dlopen, look
 * them up with dlsym (or link against it), then:
 *
 *   AotcModel *m;  aotc_model_create("cpu", &m);
 *   ... aotc_input_info / aotc_output_info / aotc_in_spec ...
 *   aotc_run(m, inputs, n_inputs, outputs, n_outputs);   // once per call
 *   aotc_model_destroy(m);
 *
 * Conventions
 * - Every fallible function returns an AotcStatus; on failure aotc_last_error() holds a
 *   message naming what is wrong (input index and name, expected vs got). The message
 *   is per thread and valid until the next failing call on that thread, or until the
 *   library is unloaded (dlclose), whichever comes first.
 * - A library leaves nothing behind after its last instance: aotc_model_destroy of the
 *   last one joins its worker threads, and then dlclose unloads it (no thread, thread-local
 *   destructor, pthread key or allocation of it stays), so a process may load and unload
 *   new libraries (model versions) without end. Strings and value infos the library
 *   hands out are valid only while it is loaded.
 * - No function aborts the process or lets an exception/panic escape.
 * - Tensors are DLPack DLTensors (same layout). Inputs may be strided (copied when not
 *   contiguous); strides == NULL means contiguous; negative strides are allowed (data +
 *   byte_offset is the element at index 0). Python scalars that export specialised are
 *   passed as 0-dim CPU tensors (float64 / int64 / bool) and checked: the exported value,
 *   and its type (AOTC_ERR_CONSTANT / AOTC_ERR_DTYPE otherwise, as torch refuses them). A
 *   python int export kept dynamic (a SymInt input, kind AOTC_KIND_INT) is passed the
 *   same way, a 0-dim int64 on the CPU: its value binds the program's symbol, within the
 *   range export recorded (AOTC_ERR_RANGE otherwise).
 * - An output whose kind (aotc_output_info) is AOTC_KIND_INT / FLOAT / BOOL is a python
 *   scalar the program returns (a SymInt, SymFloat or SymBool, e.g. x.shape[0] * 2): a
 *   0-dim int64 / float64 / bool tensor like any output, which bindings turn into a
 *   python int / float / bool (kinds of outputs added within ABI version 1: a library
 *   compiled before reports every output as AOTC_KIND_TENSOR).
 * - Every descriptor (of aotc_run, aotc_buffer_read/write) is checked before any memory
 *   is read through it: ndim first (it must be the expected rank: shape is read only
 *   then), sizes >= 0, and the element count, byte size and the bytes the strides and
 *   byte_offset reach must not overflow 64 bits or the address space; data may be NULL
 *   only for an empty tensor. The library cannot check that data really holds those
 *   bytes: that, and shape/strides holding ndim entries, is the caller's part.
 * - Inputs are the flattened leaves of in_spec, in order (torch.utils._pytree).
 * - Outputs are allocated by the model: aotc_run fills `outputs` with contiguous
 *   tensors (strides NULL) whose data and shape the instance owns; they stay valid
 *   until the next aotc_run (or aotc_run_into) or aotc_model_destroy on that instance.
 *   Copy them to keep, or have aotc_run_into write them into memory of your own.
 *   `inputs` and `outputs` may be the same array (inputs are read first).
 * - Aliasing: an input may alias another input, or an output of an earlier call of the
 *   same instance (e.g. pass an output straight back in). The call computes what it
 *   would on separate copies: the instance moves its own memory that an input lives in
 *   out of the way, so nothing the call writes lands there except the write-back of a
 *   mutated input. Such an output's data stays valid (holding the new value, if the
 *   program mutated that input) until a later aotc_run that no longer takes it as an
 *   input, or aotc_model_destroy; its shape array may then show the newer output's shape.
 *   Mutated inputs that alias each other are written back in input order: where they
 *   overlap, the later input's new value wins.
 * - Buffers (model state) mutated by the program keep their new value for the next call
 *   of the same instance; instances never share state. User inputs the program mutates
 *   are written back into the caller's tensors after the call.
 * - A failed aotc_run never changes buffers or the caller's inputs. A call refused by a
 *   check on the data itself (an index out of range: AOTC_ERR_INDEX; a value that
 *   drives a size, such as nonzero's row count or tensor.item(), outside the range
 *   export recorded: AOTC_ERR_RANGE, or a size rule it breaks: AOTC_ERR_SHAPE) may have
 *   overwritten the previous call's outputs; a call refused on shapes has not.
 * - An output's shape may depend on the data (nonzero): read it from the returned
 *   descriptor; aotc_output_info reports such a dimension as dynamic.
 * - One instance must not be used by two threads at once; distinct instances may.
 * - Weights: linked into the library, or (aotc compile --external-weights, automatic above
 *   1 GiB) in a safetensors file beside it, `<stem>.weights.safetensors`, which
 *   aotc_model_create maps read-only; see "Weights" below.
 */
#ifndef AOTC_H
#define AOTC_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AOTC_ABI_VERSION 1

typedef enum {
  AOTC_OK = 0,
  AOTC_ERR_INVALID_ARGUMENT = 1, /* null pointer, bad index, bad device string, strides or
                                    byte_offset reaching outside the address space */
  AOTC_ERR_INPUT_COUNT = 2,
  AOTC_ERR_DTYPE = 3,
  AOTC_ERR_RANK = 4,
  AOTC_ERR_SHAPE = 5,            /* static size differs, a shared dynamic size disagrees, or a
                                    size rule of the program (a guard) fails for these sizes */
  AOTC_ERR_RANGE = 6,            /* dynamic size outside its range constraint */
  AOTC_ERR_CONSTANT = 7,         /* a specialised scalar input got another value */
  AOTC_ERR_DEVICE = 8,
  AOTC_ERR_NOT_FOUND = 9,        /* no buffer of that name */
  AOTC_ERR_OUT_OF_MEMORY = 10,
  AOTC_ERR_INTERNAL = 11,        /* a bug of aotc's: a panic caught at the ABI, or an extern
                                    kernel (convolution, pooling, FFT...) called with arguments
                                    it cannot run; the call's outputs are not valid */
  AOTC_ERR_INDEX = 12,           /* a data-dependent index (gather, embedding...) out of range */
  AOTC_ERR_WEIGHTS = 13,         /* a weights file or buffer missing, unreadable, not an aotc
                                    weights file, or not this library's: another compilation
                                    (beside the library), a tensor missing, another dtype or
                                    shape, another layout, truncated, unaligned (added within
                                    ABI version 1) */
  AOTC_ERR_ASSERT = 14,          /* a check of the program itself (torch._check, an assert on
                                    data such as one_hot's class range) fails for this call,
                                    where PyTorch raises (added within ABI version 1) */
  AOTC_ERR_CPU = 15              /* aotc_model_create: the library's code needs a CPU feature
                                    this machine lacks (compiled with aotc compile --cpu for a
                                    newer CPU; the message names the feature) (added within
                                    ABI version 1) */
} AotcStatus;

/* DLPack-compatible types (identical layout to dlpack.h's DLDevice/DLDataType/DLTensor). */
typedef struct { int32_t device_type; int32_t device_id; } AotcDevice;      /* 1 = CPU */
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } AotcDataType; /* code: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool */
typedef struct {
  void *data;
  AotcDevice device;
  int32_t ndim;
  AotcDataType dtype;
  int64_t *shape;
  int64_t *strides;     /* in elements; NULL = contiguous */
  uint64_t byte_offset;
} AotcTensor;

/* What an input or output is: a tensor, or a python scalar passed or returned as a 0-dim
 * CPU tensor of float64 / int64 / bool (see Conventions). */
enum { AOTC_KIND_TENSOR = 0, AOTC_KIND_FLOAT = 1, AOTC_KIND_INT = 2, AOTC_KIND_BOOL = 3,
       /* inputs export specialised to a python str (pass its UTF-8 bytes as a 1-D uint8
        * CPU tensor, checked: AOTC_ERR_CONSTANT when they differ) or to None (pass any
        * 0-dim CPU tensor, not read); added within ABI version 1 */
       AOTC_KIND_STR = 4, AOTC_KIND_NONE = 5 };

/* Metadata of one input, output or buffer; pointers are owned by the instance.
 * sizes[i] == -1 marks a dynamic dimension in [dim_min[i], dim_max[i]] (dim_max -1: unbounded). */
typedef struct {
  const char *name;
  int32_t kind;
  AotcDataType dtype;
  int32_t ndim;
  const int64_t *sizes;
  const int64_t *dim_min;
  const int64_t *dim_max;
} AotcValueInfo;

typedef struct AotcModel AotcModel;

uint32_t aotc_abi_version(void);
const char *aotc_last_error(void);

/* device: "cpu" (or "cpu:0") for CPU builds. Uses the default number of threads. */
AotcStatus aotc_model_create(const char *device, AotcModel **out);
/* As aotc_model_create, running each call on up to num_threads threads (the caller's
 * among them). num_threads <= 0: the default, $AOTC_NUM_THREADS if set, else the cores
 * this process may use. Threads come from one pool per loaded library, shared by its
 * instances: calls of several instances at once share the cores instead of
 * oversubscribing them; the pool stops with the last instance that uses it. */
AotcStatus aotc_model_create_threads(const char *device, int64_t num_threads, AotcModel **out);
void aotc_model_destroy(AotcModel *model);

/* The manifest the compiler embedded (JSON); NULL if unreadable. */
const char *aotc_metadata_json(void);
/* pytree TreeSpecs of the call, JSON as in torch.export. */
const char *aotc_in_spec(const AotcModel *model);
const char *aotc_out_spec(const AotcModel *model);

int64_t aotc_input_count(const AotcModel *model);
AotcStatus aotc_input_info(const AotcModel *model, int64_t index, AotcValueInfo *out);
int64_t aotc_output_count(const AotcModel *model);
AotcStatus aotc_output_info(const AotcModel *model, int64_t index, AotcValueInfo *out);

/* Buffers are the model's mutable state (torch.export's mutated buffers), kept by the
 * instance across calls. A program that draws random numbers (rand, randn, randperm) also
 * has the int64 scalar buffer "__aotc_rng_state": its generator's seed, advanced by one
 * after every call; writing it reseeds the instance (the same seed draws the same numbers). */
int64_t aotc_buffer_count(const AotcModel *model);
AotcStatus aotc_buffer_info(const AotcModel *model, int64_t index, AotcValueInfo *out);
/* Copies buffer `name` into dst (same dtype and shape; any strides). */
AotcStatus aotc_buffer_read(const AotcModel *model, const char *name, const AotcTensor *dst);
/* Overwrites buffer `name` from src (same dtype and shape; any strides). */
AotcStatus aotc_buffer_write(AotcModel *model, const char *name, const AotcTensor *src);

AotcStatus aotc_run(AotcModel *model, const AotcTensor *inputs, int64_t n_inputs,
                    AotcTensor *outputs, int64_t n_outputs);

/* Profiling (added within ABI version 1: a library compiled before lacks these three;
 * look them up with dlsym). The program is a list of kernels (loops, GEMMs, library
 * calls), each computing one or more graph nodes; the manifest (aotc_metadata_json:
 * "kernels", indexing "nodes") names them, in this order. While profiling is on, each
 * aotc_run of the instance times every kernel (wall time on the calling thread, threads
 * included). Off, it costs a test per kernel. */
int64_t aotc_kernel_count(const AotcModel *model);  /* -1 for a null model */
/* on != 0: starts profiling from zero; on == 0: stops it, keeping the totals readable. */
AotcStatus aotc_profile_enable(AotcModel *model, int32_t on);
/* Totals over the calls that succeeded since profiling was turned on: their number
 * (*calls), their time inside aotc_run (*call_ns) and each kernel's time (kernel_ns,
 * room for n_kernels >= aotc_kernel_count entries; the first aotc_kernel_count are
 * written), in nanoseconds. The time aotc_run spends outside the kernels is its own:
 * checking inputs, allocating, copying. */
AotcStatus aotc_profile_read(const AotcModel *model, int64_t *calls, double *call_ns,
                             double *kernel_ns, int64_t n_kernels);

/* Weights (added within ABI version 1: a library compiled before lacks these four; look
 * them up with dlsym).
 * A library's weights are linked into it, or live in a weights file: safetensors with
 * every tensor 64-byte aligned, holding the weights as the library reads them (GEMM
 * operands packed, batch norms folded, initial values of buffers) and, in its metadata,
 * the fingerprint of that structure and the id of its values. aotc_model_create takes the
 * library's own: linked in, or the file its compilation wrote beside it (found through the
 * library's own path; a file of another compilation there is refused). The calls below
 * take any weights file of the library's structure (the same tensors, dtypes, shapes and
 * layout: `aotc compile --external-weights --weights NEW.safetensors` of the same program
 * writes one), whatever its values; an embedded library takes one too.
 * A file is mapped read-only, once per process: the instances that use the same file
 * share the mapping, unmapped with the last of them. Do not truncate or rewrite a weights
 * file in place while a process uses it (reading a page past a truncated end raises
 * SIGBUS); aotc writes them through a rename, which is safe.
 * Everything in a file or buffer is checked before use (header, every tensor's presence,
 * dtype, shape, bounds and alignment, the structure fingerprint): a mismatch fails with
 * AOTC_ERR_WEIGHTS and a message naming the file, the tensor, and expected vs got. */

/* As aotc_model_create_threads, with the weights file at weights_path (NULL: the
 * library's own). */
AotcStatus aotc_model_create_weights(const char *device, int64_t num_threads,
                                     const char *weights_path, AotcModel **out);
/* As aotc_model_create_weights, from the bytes of a weights file (len bytes at data),
 * which are copied: the caller may free them when the call returns. */
AotcStatus aotc_model_create_weights_bytes(const char *device, int64_t num_threads,
                                           const void *data, uint64_t len, AotcModel **out);
/* Swaps the instance's weights for the weights file at path, checked first: on failure
 * the instance is unchanged. State buffers restart from the file's initial values (as
 * torch's load_state_dict). Like aotc_run, it must not run while another thread uses the
 * instance; outputs of earlier calls stay valid (they never point into weights). */
AotcStatus aotc_load_weights(AotcModel *model, const char *path);
/* As aotc_load_weights, from the bytes of a weights file (copied). */
AotcStatus aotc_load_weights_bytes(AotcModel *model, const void *data, uint64_t len);

/* Outputs into the caller's memory (added within ABI version 1: a library compiled before
 * lacks these two; look them up with dlsym).
 * aotc_output_shapes: the shape of each output of a call on `inputs`, without running it:
 * output 0's dimensions, then output 1's, ... into `shapes` (room for n_dims >= the sum
 * of the outputs' ranks). Inputs are checked as aotc_run checks them. A dimension that
 * depends on the data (nonzero's row count) is -1: such an output is known only after the
 * call; use aotc_run for it.
 * aotc_run_into: as aotc_run, but output i is written into the caller's tensor
 * outputs[i], which must have the output's dtype and exactly the shape this call computes
 * (AOTC_ERR_SHAPE otherwise), live on the CPU, and share no byte with another output, an
 * input, or memory of the instance (an earlier aotc_run's outputs): AOTC_ERR_INVALID_ARGUMENT.
 * Any strides: a contiguous output is written in place by the kernel that computes it, no
 * copy made; a strided one (or one whose value is also the program's new state, or a
 * second output of one value) is copied in. On failure the caller's inputs and the state
 * are unchanged; a call refused by a check on the data (see aotc_run) may have written
 * some outputs. The outputs of an earlier aotc_run on the instance stay valid as after an
 * aotc_run. */
AotcStatus aotc_output_shapes(const AotcModel *model, const AotcTensor *inputs, int64_t n_inputs,
                              int64_t *shapes, int64_t n_dims);
AotcStatus aotc_run_into(AotcModel *model, const AotcTensor *inputs, int64_t n_inputs,
                         const AotcTensor *outputs, int64_t n_outputs);

/* CUDA (added within ABI version 1: look it up with dlsym). A library compiled with
 * `aotc compile --device cuda` runs on a GPU: aotc_model_create("cuda" or "cuda:N") opens
 * the driver (libcuda.so.1) at run time (no driver or no such device: AOTC_ERR_DEVICE with
 * the reason), uses the device's primary context (pointers interoperate with PyTorch's),
 * JIT-compiles the library's PTX once (a failure carries the JIT log) and uploads the
 * weights once. Tensor inputs and outputs are then CUDA memory of that device (DLPack
 * device type 2, device_id N; contiguous for now): a CPU tensor is AOTC_ERR_DEVICE, never
 * copied. Python-scalar inputs stay 0-dim CPU tensors. aotc_buffer_read/write take CPU
 * tensors. Each call runs on the instance's stream and waits for it before returning.
 * aotc_set_stream: that stream (a CUstream of the device; NULL: the legacy default
 * stream); AOTC_ERR_DEVICE on a CPU instance. */
AotcStatus aotc_set_stream(AotcModel *model, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* AOTC_H */
