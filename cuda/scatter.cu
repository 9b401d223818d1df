// gpu::scatter: the windows of a scatter plan (native/scatter.cc) filled from a device
// buffer in one kernel. An adapter's slot load is hundreds of windows (each module's A and
// B, and their copies beside and beneath W), many of them 32-byte rows: as copies, that is
// a host call per window and a DMA transfer per row; here every window is coalesced stores.
#include "common.cuh"

namespace mstar::gpu {
namespace {

template <int Bytes> struct Unit;
template <> struct Unit<16> { using T = uint4; };
template <> struct Unit<8> { using T = uint2; };
template <> struct Unit<4> { using T = uint32_t; };
template <> struct Unit<2> { using T = uint16_t; };
template <> struct Unit<1> { using T = uint8_t; };

// Units [from, to) of job j, in the window's row-major order (so the stores coalesce).
template <int Bytes>
__device__ void move(const ScatterJob& j, uint32_t perRow, uint32_t from, uint32_t to, bool zero) {
  using T = typename Unit<Bytes>::T;
  const T* src = reinterpret_cast<const T*>(j.src);
  for (uint32_t i = from + threadIdx.x; i < to; i += blockDim.x) {
    const uint32_t r = i / perRow, c = i % perRow;
    // Transposed, the window's (r, c) is src's (c, r); else src is the window, contiguous.
    const uint64_t s = j.transpose ? uint64_t(c) * j.rows + r : i;
    reinterpret_cast<T*>(j.dst + r * j.dstPitch)[c] = zero ? T{} : src[s];
  }
}

__global__ void scatterKernel(const ScatterJob* jobs, uint32_t count, bool zero) {
  awaitPrior();
  uint32_t lo = 0, hi = count;  // this block's job: the last whose firstBlock <= blockIdx.x
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (jobs[mid].firstBlock <= blockIdx.x) lo = mid;
    else hi = mid;
  }
  const ScatterJob j = jobs[lo];
  const uint32_t perRow = j.transpose ? j.cols : j.cols * j.elemBytes / j.unit;
  const uint32_t from = (blockIdx.x - j.firstBlock) * kScatterBlockUnits;
  const uint32_t to = min(j.rows * perRow, from + kScatterBlockUnits);
  switch (j.unit) {
    case 16: return move<16>(j, perRow, from, to, zero);
    case 8: return move<8>(j, perRow, from, to, zero);
    case 4: return move<4>(j, perRow, from, to, zero);
    case 2: return move<2>(j, perRow, from, to, zero);
    default: return move<1>(j, perRow, from, to, zero);
  }
}

}  // namespace

void scatter(const ScatterJob* jobs, uint32_t count, uint32_t blocks, bool zero) {
  if (count == 0 || blocks == 0) return;
  launch("scatter kernel", scatterKernel, blocks, 256, 0, jobs, count, zero);
}

}  // namespace mstar::gpu
