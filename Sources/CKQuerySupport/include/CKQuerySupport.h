#ifndef KQUERY_SUPPORT_H
#define KQUERY_SUPPORT_H

/// A hint to bring the cache line at `address` closer; never faults, whatever the address.
/// Swift has no prefetch intrinsic, and scans over records chase one pointer per record.
static inline void kquery_prefetch(const void *address) {
    __builtin_prefetch(address, 0, 3);
}

#endif
