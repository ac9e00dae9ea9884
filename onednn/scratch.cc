#include "scratch.h"

#include <cstdlib>
#include <iterator>
#include <list>
#include <mutex>
#include <new>
#include <utility>

namespace jax_cudnn_rnn::onednn {

namespace {

constexpr size_t kAlignment = 64;

struct Buffer {
  char* data;
  size_t bytes;
};

class Pool {
 public:
  ScratchLease Take(size_t bytes) {
    bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto best = kept_.end();
      for (auto it = kept_.begin(); it != kept_.end(); ++it) {
        if (it->bytes >= bytes && (best == kept_.end() || it->bytes < best->bytes)) best = it;
      }
      if (best != kept_.end()) {
        Buffer buffer = *best;
        kept_bytes_ -= buffer.bytes;
        kept_.erase(best);
        return ScratchLease(buffer.data, buffer.bytes);
      }
    }
    void* data = std::aligned_alloc(kAlignment, bytes == 0 ? kAlignment : bytes);
    if (data == nullptr) throw std::bad_alloc();
    return ScratchLease(static_cast<char*>(data), bytes);
  }

  void Return(char* data, size_t bytes) {
    std::list<Buffer> released;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      kept_.push_front({data, bytes});  // most recently returned first
      kept_bytes_ += bytes;
      while (kept_.size() > kMaxKeptBuffers || kept_bytes_ > kMaxKeptBytes) {
        kept_bytes_ -= kept_.back().bytes;
        released.splice(released.begin(), kept_, std::prev(kept_.end()));
      }
    }
    for (const Buffer& buffer : released) std::free(buffer.data);
  }

  void Release() {
    std::list<Buffer> released;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      released.swap(kept_);
      kept_bytes_ = 0;
    }
    for (const Buffer& buffer : released) std::free(buffer.data);
  }

  std::pair<size_t, size_t> Kept() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {kept_bytes_, kept_.size()};
  }

 private:
  std::mutex mutex_;
  std::list<Buffer> kept_;
  size_t kept_bytes_ = 0;
};

Pool& ThePool() {
  static Pool* pool = new Pool();  // never destroyed: calls may still run while the process exits
  return *pool;
}

}  // namespace

ScratchLease::ScratchLease(ScratchLease&& other) noexcept : data_(other.data_), bytes_(other.bytes_) {
  other.data_ = nullptr;
}

ScratchLease::~ScratchLease() {
  if (data_ != nullptr) ThePool().Return(data_, bytes_);
}

ScratchLease TakeScratch(size_t bytes) { return ThePool().Take(bytes); }

size_t KeptScratchBytes() { return ThePool().Kept().first; }

size_t KeptScratchBuffers() { return ThePool().Kept().second; }

void ReleaseScratch() { ThePool().Release(); }

}  // namespace jax_cudnn_rnn::onednn
