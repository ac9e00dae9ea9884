#include "threading.h"

#include <utility>

#include "plan.h"

#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_TBB
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>
#elif DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
#include <pthread.h>

#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#else
#error "the oneDNN extension supports oneDNN's TBB and OMP CPU runtimes"
#endif

namespace jax_cudnn_rnn::onednn {

namespace ffi = ::xla::ffi;

namespace {

ffi::Error RunWithStream(const std::function<ffi::Error(dnnl::stream&)>& fn) {
  dnnl::stream stream(Engine());
  return fn(stream);
}

#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP

class OnednnThread {
 public:
  OnednnThread() : thread_([this] { Loop(); }) { thread_.detach(); }

  ffi::Error Run(std::function<ffi::Error()> fn) {
    std::packaged_task<ffi::Error()> task(std::move(fn));
    std::future<ffi::Error> result = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(task));
    }
    ready_.notify_one();
    return result.get();
  }

 private:
  void Loop() {
    // Named for tools like top -H; oneDNN's OpenMP workers, started from this thread, inherit the name.
    pthread_setname_np(pthread_self(), "jcr-onednn");
    for (;;) {
      std::packaged_task<ffi::Error()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [this] { return !queue_.empty(); });
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::packaged_task<ffi::Error()>> queue_;
  std::thread thread_;
};

#endif

#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_TBB
// The extension's arena: default concurrency (the process's CPUs); its threads start on first use. Never destroyed:
// calls may still run while the process exits. Concurrent calls share it (TBB queues a caller that finds no free slot).
tbb::task_arena& Arena() {
  static tbb::task_arena* arena = new tbb::task_arena();
  return *arena;
}
#endif

}  // namespace

ffi::Error RunOnednn(const std::function<ffi::Error(dnnl::stream&)>& fn) {
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_TBB
  ffi::Error result = ffi::Error::Success();
  Arena().execute([&] { result = RunWithStream(fn); });
  return result;
#else
  static OnednnThread* thread = new OnednnThread();  // never destroyed, like the arena above
  return thread->Run([&fn] { return RunWithStream(fn); });
#endif
}

void ParallelFor(int64_t n, int64_t chunks, const std::function<void(int64_t, int64_t, int64_t)>& body) {
  auto piece = [&](int64_t chunk) { body(chunk, chunk * n / chunks, (chunk + 1) * n / chunks); };
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_TBB
  tbb::parallel_for(int64_t{0}, chunks, piece);
#else
  for (int64_t chunk = 0; chunk < chunks; ++chunk) piece(chunk);
#endif
}

int64_t ParallelThreads() {
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_TBB
  // The extension's arena's, wherever it is asked (a handler sizes its per-thread buffers before it enters the arena;
  // the calling thread's own arena, another library's, may be narrower or wider).
  return Arena().max_concurrency();
#else
  return 1;
#endif
}

const char* CpuRuntime() {
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_TBB
  return "tbb";
#else
  return "omp";
#endif
}

}  // namespace jax_cudnn_rnn::onednn
