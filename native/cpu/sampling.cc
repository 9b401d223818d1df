// Token choice per row: greedy, or temperature / top-k / top-p sampling driven by a
// counter-based RNG (seed, step), so a seeded request draws the same tokens whatever
// batch it shares and whichever backend runs it.
//
// The draw is an exponential race (the Gumbel-max trick): every kept token i gets its own
// uniform u_i, and the token with the largest x_i / T - log(-log u_i) wins. That is exactly
// a draw from softmax(x / T) over the kept tokens, and needs no sorted order or running
// sum: the GPU finds it in one parallel pass (cuda/sampling.cu) instead of a cumulative walk.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "cpu/ops.h"
#include "thread_pool.h"

namespace mstar::cpu {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The draw's stream: element i's number is splitmix64(base + i) (SplitMix64's sequence).
uint64_t streamBase(uint64_t seed, uint64_t step) { return splitmix64(seed ^ splitmix64(step)); }

// Token i's race score: x / T minus log(-log u), u uniform in (0, 1) with 53 random bits.
double raceScore(float x, double temperature, uint64_t base, int64_t i) {
  double u = (double(splitmix64(base + uint64_t(i)) >> 11) + 0.5) * 0x1.0p-53;
  return double(x) / temperature - std::log(-std::log(u));
}

int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return int32_t(best);
}

int32_t sampleRow(const float* logits, int64_t vocab, float temperature, int32_t topK, float topP, uint64_t seed,
                  uint64_t step) {
  if (temperature <= 0 || topK == 1) return argmax(logits, vocab);
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  auto higher = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int64_t keep = topK > 0 ? std::min<int64_t>(topK, vocab) : vocab;
  // Only top-k and top-p need the tokens in order (the race itself does not).
  if (keep < vocab) std::partial_sort(order.begin(), order.begin() + keep, order.end(), higher);
  else if (topP < 1) std::sort(order.begin(), order.end(), higher);
  // Softmax of logits / temperature over the kept tokens, in descending order: top-p keeps
  // the smallest prefix whose probability reaches topP (at least one token).
  if (topP < 1) {
    std::vector<double> probs(static_cast<size_t>(keep));
    double maxLogit = double(logits[order[0]]) / temperature, total = 0;
    for (int64_t i = 0; i < keep; ++i)
      total += probs[size_t(i)] = std::exp(double(logits[order[size_t(i)]]) / temperature - maxLogit);
    double cum = 0;
    int64_t cut = 0;
    while (cut < keep) {
      cum += probs[size_t(cut++)] / total;
      if (cum >= double(topP)) break;
    }
    keep = cut;
  }
  const uint64_t base = streamBase(seed, step);
  int32_t best = order[0];
  double bestScore = -INFINITY;
  for (int64_t j = 0; j < keep; ++j) {
    const int32_t i = order[size_t(j)];
    const double score = raceScore(logits[i], temperature, base, i);
    if (score > bestScore || (score == bestScore && i < best)) {
      best = i;
      bestScore = score;
    }
  }
  return best;
}

}  // namespace

void sample(int32_t* outIds, const float* logits, int64_t n, int64_t vocab, SamplingRows p) {
  parallelFor(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      outIds[r] = sampleRow(logits + r * vocab, vocab, p.temperature[r], p.topK[r], p.topP[r], uint64_t(p.seeds[r]),
                            uint64_t(p.steps[r]));
  });
}

void logprobs(float* chosenLp, int32_t* topIds, float* topLp, int64_t k, const float* logits, const int32_t* chosen,
              int64_t n, int64_t vocab) {
  parallelFor(n, 1, [&](int64_t b, int64_t e) {
    std::vector<int32_t> order;
    for (int64_t r = b; r < e; ++r) {
      const float* x = logits + r * vocab;
      double maxv = x[argmax(x, vocab)], sum = 0;
      for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(x[i]) - maxv);
      double lse = maxv + std::log(sum);
      chosenLp[r] = float(double(x[chosen[r]]) - lse);
      if (k == 0) continue;
      order.resize(size_t(vocab));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t c) { return x[a] > x[c] || (x[a] == x[c] && a < c); });
      for (int64_t i = 0; i < k; ++i) {
        topIds[r * k + i] = order[size_t(i)];
        topLp[r * k + i] = float(double(x[order[size_t(i)]]) - lse);
      }
    }
  });
}

}  // namespace mstar::cpu
