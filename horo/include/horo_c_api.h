/* horo's narrow C interface: the contract a framework op library (today the
 * TensorFlow ops in plugins/tensorflow/ops/) compiles against. Plain C, no
 * horo or framework headers, so an op library built against any TensorFlow
 * talks to any build of the core.
 *
 * The op library never links against horo._core: Python reads the address of
 * the core's function table (horo._core.c_api_address()) and hands it to the
 * op library's `horo_set_c_api` once, with ctypes. No RTLD_GLOBAL needed.
 */
#ifndef HORO_C_API_H_
#define HORO_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change; the op library refuses another version. */
#define HORO_C_API_VERSION 1

/* Why a collective failed, so a framework can raise the matching error class. */
enum horo_status {
  HORO_OK = 0,
  HORO_INVALID_ARGUMENT = 1, /* bad input on some rank: splits, root rank, dtype, a duplicate name */
  HORO_PRECONDITION = 2,     /* ranks disagree (shape, dtype, op, ...) or one never submitted */
  HORO_ABORTED = 3,          /* horo shut down (or was never initialized) */
  HORO_UNKNOWN = 4           /* the collective itself failed */
};

/* One collective on raw host buffers; the codes are horo's (horo/dtypes.py,
 * horo.Sum..., _core.collective_codes). */
struct horo_request {
  int collective;
  const char* name; /* ranks match tensors by (process set, name) */
  const void* input;
  void* output; /* NULL: the core allocates it (allgather, alltoall, join) */
  int dtype;
  const int64_t* shape;
  int ndim;
  int op;
  double prescale, postscale;
  int root;              /* a global rank */
  const int64_t* splits; /* alltoall: rows to each rank */
  int nsplits;
  int process_set;
};

/* What a completion callback sees. Every pointer is valid only during the call:
 * copy what you need (a core-allocated output in particular). */
struct horo_result {
  int status; /* enum horo_status */
  const char* message; /* "" on success; else horo's message (tensor, ranks, difference) */
  const void* data;    /* core-allocated output, or NULL */
  size_t nbytes;
  const int64_t* shape;
  int ndim;
  const int64_t* received_splits; /* alltoall: rows from each rank */
  int nreceived;
  int64_t value; /* join: the last rank to join */
};

/* Called exactly once per submitted collective, from horo's background thread
 * (or from submit's caller when the core has already stopped). Must not block. */
typedef void (*horo_done_fn)(void* user, const struct horo_result* result);

struct horo_c_api {
  int version; /* HORO_C_API_VERSION */
  /* Hands the collective to the background thread and returns its handle (> 0).
   * On an immediate refusal returns 0, does NOT call `done`, and writes the
   * status to *status and the message into `error` (NUL-terminated). */
  int (*submit)(const struct horo_request* request, horo_done_fn done, void* user, int* status, char* error,
                size_t error_len);
  /* 1 once the handle completed (its callback has run or is running). */
  int (*poll)(int handle);
  /* rank, size, local_rank, local_size, cross_rank, cross_size; -1 before horo.init(). */
  int (*process_info)(int what);
};

enum horo_info { HORO_RANK = 0, HORO_SIZE, HORO_LOCAL_RANK, HORO_LOCAL_SIZE, HORO_CROSS_RANK, HORO_CROSS_SIZE };

/* The core's table, inside horo._core (which exports no C symbol): Python passes its address on
   (horo._core.c_api_address()). */
const struct horo_c_api* horo_c_api_table(void);

#ifdef __cplusplus
}
#endif

#endif /* HORO_C_API_H_ */
