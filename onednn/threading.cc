#include "threading.h"

#include <pthread.h>

#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <utility>

namespace jax_cudnn_rnn::onednn {

namespace {

class OnednnThread {
 public:
  OnednnThread() : thread_([this] { Loop(); }) { thread_.detach(); }

  xla::ffi::Error Run(std::function<xla::ffi::Error()> fn) {
    std::packaged_task<xla::ffi::Error()> task(std::move(fn));
    std::future<xla::ffi::Error> result = task.get_future();
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
      std::packaged_task<xla::ffi::Error()> task;
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
  std::deque<std::packaged_task<xla::ffi::Error()>> queue_;
  std::thread thread_;
};

}  // namespace

xla::ffi::Error RunOnOnednnThread(std::function<xla::ffi::Error()> fn) {
  // Never destroyed: the thread serves calls until the process exits.
  static OnednnThread* thread = new OnednnThread();
  return thread->Run(std::move(fn));
}

}  // namespace jax_cudnn_rnn::onednn
