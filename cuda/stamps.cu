// The host half of stamps.cuh: the registry of each .cu file's stamp arrays and the dump.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common.cuh"

namespace mstar::gpu {

#ifdef MSTAR_CUDA_STAMPS
namespace {
struct StampArrays {
  const char* file;
  const void *time, *grid, *count;
};
std::vector<StampArrays>& stampArrays() {
  static std::vector<StampArrays> all;  // filled by static initialisers: made on first use
  return all;
}
}  // namespace

void registerStamps(const char* file, const void* time, const void* grid, const void* count) {
  stampArrays().push_back({file, time, grid, count});
}

void dumpStamps() {
  const char* path = std::getenv("MSTAR_STAMPS");
  if (!path || !*path) return;
  struct Stamp {
    unsigned long long time;
    unsigned grid;
    const char* file;
  };
  std::vector<Stamp> stamps;
  std::vector<unsigned long long> time(kStamps);
  std::vector<unsigned> grid(kStamps);
  for (const StampArrays& a : stampArrays()) {
    unsigned n = 0;
    check(cudaMemcpyFromSymbol(&n, a.count, sizeof n), "stamps");
    n = std::min(n, kStamps);
    if (n == 0) continue;
    check(cudaMemcpyFromSymbol(time.data(), a.time, n * sizeof(time[0])), "stamps");
    check(cudaMemcpyFromSymbol(grid.data(), a.grid, n * sizeof(grid[0])), "stamps");
    const unsigned zero = 0;
    check(cudaMemcpyToSymbol(a.count, &zero, sizeof zero), "stamps");
    for (unsigned i = 0; i < n; ++i) stamps.push_back({time[i], grid[i], a.file});
  }
  std::sort(stamps.begin(), stamps.end(), [](const Stamp& a, const Stamp& b) { return a.time < b.time; });
  FILE* f = std::fopen(path, "a");
  if (!f) return;
  std::fprintf(f, "sync %zu\n", stamps.size());
  for (const Stamp& s : stamps) std::fprintf(f, "%llu %u %s\n", s.time - stamps[0].time, s.grid, s.file);
  std::fclose(f);
}
#else
void dumpStamps() {}
#endif

}  // namespace mstar::gpu
