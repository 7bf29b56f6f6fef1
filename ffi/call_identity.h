// A kernel's id is derived from its content, and every call is checked
// against it before anything runs (both handlers).
//
// The content of a call: its PTX text, entry name and launch (grid, block,
// cluster, dynamic shared memory, TMA descriptor records, the byte size of
// each input and output). Its id is the first 48 bits of the SHA-256 of
// that content in one canonical byte form, the same form jaxptx/jax/
// _registry.py hashes at lowering:
//
//   "jaxptx-kernel-v1\n"
//   le64(len(ptx))   ptx bytes
//   le64(len(entry)) entry bytes
//   le64 each of: grid[3] block[3] cluster[3] smem
//                 n_inputs n_outputs bytes[n_inputs + n_outputs]
//                 n_tma tma[n_tma]
//
// So a call carrying new PTX under an id already seen, or an exported
// artifact whose PTX or launch was edited, is refused with a message saying
// which, never run as another kernel's code.

#ifndef JAXPTX_FFI_CALL_IDENTITY_H_
#define JAXPTX_FFI_CALL_IDENTITY_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace jaxptx {

// SHA-256 (FIPS 180-4) of `data`.
std::array<uint8_t, 32> sha256(std::string_view data);

// The launch integers of a call, in the canonical order above.
std::vector<int64_t> launch_integers(const int32_t* grid, const int32_t* block,
                                     const int32_t* cluster, int64_t smem,
                                     const std::vector<int64_t>& input_bytes,
                                     const std::vector<int64_t>& output_bytes,
                                     const int64_t* tma, size_t n_tma);

// The id of a call's content (48 bits, as a non-negative int64).
int64_t content_id(std::string_view ptx, std::string_view entry,
                   const std::vector<int64_t>& launch);

// Checks a call's content against its id: empty when they agree, else the
// error message (`target` prefixes it). Content already verified under an
// id is remembered, so later calls of it cost a comparison, not a hash.
std::string verify_call(std::string_view target, int64_t kernel_id, std::string_view ptx,
                        std::string_view entry, const std::vector<int64_t>& launch);

// Everything a handler checks before it runs a call: grid, block and
// cluster are 3 positive ints, smem is in range, no PTX or entry is empty,
// and the content matches the id (verify_call). Empty when all hold, else
// the error message.
std::string check_call(std::string_view target, int64_t kernel_id, std::string_view ptx,
                       std::string_view entry, xla::ffi::Span<const int32_t> grid,
                       xla::ffi::Span<const int32_t> block,
                       xla::ffi::Span<const int32_t> cluster, int64_t smem,
                       xla::ffi::Span<const int64_t> tma,
                       const std::vector<int64_t>& input_bytes,
                       const std::vector<int64_t>& output_bytes);

}  // namespace jaxptx

#endif  // JAXPTX_FFI_CALL_IDENTITY_H_
