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
    work(fn, n, chunks);
    // Every chunk done, and every worker out of work(): one still inside could otherwise
    // take its next index from the run after this one (next_ reset, chunks_ larger) and
    // run a chunk twice (pending_ would never reach 0 again) or call a finished fn.
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_ == 0 && active_ == 0; });
    fn_ = nullptr;
  }

 private:
  int threads_;
  std::vector<std::thread> workers_;
  std::mutex turn_, mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;  // the run's, set and cleared under mu_
  int64_t n_ = 0, chunks_ = 0, pending_ = 0;
  int active_ = 0;  // workers inside work() for the current run
  std::atomic<int64_t> next_{0};
  uint64_t generation_ = 0;
  bool stop_ = false;

  // Claims chunks of the run (fn, n, chunks) until none are left; returns after finishing
  // its share.
  void work(const std::function<void(int64_t, int64_t)>& fn, int64_t n, int64_t chunks) {
    int64_t finished = 0;
    for (int64_t c; (c = next_.fetch_add(1)) < chunks;) {
      fn(n * c / chunks, n * (c + 1) / chunks);
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
      const std::function<void(int64_t, int64_t)>* fn;
      int64_t n, chunks;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || (generation_ != seen && fn_ != nullptr); });
        if (stop_) return;
        seen = generation_;
        fn = fn_;
        n = n_;
        chunks = chunks_;
        ++active_;
      }
      work(*fn, n, chunks);
      std::lock_guard<std::mutex> lock(mu_);
      --active_;
      if (active_ == 0 && pending_ == 0) done_.notify_all();
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
