// How the native backends' FFI handlers (cuda/, onednn/) take and check their buffers: the optional ones (an LSTM's
// cell states, a training call's reserve space, seq_lengths) from ffi::RemainingArgs / ffi::RemainingRets, each by
// its name; every buffer's element type and shape checked against what the attributes describe before a library
// reads or writes it, so that a mismatch is an ffi::Error naming the buffer, never undefined behaviour.
// Header-only: each extension compiles its own copy.
#ifndef JAX_CUDNN_RNN_COMMON_FFI_ARGS_H_
#define JAX_CUDNN_RNN_COMMON_FFI_ARGS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn {

// Propagates an ffi::Error returned by a helper.
#define JCR_RETURN_IF_ERROR(expr)                \
  do {                                           \
    ::xla::ffi::Error jcr_error_ = (expr);       \
    if (jcr_error_.failure()) return jcr_error_; \
  } while (0)

inline std::string ShapeString(::xla::ffi::Span<const int64_t> dims) {
  std::string text = "(";
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + (dims.size() == 1 ? ",)" : ")");
}

// An XLA element type as NumPy spells it ("float32", "bfloat16", "uint8", ...), for messages.
inline std::string DataTypeName(::xla::ffi::DataType dtype) {
  using ::xla::ffi::DataType;
  switch (dtype) {
    case DataType::PRED:
      return "bool";
    case DataType::S8:
      return "int8";
    case DataType::S16:
      return "int16";
    case DataType::S32:
      return "int32";
    case DataType::S64:
      return "int64";
    case DataType::U8:
      return "uint8";
    case DataType::U16:
      return "uint16";
    case DataType::U32:
      return "uint32";
    case DataType::U64:
      return "uint64";
    case DataType::F16:
      return "float16";
    case DataType::BF16:
      return "bfloat16";
    case DataType::F32:
      return "float32";
    case DataType::F64:
      return "float64";
    default:
      return "XLA element type " + std::to_string(static_cast<int>(dtype));
  }
}

// `buffer` (an argument, or a result as *result) has `expected_dtype` and `expected_dims`.
inline ::xla::ffi::Error CheckBuffer(const char* name, const ::xla::ffi::AnyBuffer& buffer,
                                     ::xla::ffi::DataType expected_dtype, std::vector<int64_t> expected_dims) {
  const ::xla::ffi::DataType dtype = buffer.element_type();
  const ::xla::ffi::Span<const int64_t> dims = buffer.dimensions();
  if (dtype != expected_dtype) {
    return ::xla::ffi::Error::InvalidArgument(std::string(name) + " has dtype " + DataTypeName(dtype) + "; expected " +
                                              DataTypeName(expected_dtype));
  }
  if (!(dims.size() == expected_dims.size() && std::equal(dims.begin(), dims.end(), expected_dims.begin()))) {
    return ::xla::ffi::Error::InvalidArgument(
        std::string(name) + " has shape " + ShapeString(dims) + "; expected " +
        ShapeString(::xla::ffi::Span<const int64_t>(expected_dims.data(), expected_dims.size())));
  }
  return ::xla::ffi::Error::Success();
}

// A byte buffer whose size the library decides (oneDNN's weights and reserve space, packed weights): 1-D uint8 of
// exactly `needed` bytes. A larger buffer is refused too: it was sized for another network (another dtype, another
// shape), and reading it as this one would read bytes nobody wrote.
inline ::xla::ffi::Error CheckBytes(const char* name, const ::xla::ffi::AnyBuffer& buffer, size_t needed) {
  if (buffer.element_type() != ::xla::ffi::DataType::U8 || buffer.dimensions().size() != 1 ||
      buffer.size_bytes() != needed) {
    return ::xla::ffi::Error::InvalidArgument(std::string(name) + " has shape " + ShapeString(buffer.dimensions()) +
                                              " of dtype " + DataTypeName(buffer.element_type()) +
                                              "; expected a 1-D uint8 buffer of exactly " + std::to_string(needed) +
                                              " bytes");
  }
  return ::xla::ffi::Error::Success();
}

// cuDNN's reserve space, which travels as rows [B, row_bytes] so that each device's share of a split batch holds its
// own call's buffer (jax_cudnn_rnn/backends/cudnn/plan.py `reserve_row_bytes`), flattened for the call: 1-D uint8
// of at least `needed` bytes (the rows round cuDNN's size up by less than one byte per row).
inline ::xla::ffi::Error CheckReserveRows(const char* name, const ::xla::ffi::AnyBuffer& buffer, size_t needed) {
  if (buffer.element_type() != ::xla::ffi::DataType::U8 || buffer.dimensions().size() != 1 ||
      buffer.size_bytes() < needed) {
    return ::xla::ffi::Error::InvalidArgument(std::string(name) + " has shape " + ShapeString(buffer.dimensions()) +
                                              " of dtype " + DataTypeName(buffer.element_type()) +
                                              "; expected a 1-D uint8 buffer of at least " + std::to_string(needed) +
                                              " bytes");
  }
  return ::xla::ffi::Error::Success();
}

// A handler's optional buffers, ffi::RemainingArgs (`what` "argument") or ffi::RemainingRets ("result"), taken in the
// order the call passes them. `Buffer` is ffi::AnyBuffer for arguments, ffi::Result<ffi::AnyBuffer> for results.
template <typename Remaining>
class OptionalBuffers {
 public:
  using Buffer = std::decay_t<decltype(*std::declval<Remaining>().template get<::xla::ffi::AnyBuffer>(0))>;

  OptionalBuffers(const Remaining& remaining, const char* what) : remaining_(remaining), what_(what) {}

  // The next buffer, named `name` in errors, into `*out` where `present` (else `*out` stays empty).
  ::xla::ffi::Error Take(bool present, const char* name, std::optional<Buffer>* out) {
    if (!present) return ::xla::ffi::Error::Success();
    auto buffer = remaining_.template get<::xla::ffi::AnyBuffer>(next_++);
    if (buffer.has_error()) {
      return ::xla::ffi::Error::InvalidArgument(std::string(what_) + " " + name +
                                                " is missing: " + buffer.error().message());
    }
    out->emplace(*buffer);
    return ::xla::ffi::Error::Success();
  }

  // Whether the call passes more buffers than were taken (a trailing optional buffer is given).
  bool more() const { return remaining_.size() > next_; }

  // Every buffer the call passes was taken.
  ::xla::ffi::Error CheckAllTaken() const {
    if (remaining_.size() != next_) {
      return ::xla::ffi::Error::InvalidArgument("got " + std::to_string(remaining_.size()) + " optional " + what_ +
                                                "s; expected " + std::to_string(next_));
    }
    return ::xla::ffi::Error::Success();
  }

 private:
  const Remaining& remaining_;
  const char* what_;
  size_t next_ = 0;
};

// The data of an optional buffer, nullptr where it is absent.
inline void* DataOrNull(const std::optional<::xla::ffi::AnyBuffer>& buffer) {
  return buffer.has_value() ? buffer->untyped_data() : nullptr;
}
inline void* DataOrNull(std::optional<::xla::ffi::Result<::xla::ffi::AnyBuffer>>& buffer) {  // Result's -> is not const
  return buffer.has_value() ? (*buffer)->untyped_data() : nullptr;
}

}  // namespace jax_cudnn_rnn

#endif  // JAX_CUDNN_RNN_COMMON_FFI_ARGS_H_
