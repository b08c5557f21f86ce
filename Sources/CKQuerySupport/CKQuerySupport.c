// Most of the support target is inline in its header; what needs feature macros set before the
// system headers are read (and so cannot be inline in a header Swift imports) is here.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include "CKQuerySupport.h"

int kquery_start_writeback(int descriptor) {
#if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
    return sync_file_range(descriptor, 0, 0, SYNC_FILE_RANGE_WRITE) == 0 ? 0 : errno;
#else
    (void)descriptor;
    return 0;
#endif
}
