// sdfg_scan: the buffer cache of persistent_transients="grow" (sdfg_scan.persistent): one buffer per heap
// transient of a marked SDFG, kept in the program's state and allocated again, larger, when a call
// outgrows it; freed with the state.
//
// Buffers of SDFG_SCAN_HUGE_MIN bytes or more start on a 2 MiB boundary, their size is rounded up to
// 2 MiB (a later call that fits the rounded size reuses the buffer), and on Linux they are advised for
// transparent huge pages (madvise(MADV_HUGEPAGE); a no-op where THP is off or "never"). gt4py's
// [Cell, K] transients are read a level at a time: with cells contiguous, each level of a block of
// cells lies in another 4 KiB page, so a column kernel touches a new page every few vectors. 2 MiB pages
// make those TLB misses rare (graupel_run_dyn at 20480 x 65: README, "Transients in huge pages"). NumPy
// advises its own large arrays the same way.
#ifndef SDFG_SCAN_BUFFERS_H
#define SDFG_SCAN_BUFFERS_H
#include <new>
#include <string>
#include <unordered_map>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#ifndef SDFG_SCAN_HUGE_MIN
#define SDFG_SCAN_HUGE_MIN (4ull << 20)
#endif

struct __sdfg_scan_buffers_t {
    struct B { void* p = nullptr; unsigned long long n = 0; unsigned long long a = 0; };
    std::unordered_map<std::string, B> m;
    void* get(const char* key, unsigned long long bytes, unsigned long long align) {
        B& b = m[key];
        if (b.p == nullptr || bytes > b.n) {
            if (b.p != nullptr) ::operator delete[](b.p, std::align_val_t(b.a));
            unsigned long long size = bytes > 0 ? bytes : 1;
            const unsigned long long huge = 2ull << 20;
            const bool advise = bytes >= SDFG_SCAN_HUGE_MIN;
            if (advise) {
                align = align > huge ? align : huge;
                size = (size + huge - 1) / huge * huge;
            }
            b.p = ::operator new[](size, std::align_val_t(align));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
            if (advise) (void)madvise(b.p, size, MADV_HUGEPAGE);
#endif
            b.n = size; b.a = align;  // the capacity: a later call up to the rounded size reuses it
        }
        return b.p; }
    ~__sdfg_scan_buffers_t() {
        for (auto& kv : m)
            if (kv.second.p != nullptr) ::operator delete[](kv.second.p, std::align_val_t(kv.second.a)); }
};
#endif
