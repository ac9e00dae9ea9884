// Huge pages for the large buffers a call writes and XLA allocated for it.
//
// XLA's CPU runtime allocates a call's outputs anew for every execution, and buffers that large come from mmap, so
// the first write to each 4 KiB page is a page fault. The reserve space of a training step is the largest: an LSTM
// T=100 B=32 I=H=256 float32 step (a 62 MiB reserve space) took 9,700 minor faults per step, about 15 ms of a 75 ms
// step on this project's 2-core AMD EPYC VM. Advising the buffer's 2 MiB-aligned interior for transparent huge pages
// (where the kernel offers them on request: /sys/kernel/mm/transparent_hugepage/enabled "madvise" or "always") makes
// that about 30 faults. The advice covers only memory the call was handed to write, and lasts until XLA frees it;
// nothing process-wide changes.
#ifndef JAX_CUDNN_RNN_ONEDNN_PAGES_H_
#define JAX_CUDNN_RNN_ONEDNN_PAGES_H_

#include <cstddef>

namespace jax_cudnn_rnn::onednn {

// Asks for transparent huge pages on the whole 2 MiB pages inside [data, data + bytes); a no-op where there are none
// or the kernel refuses (the call runs the same, only slower).
void AdviseHugePages(void* data, size_t bytes);

}  // namespace jax_cudnn_rnn::onednn

#endif  // JAX_CUDNN_RNN_ONEDNN_PAGES_H_
