// The dlopen shim of cuBLASLt: finds the library, resolves the handful of functions the
// GEMM needs (prototypes from NVIDIA's cublasLt.h, with opaque handles as void*), and
// caches one algorithm per shape and alignment (for decode sizes, chosen by timing; above them,
// one per bucket of row counts).
#include "cublaslt.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <memory>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "cublaslt_abi.h"
#include "gpu.h"

namespace mstar::cublaslt {
namespace {

using namespace abi;

using Handle = void*;
struct Api {
  int (*create)(Handle*);
  size_t (*getVersion)();
  const char* (*statusString)(int);
  int (*descCreate)(void**, int computeType, int scaleType);
  int (*descSetAttribute)(void*, int attr, const void* buf, size_t size);
  int (*descDestroy)(void*);
  int (*layoutCreate)(void**, int type, uint64_t rows, uint64_t cols, int64_t ld);
  int (*layoutSetAttribute)(void*, int attr, const void* buf, size_t size);
  int (*layoutDestroy)(void*);
  int (*prefCreate)(void**);
  int (*prefSetAttribute)(void*, int attr, const void* buf, size_t size);
  int (*prefDestroy)(void*);
  int (*getHeuristic)(Handle, void* desc, void* a, void* b, void* c, void* d, void* pref, int requested,
                      HeuristicResult* results, int* returned);
  int (*matmul)(Handle, void* desc, const void* alpha, const void* a, void* aDesc, const void* b, void* bDesc,
                const void* beta, const void* c, void* cDesc, void* d, void* dDesc, const Algo* algo, void* workspace,
                size_t workspaceBytes, void* stream);
};

Status gStatus;
Api gApi;
void* gLib = nullptr;
std::once_flag gLoadOnce;

// Where to look after the loader's own search (LD_LIBRARY_PATH, ld.so.cache).
std::vector<std::string> libraryDirs() {
  std::vector<std::string> dirs;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(var); v && *v) dirs.push_back(std::string(v) + "/lib64");
  dirs.push_back("/usr/local/cuda/lib64");
  dirs.push_back("/usr/local/cuda/targets/x86_64-linux/lib");
  dirs.push_back("/usr/lib/x86_64-linux-gnu");
  return dirs;
}

template <typename F>
bool resolve(F& fn, const char* name, std::string& missing) {
  fn = reinterpret_cast<F>(dlsym(gLib, name));
  if (!fn) missing += (missing.empty() ? "" : ", ") + std::string(name);
  return fn != nullptr;
}

void load() {
  std::vector<std::string> looked;
  std::string firstError;
  for (const char* soname : {"libcublasLt.so.13", "libcublasLt.so.12"}) {
    std::vector<std::string> candidates{soname};
    for (const std::string& d : libraryDirs()) candidates.push_back(d + "/" + soname);
    for (const std::string& c : candidates) {
      gLib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (gLib) {
        gStatus.path = c;
        break;
      }
      if (firstError.empty()) firstError = dlerror();
    }
    if (gLib) break;
  }
  if (!gLib) {
    std::string dirs;
    for (const std::string& d : libraryDirs()) dirs += ", " + d;
    gStatus.error = "libcublasLt.so.13 (or .so.12) not found (looked in LD_LIBRARY_PATH, the system's library paths" +
                    dirs + "): " + firstError;
    return;
  }
  std::string missing;
  resolve(gApi.create, "cublasLtCreate", missing);
  resolve(gApi.getVersion, "cublasLtGetVersion", missing);
  resolve(gApi.statusString, "cublasLtGetStatusString", missing);
  resolve(gApi.descCreate, "cublasLtMatmulDescCreate", missing);
  resolve(gApi.descSetAttribute, "cublasLtMatmulDescSetAttribute", missing);
  resolve(gApi.descDestroy, "cublasLtMatmulDescDestroy", missing);
  resolve(gApi.layoutCreate, "cublasLtMatrixLayoutCreate", missing);
  resolve(gApi.layoutSetAttribute, "cublasLtMatrixLayoutSetAttribute", missing);
  resolve(gApi.layoutDestroy, "cublasLtMatrixLayoutDestroy", missing);
  resolve(gApi.prefCreate, "cublasLtMatmulPreferenceCreate", missing);
  resolve(gApi.prefSetAttribute, "cublasLtMatmulPreferenceSetAttribute", missing);
  resolve(gApi.prefDestroy, "cublasLtMatmulPreferenceDestroy", missing);
  resolve(gApi.getHeuristic, "cublasLtMatmulAlgoGetHeuristic", missing);
  resolve(gApi.matmul, "cublasLtMatmul", missing);
  if (!missing.empty()) {
    gStatus.error = gStatus.path + " lacks " + missing;
    dlclose(gLib);
    gLib = nullptr;
    return;
  }
  gStatus.version = gApi.getVersion();
  gStatus.loaded = true;
}

void check(int status, const char* what) {
  if (status != kSuccess)
    throw gpu::Error(std::string("cuBLASLt ") + what + ": " + (gApi.statusString ? gApi.statusString(status) : "error") +
                     " (" + std::to_string(status) + ")");
}

// A shape's descriptors, freed with it.
struct Descs {
  void* desc = nullptr;
  void* a = nullptr;
  void* b = nullptr;
  void* d = nullptr;
  void* pref = nullptr;
  ~Descs() {
    if (pref) gApi.prefDestroy(pref);
    for (void* l : {a, b, d})
      if (l) gApi.layoutDestroy(l);
    if (desc) gApi.descDestroy(desc);
  }
};

uint32_t alignmentOf(const void* p) {
  uintptr_t v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// The process's handle, workspace and per-shape algorithm choice; one GEMM at a time.
std::mutex gMutex;
Handle gHandle = nullptr;
void* gWorkspace = nullptr;
constexpr size_t kWorkspaceBytes = size_t(32) << 20;
using ShapeKey = std::tuple<int64_t, int64_t, int64_t, int64_t, uint32_t, uint32_t, uint32_t, bool>;
// What a shape needs, made on its first GEMM and kept: its descriptors and the heuristic's
// algorithm (ok false: cuBLASLt has none for it). Making the descriptors on every call cost
// the host several microseconds a GEMM, a hundred GEMMs an eager step. rows: the rows its
// layouts of x and out now say (a bucket's plan serves every row count in the bucket).
struct Plan {
  Descs d;
  bool ok = false;
  Algo algo{};
  int64_t rows = 0;
};
// Never freed, as the handle: at exit, destructors would call into a library being unloaded.
auto& gPlans = *new std::map<ShapeKey, std::unique_ptr<Plan>>;

}  // namespace

const Status& status() {
  std::call_once(gLoadOnce, load);
  return gStatus;
}

// While tuning is on (setTuning), up to kTunedRows rows (decode steps) a shape's algorithm is
// the fastest of the heuristic's first kCandidates, timed on the shape's own operands, where
// it beats the first pick by 3% or more. The first pick ran Qwen3-8B's gate_up with an adapter's 64 rows of A beneath W 3 µs
// (6%) slower than W alone at 8 and 32 rows, however those rows were padded; with the timed
// choice 8B decode at 8 sequences ran 5.71 -> 5.47 ms a step with one adapter and 5.19 ->
// 5.05 without LoRA (H200, equal at 32). Prefill-sized GEMMs take the first pick.

// Above kTunedRows, the rows a plan is made for: n rounded up to a quarter of its power of
// two (65 -> 80, 300 -> 320, 4000 -> 4096), four buckets an octave. Prefill steps come in
// every row count, and the heuristic took ~1 ms of host time for each new shape (an eager
// step of new rows paid it for each of its projections' shapes); a bucket's algorithm runs
// the counts below it (their layouts set to their own rows), so each bucket pays it once.
int64_t rowBucket(int64_t n) {
  if (n <= kTunedRows) return n;
  int64_t step = 1;
  while (step * 8 <= n) step *= 2;
  return (n + step - 1) / step * step;
}
constexpr int kCandidates = 8;
constexpr int kRounds = 2;
constexpr float kClearlyFaster = 0.97f;

std::atomic<bool> gTuning{false};

bool tuning() {
  static const bool allowed = [] {
    const char* v = std::getenv("MSTAR_GEMM_TUNE");
    return !(v && std::string(v) == "0");
  }();
  return allowed && gTuning.load();
}

// A shape's descriptors and algorithm. Row-major out = x · wᵀ is column-major outᵀ[outF, n] =
// w' · xᵀ, with w' = w read transposed: A = w (in x outF, ld ldw, op T), B = x (in x n, ld in),
// D = out (outF x n). aligns: A, B, C, D, as the buffers really are (views may start anywhere).
// Tuning runs the candidates into a scratch D (beta as the shape's own), never into out.
std::unique_ptr<Plan> makePlan(int64_t n, int64_t in, int64_t outF, int64_t ldw, const std::array<uint32_t, 4>& aligns,
                               const void* x, const void* w, bool accumulate, void* stream) {
  auto plan = std::make_unique<Plan>();
  Descs& d = plan->d;
  check(gApi.descCreate(&d.desc, kComputeF32, kDataF32), "cublasLtMatmulDescCreate");
  int32_t opT = kOpT, opN = kOpN;
  check(gApi.descSetAttribute(d.desc, kDescTransA, &opT, sizeof opT), "set TRANSA");
  check(gApi.descSetAttribute(d.desc, kDescTransB, &opN, sizeof opN), "set TRANSB");
  check(gApi.layoutCreate(&d.a, kDataBf16, uint64_t(in), uint64_t(outF), ldw), "cublasLtMatrixLayoutCreate(A)");
  check(gApi.layoutCreate(&d.b, kDataBf16, uint64_t(in), uint64_t(n), in), "cublasLtMatrixLayoutCreate(B)");
  check(gApi.layoutCreate(&d.d, kDataBf16, uint64_t(outF), uint64_t(n), outF), "cublasLtMatrixLayoutCreate(D)");
  check(gApi.prefCreate(&d.pref), "cublasLtMatmulPreferenceCreate");
  uint64_t ws = kWorkspaceBytes;
  check(gApi.prefSetAttribute(d.pref, kPrefMaxWorkspace, &ws, sizeof ws), "set MAX_WORKSPACE_BYTES");
  for (int i = 0; i < 4; ++i)
    check(gApi.prefSetAttribute(d.pref, kPrefMinAlignA + i, &aligns[i], sizeof aligns[i]), "set MIN_ALIGNMENT");
  HeuristicResult results[kCandidates]{};
  int returned = 0;
  int s = gApi.getHeuristic(gHandle, d.desc, d.a, d.b, d.d, d.d, d.pref, kCandidates, results, &returned);
  plan->ok = s == kSuccess && returned > 0 && results[0].state == kSuccess;
  plan->algo = results[0].algo;
  plan->rows = n;
  if (!plan->ok || returned < 2 || n > kTunedRows || !tuning() || gpu::capturing()) return plan;
  void* scratch = gpu::alloc(size_t(n * outF) * sizeof(uint16_t));
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  // Each candidate's best of kRounds timings (the rounds go over all candidates in turn, so
  // that a drifting clock meets every one); failed to run: infinity.
  std::vector<float> ms(returned, std::numeric_limits<float>::infinity());
  for (int round = 0; round < kRounds; ++round)
    for (int i = 0; i < returned; ++i) {
      if (results[i].state != kSuccess) continue;
      try {
        ms[i] = std::min(ms[i], gpu::timeOnStream([&] {
          check(gApi.matmul(gHandle, d.desc, &alpha, w, d.a, x, d.b, &beta, scratch, d.d, scratch, d.d,
                            &results[i].algo, gWorkspace, kWorkspaceBytes, stream),
                "cublasLtMatmul (timing a candidate)");
        }, 5));
      } catch (const gpu::Error&) {
        results[i].state = kSuccess + 1;  // does not run: not timed again, not chosen
      }
    }
  // The heuristic's pick stands unless another is clearly faster (timing noise is a few %).
  const int fastest = int(std::min_element(ms.begin(), ms.end()) - ms.begin());
  if (ms[fastest] < kClearlyFaster * ms[0]) plan->algo = results[fastest].algo;
  gpu::release(scratch);
  return plan;
}

void setTuning(bool on) { gTuning.store(on); }

std::vector<int64_t> rowBuckets(int64_t maxRows) {
  std::vector<int64_t> buckets;
  for (int64_t n = kTunedRows + 1; n <= maxRows; n = buckets.back() + 1) buckets.push_back(rowBucket(n));
  return buckets;
}

bool gemmBf16(void* out, const void* x, const void* w, int64_t n, int64_t in, int64_t outF, void* stream,
              bool accumulate, int64_t ldw) {
  if (ldw == 0) ldw = in;
  if (!status().loaded) return false;
  std::lock_guard<std::mutex> lock(gMutex);
  // Made outside any capture: allocated inside one, the workspace would be the graph's
  // memory, gone with it (an aborted capture too), and every later GEMM would use a dead
  // address. A capture before any eager GEMM runs the caller's own kernel instead.
  if ((!gHandle || !gWorkspace) && gpu::capturing()) return false;
  if (!gHandle) check(gApi.create(&gHandle), "cublasLtCreate");
  if (!gWorkspace) gWorkspace = gpu::alloc(kWorkspaceBytes);

  // Every row must be as aligned as the heuristic is told: the stride counts too.
  auto rowsAlignment = [](const void* p, int64_t ld) {
    return std::min(alignmentOf(p), alignmentOf(reinterpret_cast<const void*>(uintptr_t(ld) * sizeof(uint16_t))));
  };
  uint32_t alignA = rowsAlignment(w, ldw), alignB = rowsAlignment(x, in), alignD = rowsAlignment(out, outF);
  const std::array<uint32_t, 4> aligns{alignA, alignB, alignD, alignD};
  auto planFor = [&](int64_t rows) -> Plan& {
    std::unique_ptr<Plan>& plan = gPlans[ShapeKey{rows, in, outF, ldw, alignA, alignB, alignD, accumulate}];
    if (!plan) plan = makePlan(rows, in, outF, ldw, aligns, x, w, accumulate, stream);
    return *plan;
  };
  float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;  // C = D = out
  auto run = [&](Plan& plan) {
    if (plan.rows != n) {  // x's and out's layouts to this GEMM's rows
      const uint64_t cols = uint64_t(n);
      check(gApi.layoutSetAttribute(plan.d.b, kLayoutCols, &cols, sizeof cols), "set B's COLS");
      check(gApi.layoutSetAttribute(plan.d.d, kLayoutCols, &cols, sizeof cols), "set D's COLS");
      plan.rows = n;
    }
    return gApi.matmul(gHandle, plan.d.desc, &alpha, w, plan.d.a, x, plan.d.b, &beta, out, plan.d.d, out, plan.d.d,
                       &plan.algo, gWorkspace, kWorkspaceBytes, stream);
  };
  // cuBLASLt checks an algorithm against the shape before it launches anything. Where the
  // bucket has none, or its algorithm does not take these rows, the rows get a plan of their
  // own (a row count that is not a bucket's own is never a bucket's key).
  const int64_t bucket = rowBucket(n);
  Plan* chosen = &planFor(bucket);
  int status = chosen->ok ? run(*chosen) : -1;
  if (status != kSuccess && bucket != n) {
    chosen = &planFor(n);
    status = chosen->ok ? run(*chosen) : -1;
  }
  if (!chosen->ok) return false;  // cuBLASLt has no algorithm for the shape: the caller's own kernel
  check(status, "cublasLtMatmul");
  return true;
}

}  // namespace mstar::cublaslt
