#ifndef KQUERY_SUPPORT_H
#define KQUERY_SUPPORT_H

/// A hint to bring the cache line at `address` closer; never faults, whatever the address.
/// Swift has no prefetch intrinsic, and scans over records chase one pointer per record.
static inline void kquery_prefetch(const void *address) {
    __builtin_prefetch(address, 0, 3);
}

#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

/// Asks the kernel to back the whole 2 MiB pages inside [address, address + length) with huge
/// pages (Linux transparent huge pages, when they are enabled for `madvise`). Tables of hundreds
/// of megabytes read at random otherwise miss the TLB on nearly every read. Advice only: where it
/// is not supported, or refused, nothing changes.
static inline void kquery_advise_huge_pages(void *address, size_t length) {
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t start = ((uintptr_t)address + huge - 1) & ~(huge - 1);
    uintptr_t end = ((uintptr_t)address + length) & ~(huge - 1);
    if (end > start) (void)madvise((void *)start, end - start, MADV_HUGEPAGE);
#else
    (void)address;
    (void)length;
#endif
}

#if defined(__linux__)
#include <malloc.h>
#endif

/// Bytes the C heap has handed out and not taken back (small blocks in use plus mapped ones), or
/// 0 where unknown. Unlike the resident set it does not drop when freed pages go back to the
/// system, so its change across one step is that step's memory. (glibc's `mallinfo2` returns a
/// struct Swift cannot call for safely through a plain declaration.)
static inline size_t kquery_heap_bytes(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 info = mallinfo2();
    return info.uordblks + info.hblkhd;
#else
    return 0;
#endif
}

/// Starts writing the file's dirty pages to disk and returns without waiting for them (Linux's
/// `sync_file_range` with `SYNC_FILE_RANGE_WRITE`), so that a later `fdatasync` finds most of them
/// written. Returns 0, or the error number; elsewhere it does nothing and returns 0.
int kquery_start_writeback(int descriptor);

/// Fixes the size from which the C heap (glibc) maps each block from the system and unmaps it when
/// freed, instead of the threshold glibc moves as blocks come and go. A server passing megabyte
/// buffers between threads otherwise has them mapped, faulted in and unmapped while the threshold
/// is low, then left in per-thread heaps once it has risen. Also fixes how much free memory the top
/// of a heap keeps before it is given back (`trim_bytes`): with the mmap threshold fixed glibc leaves
/// it at 128 KiB, so the pages of each freed megabyte went back to the system and were faulted in
/// again for the next one. Returns whether both were set.
int kquery_fix_heap_thresholds(size_t mmap_bytes, size_t trim_bytes);

#endif
