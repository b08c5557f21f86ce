#ifndef KQUERY_SUPPORT_H
#define KQUERY_SUPPORT_H

/// A hint to bring the cache line at `address` closer; never faults, whatever the address.
/// Swift has no prefetch intrinsic, and scans over records chase one pointer per record.
static inline void kquery_prefetch(const void *address) {
    __builtin_prefetch(address, 0, 3);
}

#include <stdint.h>

/// The Swift runtime's retain of `count` references at once (one atomic add, where `count`
/// retains of a shared object are as many). It returns `object`.
void *swift_retain_n(void *object, uint32_t count);

#endif
