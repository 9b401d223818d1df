// A fixed pool of worker threads for the CPU backend's data-parallel loops.
#pragma once
#include <cstdint>
#include <functional>

namespace mstar {

// Runs fn(begin, end) over [0, n) split into chunks of at least `grain` items, on the
// pool's threads and the caller's. Small loops run inline. Safe to call from several
// threads: concurrent callers take turns.
void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
int poolThreads();

}  // namespace mstar
