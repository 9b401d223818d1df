#include "thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace mstar {
namespace {

class Pool {
 public:
  Pool() {
    int n = int(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("MSTAR_CPU_THREADS")) n = std::atoi(env);
    threads_ = std::max(1, n);
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

  int threads() const { return threads_; }

  void run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    int64_t chunks = std::min<int64_t>(threads_ * 4, (n + grain - 1) / grain);
    if (chunks <= 1 || threads_ == 1) {
      fn(0, n);
      return;
    }
    std::lock_guard<std::mutex> turn(turn_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      n_ = n;
      chunks_ = chunks;
      next_.store(0);
      pending_ = chunks;
      ++generation_;
    }
    wake_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_ == 0; });
    fn_ = nullptr;
  }

 private:
  int threads_;
  std::vector<std::thread> workers_;
  std::mutex turn_, mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunks_ = 0, pending_ = 0;
  std::atomic<int64_t> next_{0};
  uint64_t generation_ = 0;
  bool stop_ = false;

  // Claims chunks until none are left; returns after finishing its share.
  void work() {
    int64_t finished = 0;
    for (int64_t c; (c = next_.fetch_add(1)) < chunks_;) {
      int64_t begin = n_ * c / chunks_, end = n_ * (c + 1) / chunks_;
      (*fn_)(begin, end);
      ++finished;
    }
    if (finished) {
      std::lock_guard<std::mutex> lock(mu_);
      pending_ -= finished;
      if (pending_ == 0) done_.notify_all();
    }
  }

  void loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || (generation_ != seen && fn_ != nullptr); });
        if (stop_) return;
        seen = generation_;
      }
      work();
    }
  }
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  pool().run(n, std::max<int64_t>(grain, 1), fn);
}

int poolThreads() { return pool().threads(); }

}  // namespace mstar
