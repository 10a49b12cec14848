/* Counts malloc calls, on every thread, while counting is on. test_shm.py builds
 * it and preloads it (LD_PRELOAD) into the ranks; the rank suite reads the count
 * through ctypes to check how often a small collective allocates. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

static void* (*next_malloc)(size_t);
static long count;
static int on;

void* malloc(size_t bytes) {
  if (!next_malloc) next_malloc = (void* (*)(size_t))dlsym(RTLD_NEXT, "malloc");
  if (__atomic_load_n(&on, __ATOMIC_RELAXED)) __atomic_add_fetch(&count, 1, __ATOMIC_RELAXED);
  return next_malloc(bytes);
}

void horo_test_count_mallocs(int enable) { __atomic_store_n(&on, enable, __ATOMIC_RELAXED); }

long horo_test_mallocs(void) { return __atomic_load_n(&count, __ATOMIC_RELAXED); }
