// A call's launch (one LaunchShape, decoded and validated in one place) and
// its kernel id, derived from its content; every call is checked against
// both before anything runs (both handlers).
//
// The launch travels as one attribute, a dictionary with exactly four
// members (its StableHLO form; XLA passes it sorted by name):
//
//   launch = {block = dense<[128, 1, 1]> : tensor<3xi32>,
//             cluster = dense<[1, 1, 1]> : tensor<3xi32>,
//             grid = dense<[8, 1, 1]> : tensor<3xi32>, smem = 0 : i64}
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

// What cuLaunchKernelEx takes: blocks per grid, threads per block, blocks
// per cluster ({1, 1, 1}: no cluster), bytes of dynamic shared memory.
struct LaunchShape {
  std::array<int64_t, 3> grid{1, 1, 1}, block{1, 1, 1}, cluster{1, 1, 1};
  int64_t smem = 0;

  // CUDA's limits that hold on every target: jaxptx/launch.py has the same
  // numbers (MAX_GRID, MAX_BLOCK, MAX_THREADS_PER_BLOCK, MAX_CLUSTER_SIZE,
  // the largest of MAX_SMEM_PER_BLOCK) and their sources; module.cc exposes
  // these as _ffi.launch_limits(), and tests/test_build.py checks they agree.
  static constexpr std::array<int64_t, 3> kMaxGrid = {2147483647, 65535, 65535};
  static constexpr std::array<int64_t, 3> kMaxBlock = {1024, 1024, 64};
  static constexpr int64_t kMaxThreads = 1024;
  static constexpr int64_t kMaxClusterSize = 8;     // portable; larger ones need an opt-in
  static constexpr int64_t kMaxSmem = 227 * 1024;   // sm_90/sm_100's per-block maximum

  int64_t threads() const { return block[0] * block[1] * block[2]; }
  int64_t cluster_size() const { return cluster[0] * cluster[1] * cluster[2]; }

  // The limits above, as jaxptx/launch.py's Launch checks them (each dim >=
  // 1; grid <= kMaxGrid; block <= kMaxBlock and kMaxThreads threads; a
  // cluster of <= kMaxClusterSize blocks that divides the grid; smem <=
  // kMaxSmem). The target's own limits (clusters from sm_90, its
  // shared-memory maximum) are checked at trace, and the kernel id covers
  // the launch. Empty when all hold, else why.
  std::string validate() const;
};

// The launch of a call's `launch` attribute: exactly the members block,
// cluster, grid (3 int32 each) and smem (int64), validated. Empty when it
// is one, else why ("attribute launch: ...").
std::string decode_launch(const xla::ffi::Dictionary& attr, LaunchShape* out);

// The same from the members' values (3 ints each, then validated).
std::string launch_from_members(xla::ffi::Span<const int32_t> grid,
                                xla::ffi::Span<const int32_t> block,
                                xla::ffi::Span<const int32_t> cluster, int64_t smem,
                                LaunchShape* out);

// The launch integers of a call, in the canonical order above.
std::vector<int64_t> launch_integers(const LaunchShape& launch,
                                     const std::vector<int64_t>& input_bytes,
                                     const std::vector<int64_t>& output_bytes,
                                     xla::ffi::Span<const int64_t> tma);

// The id of a call's content (48 bits, as a non-negative int64).
int64_t content_id(std::string_view ptx, std::string_view entry,
                   const std::vector<int64_t>& launch);

// Checks a call's content against its id: empty when they agree, else the
// error message (`target` prefixes it). Content already verified under an
// id is remembered, so later calls of it cost a comparison, not a hash.
std::string verify_call(std::string_view target, int64_t kernel_id, std::string_view ptx,
                        std::string_view entry, const std::vector<int64_t>& launch);

// Everything a handler checks before it runs a call: no PTX or entry is
// empty, the `launch` attribute decodes to a valid launch (into *launch),
// and the content matches the id (verify_call). Empty when all hold, else
// the error message (`target`, the entry and the id prefix it).
std::string check_call(std::string_view target, int64_t kernel_id, std::string_view ptx,
                       std::string_view entry, const xla::ffi::Dictionary& launch_attr,
                       xla::ffi::Span<const int64_t> tma,
                       const std::vector<int64_t>& input_bytes,
                       const std::vector<int64_t>& output_bytes, LaunchShape* launch);

// The same with the launch's members given (module.cc's hook for tests).
std::string check_call(std::string_view target, int64_t kernel_id, std::string_view ptx,
                       std::string_view entry, xla::ffi::Span<const int32_t> grid,
                       xla::ffi::Span<const int32_t> block,
                       xla::ffi::Span<const int32_t> cluster, int64_t smem,
                       xla::ffi::Span<const int64_t> tma,
                       const std::vector<int64_t>& input_bytes,
                       const std::vector<int64_t>& output_bytes);

}  // namespace jaxptx

#endif  // JAXPTX_FFI_CALL_IDENTITY_H_
