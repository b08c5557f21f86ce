// Most of the support target is inline in its header; what needs feature macros set before the
// system headers are read (and so cannot be inline in a header Swift imports) is here.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include "CKQuerySupport.h"
#if defined(__GLIBC__)
#include <malloc.h>
#endif

int kquery_start_writeback(int descriptor) {
#if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
    return sync_file_range(descriptor, 0, 0, SYNC_FILE_RANGE_WRITE) == 0 ? 0 : errno;
#else
    (void)descriptor;
    return 0;
#endif
}

int kquery_fix_heap_thresholds(size_t mmap_bytes, size_t trim_bytes) {
#if defined(__GLIBC__) && defined(M_MMAP_THRESHOLD) && defined(M_TRIM_THRESHOLD)
    return mallopt(M_MMAP_THRESHOLD, (int)mmap_bytes) == 1 && mallopt(M_TRIM_THRESHOLD, (int)trim_bytes) == 1;
#else
    (void)mmap_bytes;
    (void)trim_bytes;
    return 0;
#endif
}
