/* A kernel thread's work space, kept between calls (its pages are touched once, not at every call: a fresh 20 MB
 * costs thousands of page faults) and freed when the thread ends; one larger than KEEP_BYTES is freed after the
 * call (trim_space; a GPT-2 embedding's Newton-Schulz space is 0.5 GB). Included after fused_common.h by the kernels
 * that keep whole matrices in the cache (each translation unit has its own per-thread space). */
#ifndef GRADAX_THREAD_SPACE_H
#define GRADAX_THREAD_SPACE_H

#include <pthread.h>
#include <sys/mman.h>

#define KEEP_BYTES ((size_t)64 << 20)
typedef struct {
    void* base;
    size_t bytes;
} Space;

static pthread_key_t space_key;
static pthread_once_t space_once = PTHREAD_ONCE_INIT;

static void space_free(void* p) {
    Space* space = (Space*)p;
    free(space->base);
    free(space);
}

static void space_key_init(void) { pthread_key_create(&space_key, space_free); }

static void* thread_space(size_t bytes) {
    pthread_once(&space_once, space_key_init);
    Space* space = (Space*)pthread_getspecific(space_key);
    if (space == NULL) {
        space = (Space*)calloc(1, sizeof(Space));
        if (space == NULL || pthread_setspecific(space_key, space) != 0) {
            free(space);
            return NULL;
        }
    }
    if (space->bytes < bytes) {
        free(space->base);
        /* 2 MB pages where the system gives them (the products and packings read X's rows far apart) */
        size_t huge = (size_t)1 << 21, rounded = (bytes + huge - 1) & ~(huge - 1);
        space->base = aligned_alloc(huge, rounded);
        space->bytes = space->base ? rounded : 0;
#ifdef MADV_HUGEPAGE
        if (space->base) madvise(space->base, rounded, MADV_HUGEPAGE);
#endif
    }
    return space->base;
}

/* Frees this thread's work space if it is larger than KEEP_BYTES. */
static void trim_space(void) {
    Space* space = (Space*)pthread_getspecific(space_key);
    if (space != NULL && space->bytes > KEEP_BYTES) {
        free(space->base);
        space->base = NULL;
        space->bytes = 0;
    }
}

/* bytes rounded up to a cache line (the parts of a work space start on one) */
static inline size_t up64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

#endif
