// Content ids of kernel calls (call_identity.h) and SHA-256.

#include "call_identity.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace jaxptx {

namespace {

constexpr uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void compress(uint32_t h[8], const uint8_t* block) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i) {
    w[i] = uint32_t(block[4 * i]) << 24 | uint32_t(block[4 * i + 1]) << 16 |
           uint32_t(block[4 * i + 2]) << 8 | uint32_t(block[4 * i + 3]);
  }
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
  }
  h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += k;
}

void append_le64(std::string* out, int64_t v) {
  uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

std::string call_where(std::string_view target, int64_t kernel_id, std::string_view entry) {
  return std::string(target) + ": kernel " + std::string(entry) + " (id " +
         std::to_string(kernel_id) + "): ";
}

constexpr std::string_view kTag = "jaxptx-kernel-v1\n";

// What has been verified under each id: later calls compare, not hash.
struct Verified {
  std::string ptx, entry;
  std::vector<int64_t> launch;
};
std::mutex g_mutex;
std::unordered_map<int64_t, std::shared_ptr<const Verified>> g_verified;

}  // namespace

std::array<uint8_t, 32> sha256(std::string_view data) {
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const uint8_t* p = reinterpret_cast<const uint8_t*>(data.data());
  size_t full = data.size() / 64;
  for (size_t i = 0; i < full; ++i) compress(h, p + 64 * i);
  uint8_t tail[128] = {0};
  size_t rest = data.size() - 64 * full;
  if (rest) std::memcpy(tail, p + 64 * full, rest);
  tail[rest] = 0x80;
  size_t blocks = rest + 9 <= 64 ? 1 : 2;
  uint64_t bits = static_cast<uint64_t>(data.size()) * 8;
  for (int i = 0; i < 8; ++i) tail[64 * blocks - 1 - i] = static_cast<uint8_t>(bits >> (8 * i));
  for (size_t i = 0; i < blocks; ++i) compress(h, tail + 64 * i);
  std::array<uint8_t, 32> out;
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<uint8_t>(h[i] >> (24 - 8 * j));
  }
  return out;
}

std::vector<int64_t> launch_integers(const LaunchShape& launch,
                                     const std::vector<int64_t>& input_bytes,
                                     const std::vector<int64_t>& output_bytes,
                                     xla::ffi::Span<const int64_t> tma) {
  std::vector<int64_t> v;
  for (const auto* dims : {&launch.grid, &launch.block, &launch.cluster}) {
    v.insert(v.end(), dims->begin(), dims->end());
  }
  v.push_back(launch.smem);
  v.push_back(static_cast<int64_t>(input_bytes.size()));
  v.push_back(static_cast<int64_t>(output_bytes.size()));
  v.insert(v.end(), input_bytes.begin(), input_bytes.end());
  v.insert(v.end(), output_bytes.begin(), output_bytes.end());
  v.push_back(static_cast<int64_t>(tma.size()));
  v.insert(v.end(), tma.begin(), tma.end());
  return v;
}

int64_t content_id(std::string_view ptx, std::string_view entry,
                   const std::vector<int64_t>& launch) {
  std::string data(kTag);
  data.reserve(kTag.size() + ptx.size() + entry.size() + 8 * (launch.size() + 2));
  append_le64(&data, static_cast<int64_t>(ptx.size()));
  data.append(ptx);
  append_le64(&data, static_cast<int64_t>(entry.size()));
  data.append(entry);
  for (int64_t v : launch) append_le64(&data, v);
  std::array<uint8_t, 32> digest = sha256(data);
  uint64_t first = 0;
  for (int i = 0; i < 8; ++i) first |= uint64_t(digest[i]) << (8 * i);
  return static_cast<int64_t>(first >> 16);
}

std::string verify_call(std::string_view target, int64_t kernel_id, std::string_view ptx,
                        std::string_view entry, const std::vector<int64_t>& launch) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_verified.find(kernel_id);
    if (it != g_verified.end() && it->second->ptx == ptx && it->second->entry == entry &&
        it->second->launch == launch) {
      return "";
    }
  }
  int64_t want = content_id(ptx, entry, launch);
  std::string where = call_where(target, kernel_id, entry);
  if (want != kernel_id) {
    return where +
           "the call's PTX, entry or launch does not match its kernel id (the content hashes "
           "to id " + std::to_string(want) + "): the custom call was edited after lowering "
           "(an exported artifact changed by hand?); lower and export the function again";
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  auto [it, inserted] = g_verified.emplace(
      kernel_id, std::make_shared<const Verified>(
                     Verified{std::string(ptx), std::string(entry), launch}));
  if (!inserted && (it->second->ptx != ptx || it->second->entry != entry ||
                    it->second->launch != launch)) {
    return where + "two different kernels hash to this id (a 48-bit collision); change "
                   "either kernel slightly";
  }
  return "";
}

namespace {

constexpr const char* kAxes = "xyz";

std::string dims_text(const std::array<int64_t, 3>& v) {
  return "(" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ", " +
         std::to_string(v[2]) + ")";
}

// A member of 3 positive ints, or why not.
std::string read_dim3(xla::ffi::Span<const int32_t> v, const char* what,
                      std::array<int64_t, 3>* out) {
  bool ok = v.size() == 3;
  for (size_t i = 0; ok && i < 3; ++i) ok = v[i] > 0;
  if (ok) {
    for (size_t i = 0; i < 3; ++i) (*out)[i] = v[i];
    return "";
  }
  std::string got;
  for (size_t i = 0; i < v.size(); ++i) got += (i ? ", " : "") + std::to_string(v[i]);
  return std::string("attribute launch: ") + what + ": expected 3 positive ints, got [" + got +
         "]";
}

// check_call once the launch is decoded (or `launch_error` says why not).
std::string check_decoded(std::string_view target, int64_t kernel_id, std::string_view ptx,
                          std::string_view entry, const std::string& launch_error,
                          const LaunchShape& launch, xla::ffi::Span<const int64_t> tma,
                          const std::vector<int64_t>& input_bytes,
                          const std::vector<int64_t>& output_bytes) {
  std::string where = call_where(target, kernel_id, entry);
  if (ptx.empty() || entry.empty()) return where + "the call has an empty ptx or entry attribute";
  if (!launch_error.empty()) return where + launch_error;
  return verify_call(target, kernel_id, ptx, entry,
                     launch_integers(launch, input_bytes, output_bytes, tma));
}

}  // namespace

std::string LaunchShape::validate() const {
  std::string where = "attribute launch: ";
  for (auto [dims, name] : {std::pair{&grid, "grid"}, {&block, "block"}, {&cluster, "cluster"}}) {
    for (int i = 0; i < 3; ++i) {
      if ((*dims)[i] < 1) {
        return where + name + " = " + dims_text(*dims) + ": every dimension must be >= 1";
      }
    }
  }
  for (auto [dims, limits, name] : {std::tuple{&grid, &kMaxGrid, "grid"},
                                    {&block, &kMaxBlock, "block"}}) {
    for (int i = 0; i < 3; ++i) {
      if ((*dims)[i] > (*limits)[i]) {
        return where + name + "." + kAxes[i] + " = " + std::to_string((*dims)[i]) +
               " exceeds CUDA's limit of " + std::to_string((*limits)[i]);
      }
    }
  }
  if (threads() > kMaxThreads) {
    return where + "block = " + dims_text(block) + " has " + std::to_string(threads()) +
           " threads, over CUDA's limit of " + std::to_string(kMaxThreads) + " per block";
  }
  if (cluster_size() > kMaxClusterSize) {
    return where + "cluster = " + dims_text(cluster) + " has " + std::to_string(cluster_size()) +
           " blocks, over CUDA's portable limit of " + std::to_string(kMaxClusterSize);
  }
  for (int i = 0; i < 3; ++i) {
    if (grid[i] % cluster[i] != 0) {
      return where + "grid." + kAxes[i] + " = " + std::to_string(grid[i]) +
             " is not a multiple of cluster." + kAxes[i] + " = " + std::to_string(cluster[i]) +
             " (a grid is made of whole clusters)";
    }
  }
  if (smem < 0 || smem > kMaxSmem) {
    return where + "smem = " + std::to_string(smem) + ": expected 0 to " +
           std::to_string(kMaxSmem) + " bytes of dynamic shared memory (the most any CUDA "
           "target allows per block)";
  }
  return "";
}

std::string launch_from_members(xla::ffi::Span<const int32_t> grid,
                                xla::ffi::Span<const int32_t> block,
                                xla::ffi::Span<const int32_t> cluster, int64_t smem,
                                LaunchShape* out) {
  LaunchShape launch;
  for (auto [v, name, dims] : {std::tuple{grid, "grid", &launch.grid},
                               {block, "block", &launch.block},
                               {cluster, "cluster", &launch.cluster}}) {
    std::string bad = read_dim3(v, name, dims);
    if (!bad.empty()) return bad;
  }
  launch.smem = smem;
  std::string bad = launch.validate();
  if (bad.empty()) *out = launch;
  return bad;
}

std::string decode_launch(const xla::ffi::Dictionary& attr, LaunchShape* out) {
  namespace ffi = xla::ffi;
  static constexpr std::string_view kMembers[] = {"block", "cluster", "grid", "smem"};
  std::string names;
  bool exact = attr.size() == 4;
  for (auto it = attr.begin(); it != attr.end(); ++it) {
    names += (names.empty() ? "" : ", ") + std::string(*it);
  }
  for (std::string_view m : kMembers) exact = exact && attr.contains(m);
  if (!exact) {
    return "attribute launch: expected the members block, cluster, grid (3 int32 each) and "
           "smem (int64), got {" + names + "}";
  }
  std::array<ffi::Span<const int32_t>, 3> dims;
  const char* dim_names[] = {"grid", "block", "cluster"};
  for (int i = 0; i < 3; ++i) {
    auto v = attr.get<ffi::Span<const int32_t>>(dim_names[i]);
    if (!v.has_value()) {
      return std::string("attribute launch: ") + dim_names[i] + ": expected 3 int32, " +
             std::string(v.error().message());
    }
    dims[i] = *v;
  }
  auto smem = attr.get<int64_t>("smem");
  if (!smem.has_value()) {
    return "attribute launch: smem: expected an int64, " + std::string(smem.error().message());
  }
  return launch_from_members(dims[0], dims[1], dims[2], *smem, out);
}

std::string check_call(std::string_view target, int64_t kernel_id, std::string_view ptx,
                       std::string_view entry, const xla::ffi::Dictionary& launch_attr,
                       xla::ffi::Span<const int64_t> tma,
                       const std::vector<int64_t>& input_bytes,
                       const std::vector<int64_t>& output_bytes, LaunchShape* launch) {
  std::string bad = decode_launch(launch_attr, launch);
  return check_decoded(target, kernel_id, ptx, entry, bad, *launch, tma, input_bytes,
                       output_bytes);
}

std::string check_call(std::string_view target, int64_t kernel_id, std::string_view ptx,
                       std::string_view entry, xla::ffi::Span<const int32_t> grid,
                       xla::ffi::Span<const int32_t> block,
                       xla::ffi::Span<const int32_t> cluster, int64_t smem,
                       xla::ffi::Span<const int64_t> tma,
                       const std::vector<int64_t>& input_bytes,
                       const std::vector<int64_t>& output_bytes) {
  LaunchShape launch;
  std::string bad = launch_from_members(grid, block, cluster, smem, &launch);
  return check_decoded(target, kernel_id, ptx, entry, bad, launch, tma, input_bytes,
                       output_bytes);
}

}  // namespace jaxptx
