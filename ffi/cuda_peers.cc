// Kernels that name their peers, on GPUs (cuda_peers.h): the `peers`
// attribute, the host rendezvous of a call's ranks, peer access, multicast
// workspaces (cuda_multicast.h) and the peer tables.

#include "cuda_peers.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "cuda_multicast.h"
#include "handlers.h"

namespace ffi = xla::ffi;

namespace jaxptx::cu {

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kTimeoutEnv = "JAXPTX_PEER_TIMEOUT";
constexpr double kDefaultTimeout = 60.0;  // seconds, as jaxptx/jax/_peer_cpu.py
constexpr std::string_view kMembers[] = {"axis_name", "axis_size", "buffers", "multimem", "site"};

std::string where(const PeerRank& me) {
  return std::string(JAXPTX_CUDA_TARGET ": kernel ") + me.entry;
}

std::string axis(const PeerCall& c) {
  return "mesh axis '" + c.axis_name + "' (size " + std::to_string(c.axis_size) + ")";
}

std::string rank_list(const std::vector<int64_t>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out + "]";
}

// $JAXPTX_PEER_TIMEOUT in seconds, or nothing with `bad` set.
std::optional<double> peer_timeout(std::string* bad) {
  const char* raw = std::getenv(kTimeoutEnv);
  std::string text = raw ? raw : "";
  text.erase(0, text.find_first_not_of(" \t\n"));
  text.erase(text.find_last_not_of(" \t\n") + 1);
  if (text.empty()) return kDefaultTimeout;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !(value > 0) || std::isnan(value)) {
    *bad = std::string(kTimeoutEnv) + "='" + text + "': expected a positive number of seconds";
    return std::nullopt;
  }
  return std::min(value, 1e9);  // beyond any wait, and within the clock's range
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

// Why a rank cannot launch (an empty message: it can).
struct Failure {
  ffi::ErrorCode code = ffi::ErrorCode::kInternal;
  std::string message;
};

Failure internal(std::string message) { return {ffi::ErrorCode::kInternal, std::move(message)}; }

// One rank's registration: its context, device and peer tensors' addresses
// and sizes.
struct Arrival {
  CUcontext ctx;
  CUdevice device;
  std::vector<uint64_t> peers;  // in `peers` order
  std::vector<size_t> nbytes;   // in `peers` order
};

// The barriers after the arrivals: every rank's multicast workspaces bound
// (calls with multimem only), then every rank ready to launch.
enum Phase { kBound = 0, kReady = 1 };
constexpr const char* kPhaseWaits[] = {"bind their multicast workspaces", "get ready"};

// The ranks of one call: filled by rank, then readied by rank (per phase).
struct Meeting {
  explicit Meeting(size_t n) : arrivals(n), ready{std::vector<bool>(n), std::vector<bool>(n)} {}
  std::vector<std::optional<Arrival>> arrivals;
  std::vector<bool> ready[2];
  size_t arrived = 0, readied[2] = {0, 0};
  bool failed = false;
  ffi::ErrorCode code = ffi::ErrorCode::kInternal;  // what every rank reports once it failed
  std::string why;
  std::vector<int64_t> missing;     // the ranks that never arrived (a timeout)
  // The call's multicast workspaces (by peer tensor; null where none),
  // found or made by the first rank past the arrivals, under team_mutex.
  std::mutex team_mutex;
  bool team_made = false;
  Failure team_failure;
  std::vector<std::shared_ptr<Workspace>> workspaces;

  std::vector<int64_t> absent() const {
    std::vector<int64_t> out;
    for (size_t r = 0; r < arrivals.size(); ++r) if (!arrivals[r]) out.push_back(r);
    return out;
  }
  std::vector<int64_t> unready(Phase phase) const {
    std::vector<int64_t> out;
    for (size_t r = 0; r < ready[phase].size(); ++r) if (!ready[phase][r]) out.push_back(r);
    return out;
  }
};

// The meetings not yet full, by (kernel id, site, axis, size): a rank joins
// the oldest it is not part of, so a call repeated (in a loop, or the next
// execution) meets its own repetitions on the other devices. Process-wide by
// nature: XLA's threads meet here.
// (kernel id, call site, axis name, axis size, group): the group is the
// device's position on the mesh's other axes; only its devices meet.
using Key = std::tuple<int64_t, int64_t, std::string, int64_t, int64_t>;
std::mutex g_mutex;
std::condition_variable g_changed;
std::map<Key, std::vector<std::shared_ptr<Meeting>>> g_open;

// Takes a meeting off the open list (full, or given up); g_mutex is held.
void close(const Key& key, const std::shared_ptr<Meeting>& m) {
  auto it = g_open.find(key);
  if (it == g_open.end()) return;
  auto& list = it->second;
  list.erase(std::remove(list.begin(), list.end(), m), list.end());
  if (list.empty()) g_open.erase(it);
}

std::shared_ptr<Meeting> join(const Key& key, size_t n, uint32_t rank, Arrival arrival) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& list = g_open[key];
  std::shared_ptr<Meeting> m;
  for (auto& open : list) {
    if (!open->arrivals[rank]) {
      m = open;
      break;
    }
  }
  if (!m) list.push_back(m = std::make_shared<Meeting>(n));
  m->arrivals[rank] = std::move(arrival);
  if (++m->arrived == n) {
    close(key, m);
    g_changed.notify_all();
  }
  return m;
}

// Waits for every rank to arrive; a failure (a timeout here, or another
// rank's) is returned as its message.
Failure wait_full(const Key& key, const std::shared_ptr<Meeting>& self, const PeerCall& c,
                  const PeerRank& me, uint32_t rank, double limit) {
  Meeting& m = *self;
  std::unique_lock<std::mutex> lock(g_mutex);
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(limit));
  bool full = g_changed.wait_until(lock, deadline, [&] {
    return m.arrived == m.arrivals.size() || m.failed;
  });
  if (!full) {
    m.failed = true;
    m.missing = m.absent();
    close(key, self);
    g_changed.notify_all();
  }
  if (!m.failed) return {};
  if (m.missing.empty()) return {m.code, m.why};
  return {ffi::ErrorCode::kDeadlineExceeded,
          where(me) + ": rank " + std::to_string(rank) + " of " + axis(c) + " waited " +
              seconds(limit) + " s for the other ranks; rank(s) " + rank_list(m.missing) +
              " never called it. A kernel with peers runs only when every device of the axis "
              "calls it, as often (not under a lax.cond or loop that differs by device), and on "
              "GPUs only when this one process drives every device of the axis (multi-process "
              "meshes are not supported); $" + kTimeoutEnv + " sets the wait"};
}

// Posts this rank's readiness for `phase` (`mine` has no message) or its
// failure, and waits for every rank to be so ready. Returns the failure
// every rank reports, or none (an empty message): then, at kReady, every
// rank's table exists, and it may launch.
Failure wait_ready(Meeting& m, Phase phase, const PeerCall& c, const PeerRank& me,
                   uint32_t rank, const Failure& mine, double limit) {
  std::unique_lock<std::mutex> lock(g_mutex);
  if (!mine.message.empty()) {
    if (!m.failed) {
      m.failed = true;
      m.code = mine.code;
      m.why = mine.message + " (so no rank of " + axis(c) + " launched it)";
    }
    g_changed.notify_all();
    return {m.code, m.why};
  }
  m.ready[phase][rank] = true;
  ++m.readied[phase];
  g_changed.notify_all();
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(limit));
  bool done = g_changed.wait_until(lock, deadline, [&] {
    return m.readied[phase] == m.ready[phase].size() || m.failed;
  });
  if (!done) {
    m.failed = true;
    m.code = ffi::ErrorCode::kDeadlineExceeded;
    m.why = where(me) + ": rank(s) " + rank_list(m.unready(phase)) + " of " + axis(c) +
            " did not " + kPhaseWaits[phase] + " within " + seconds(limit) +
            " s of the others (no rank launched it)";
    g_changed.notify_all();
  }
  if (!m.failed) return {};
  return {m.code, m.why};
}

// The pairs (accessing context, peer context) with peer access enabled in
// this process.
std::mutex g_access_mutex;
std::set<std::pair<CUcontext, CUcontext>> g_enabled;

// Enables peer access from this rank's context (current) to every other
// rank's. Empty when done, else why.
Failure enable_peer_access(const Driver& d, const Meeting& m, const PeerCall& c,
                           const PeerRank& me, uint32_t rank) {
  const Arrival& mine = *m.arrivals[rank];
  std::lock_guard<std::mutex> lock(g_access_mutex);
  for (size_t s = 0; s < m.arrivals.size(); ++s) {
    const Arrival& peer = *m.arrivals[s];
    if (s == rank) continue;
    if (peer.device == mine.device) {
      return {ffi::ErrorCode::kFailedPrecondition,
              where(me) + ": ranks " + std::to_string(rank) + " and " + std::to_string(s) +
                  " of " + axis(c) + " run on one device (" + std::to_string(mine.device) +
                  "); each rank of a kernel with peers needs a GPU of its own"};
    }
    if (g_enabled.count({mine.ctx, peer.ctx})) continue;
    int can = 0;
    CUresult rc = d.cuDeviceCanAccessPeer(&can, mine.device, peer.device);
    if (rc != CUDA_SUCCESS) {
      return internal(where(me) + ": cuDeviceCanAccessPeer(device " +
                      std::to_string(mine.device) + ", device " + std::to_string(peer.device) +
                      ") failed: " + describe(d, rc));
    }
    if (!can) {
      return {ffi::ErrorCode::kFailedPrecondition,
              where(me) + ": device " + std::to_string(mine.device) + " (rank " +
                  std::to_string(rank) + " of " + axis(c) +
                  ") cannot access the memory of device " + std::to_string(peer.device) +
                  " (rank " + std::to_string(s) +
                  "): cuDeviceCanAccessPeer says no. A kernel with peers needs every pair of "
                  "its axis's GPUs to reach each other (NVLink or PCIe peer-to-peer); use a "
                  "mesh axis over GPUs that can"};
    }
    rc = d.cuCtxEnablePeerAccess(peer.ctx, 0);
    if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) {
      return internal(where(me) + ": enabling peer access from device " +
                      std::to_string(mine.device) + " to device " +
                      std::to_string(peer.device) + " failed: " + describe(d, rc));
    }
    g_enabled.insert({mine.ctx, peer.ctx});
  }
  return {};
}

// Each rank's peer-table buffer, by (kernel id, site, axis, size, context,
// stream): allocated on first use and kept, its content written anew each
// call in stream order (after the previous launch that read it).
using TableKey = std::tuple<int64_t, int64_t, std::string, int64_t, CUcontext, CUstream>;
std::mutex g_table_mutex;
std::map<TableKey, CUdeviceptr> g_tables;

// Writes this rank's peer table and synchronises its stream (its private
// copies, workspace copies and table are then in place). A peer tensor with
// a multicast workspace has the ranks' unicast views as its entries and this
// rank's mapping of the object as its multicast address. Empty when done,
// else why.
Failure write_table(const Driver& d, const Meeting& m, const PeerCall& c, const PeerRank& me,
                    uint32_t rank, CUdeviceptr* table) {
  const size_t n = m.arrivals.size(), k = c.buffers.size();
  std::vector<uint64_t> rows(k * n + k, 0);  // multicast entries without a workspace stay 0
  for (size_t t = 0; t < k; ++t) {
    const Workspace* w = m.workspaces.empty() ? nullptr : m.workspaces[t].get();
    for (size_t r = 0; r < n; ++r) {
      rows[t * n + r] = w ? w->ranks[r].unicast : m.arrivals[r]->peers[t];
    }
    if (w) rows[k * n + t] = w->ranks[rank].multicast;
  }
  const size_t nbytes = rows.size() * sizeof(uint64_t);
  if (nbytes == 0) return {};  // no peer tensors: the table is never read
  {
    std::lock_guard<std::mutex> lock(g_table_mutex);
    CUdeviceptr& slot =
        g_tables[{me.kernel_id, c.site, c.axis_name, c.axis_size, me.ctx, me.stream}];
    if (!slot) {
      CUresult rc = d.cuMemAlloc_v2(&slot, nbytes);
      if (rc != CUDA_SUCCESS) {
        slot = 0;
        return internal(where(me) + ": allocating its peer table (" + std::to_string(nbytes) +
                        " bytes) failed: " + describe(d, rc));
      }
    }
    *table = slot;
  }
  CUresult rc = d.cuMemcpyHtoDAsync_v2(*table, rows.data(), nbytes, me.stream);
  if (rc != CUDA_SUCCESS) {
    return internal(where(me) + ": copying its peer table to the device failed: " +
                    describe(d, rc));
  }
  rc = d.cuStreamSynchronize(me.stream);
  if (rc != CUDA_SUCCESS) {
    return internal(where(me) + ": synchronising its stream before the launch failed: " +
                    describe(d, rc));
  }
  return {};
}

// The peer tensors whose multicast address the kernel takes (bits 0..62 of
// the mask; decode_peers refuses bits past the peer tensors).
std::vector<size_t> multimem_peers(const PeerCall& c) {
  std::vector<size_t> out;
  for (size_t k = 0; k < c.buffers.size() && k < 63; ++k) {
    if ((c.multimem >> k) & 1) out.push_back(k);
  }
  return out;
}

// Finds or makes the call's multicast workspaces (the first rank here does,
// for all) and sets up this rank's share of each. Empty when done, else why.
Failure ready_workspaces(const Driver& d, Meeting& m, const PeerCall& c, const PeerRank& me,
                         uint32_t rank) {
  const std::vector<size_t> peers = multimem_peers(c);
  {
    std::lock_guard<std::mutex> lock(m.team_mutex);
    if (!m.team_made) {
      m.team_made = true;
      WorkspaceRequest request{me.kernel_id, c.site, c.axis_name, c.axis_size, peers, {}, {}, {}};
      for (const auto& a : m.arrivals) {
        request.devices.push_back(a->device);
        request.contexts.push_back(a->ctx);
      }
      for (size_t k : peers) {
        const size_t bytes = m.arrivals[0]->nbytes[k];
        for (size_t r = 1; r < m.arrivals.size() && m.team_failure.message.empty(); ++r) {
          if (m.arrivals[r]->nbytes[k] == bytes) continue;
          m.team_failure = {ffi::ErrorCode::kInvalidArgument,
                            where(me) + ": peer tensor " + std::to_string(k) + " has " +
                                std::to_string(bytes) + " bytes on rank 0 and " +
                                std::to_string(m.arrivals[r]->nbytes[k]) + " on rank " +
                                std::to_string(r) + " of " + axis(c) +
                                ": a multicast object maps the same bytes on every rank"};
        }
        request.nbytes.push_back(bytes);
      }
      std::vector<std::shared_ptr<Workspace>> found;
      bool refused = false;
      if (m.team_failure.message.empty()) {
        std::string bad = find_workspaces(d, request, where(me), axis(c), &found, &refused);
        if (!bad.empty()) {
          m.team_failure = {refused ? ffi::ErrorCode::kFailedPrecondition
                                    : ffi::ErrorCode::kInternal, bad};
        }
      }
      if (m.team_failure.message.empty()) {
        m.workspaces.assign(c.buffers.size(), nullptr);
        for (size_t i = 0; i < peers.size(); ++i) m.workspaces[peers[i]] = found[i];
      }
    }
    if (!m.team_failure.message.empty()) return m.team_failure;
  }
  for (size_t k : peers) {
    std::string bad = back_workspace(d, *m.workspaces[k], rank, k, where(me));
    if (!bad.empty()) return internal(bad);
  }
  return {};
}

// Points the kernel at this rank's unicast view of each workspace (every
// tensor at the address of the peer tensor's buffer: an output in place
// too), copies XLA's buffer in where it is an input, and lists the copies
// out after the launch where it is an output. Empty when done, else why.
Failure stage_workspaces(const Driver& d, const Meeting& m, const PeerCall& c,
                         const PeerRank& me, uint32_t rank, PeerParams* out) {
  std::vector<size_t> peers = multimem_peers(c);
  for (size_t k : peers) {
    const size_t t = static_cast<size_t>(c.buffers[k]);
    void* original = me.tensors[t];
    for (size_t other : peers) {
      if (other < k && me.tensors[static_cast<size_t>(c.buffers[other])] == original &&
          me.nbytes[t] > 0) {
        return {ffi::ErrorCode::kInvalidArgument,
                where(me) + ": peer tensors " + std::to_string(other) + " and " +
                    std::to_string(k) + " are one buffer (an output in place), and each takes "
                    "a multicast workspace of its own: name one of them in peers"};
      }
    }
    const CUdeviceptr view = m.workspaces[k]->ranks[rank].unicast;
    const size_t nbytes = me.nbytes[t];
    bool input = false;
    for (size_t j = 0; j < me.tensors.size(); ++j) {
      if (me.tensors[j] != original || (j != t && nbytes == 0)) continue;
      out->redirect.emplace_back(j, view);
      if (j < me.n_in) {
        input = true;
      } else if (nbytes > 0) {
        out->copy_out.push_back({reinterpret_cast<CUdeviceptr>(original), view, nbytes});
      }
    }
    if (input && nbytes > 0) {
      CUresult rc = d.cuMemcpyDtoDAsync_v2(view, reinterpret_cast<CUdeviceptr>(original), nbytes,
                                           me.stream);
      if (rc != CUDA_SUCCESS) {
        return internal(where(me) + ": copying peer tensor " + std::to_string(k) +
                        " into its multicast workspace failed: " + describe(d, rc));
      }
    }
  }
  return {};
}

// The entry points a call with peers needs beyond a launch's, or the first
// one the driver lacks.
const char* missing_entry_point(const Driver& d) {
  if (!d.cuDeviceGetCount) return "cuDeviceGetCount";
  if (!d.cuCtxGetDevice) return "cuCtxGetDevice";
  if (!d.cuDeviceCanAccessPeer) return "cuDeviceCanAccessPeer";
  if (!d.cuCtxEnablePeerAccess) return "cuCtxEnablePeerAccess";
  if (!d.cuMemAlloc_v2) return "cuMemAlloc_v2";
  if (!d.cuMemcpyHtoDAsync_v2) return "cuMemcpyHtoDAsync_v2";
  return nullptr;
}

// Refusals before the rendezvous: what this process cannot run at all.
ffi::Error refuse(const Driver& d, const PeerCall& c, const PeerRank& me) {
  if (const char* name = missing_entry_point(d)) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      where(me) + " has peers, and the CUDA driver has no " + name +
                          ", which their calls need: update the NVIDIA driver");
  }
  if (c.multimem != 0) {
    if (const char* name = missing_multicast_entry_point(d)) {
      return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                        where(me) + " takes the multicast address (multimem_ptr) of a peer "
                            "tensor, and the CUDA driver has no " + name +
                            ", which multicast objects need (CUDA 12.1+): update the NVIDIA "
                            "driver, or use peer_ptr");
    }
  }
  int count = 0;
  CUresult rc = d.cuDeviceGetCount(&count);
  if (rc != CUDA_SUCCESS) {
    return ffi::Error::Internal(where(me) + ": cuDeviceGetCount failed: " + describe(d, rc));
  }
  if (c.axis_size > count) {
    return ffi::Error(
        ffi::ErrorCode::kFailedPrecondition,
        where(me) + ": " + axis(c) + " has " + std::to_string(c.axis_size) +
            " devices, but this process has " + std::to_string(count) +
            " GPU(s): a kernel with peers runs on GPUs only when one process drives every device "
            "of its axis (single-process multi-GPU); multi-process meshes are not supported");
  }
  return ffi::Error::Success();
}

// The rank operand's value, read after the stream's work that computes it.
ffi::Error read_rank(const Driver& d, const PeerCall& c, const PeerRank& me, uint32_t* rank) {
  CUresult rc = d.cuStreamSynchronize(me.stream);
  if (rc == CUDA_SUCCESS) {
    rc = d.cuMemcpyDtoH_v2(rank, reinterpret_cast<CUdeviceptr>(me.rank_buffer), sizeof(*rank));
  }
  if (rc != CUDA_SUCCESS) {
    return ffi::Error::Internal(where(me) + ": reading its rank on " + axis(c) + " failed: " +
                                describe(d, rc));
  }
  return ffi::Error::Success();
}

}  // namespace

std::string decode_peers(const ffi::Dictionary& attr, size_t n_tensors, PeerCall* out) {
  const std::string what = "attribute peers: ";
  std::string extra;
  for (auto it = attr.begin(); it != attr.end(); ++it) {
    std::string_view name = *it;
    if (std::find(std::begin(kMembers), std::end(kMembers), name) == std::end(kMembers)) {
      extra += (extra.empty() ? "" : ", ") + std::string(name);
    }
  }
  if (!extra.empty()) {
    return what + "unknown members " + extra +
           " (this jaxptx reads axis_name, axis_size, buffers, multimem, site)";
  }
  auto name = attr.get<std::string_view>("axis_name");
  auto size = attr.get<int64_t>("axis_size");
  auto buffers = attr.get<ffi::Span<const int64_t>>("buffers");
  auto multimem = attr.get<int64_t>("multimem");
  auto site = attr.get<int64_t>("site");
  if (!name.has_value()) return what + "axis_name: " + name.error().message();
  if (!size.has_value()) return what + "axis_size: " + size.error().message();
  if (!buffers.has_value()) return what + "buffers: " + buffers.error().message();
  if (!multimem.has_value()) return what + "multimem: " + multimem.error().message();
  if (!site.has_value()) return what + "site: " + site.error().message();
  out->axis_name = std::string(*name);
  out->axis_size = *size;
  out->buffers.assign(buffers->begin(), buffers->end());
  out->multimem = *multimem;
  out->site = *site;
  if (out->multimem < 0 || (out->buffers.size() < 63 &&
                            (out->multimem >> out->buffers.size()) != 0)) {
    return what + "multimem: expected a mask of the " + std::to_string(out->buffers.size()) +
           " peer tensors, got " + std::to_string(out->multimem);
  }
  if (out->axis_size < 1 || out->axis_size > 65536) {
    return what + "axis_size: expected 1 to 65536 devices, got " + std::to_string(out->axis_size);
  }
  std::vector<int64_t> seen;
  for (int64_t b : out->buffers) {
    if (b < 0 || static_cast<size_t>(b) >= n_tensors ||
        std::find(seen.begin(), seen.end(), b) != seen.end()) {
      return what + "buffers: expected distinct tensor indices below " + std::to_string(n_tensors) +
             ", got " + std::to_string(b);
    }
    seen.push_back(b);
  }
  return std::string();
}

std::string split_hidden_params(const std::vector<int64_t>& declared, std::vector<int64_t>* own) {
  size_t n = declared.size();
  if (n < 2 || declared[n - 2] != 4 || declared[n - 1] != 8) {
    return "a kernel with peers ends its parameters with .u32 jaxptx_rank and .u64 "
           "jaxptx_peers (4 and 8 bytes), but this one's last parameters are not those: the "
           "call does not match its kernel";
  }
  own->assign(declared.begin(), declared.end() - 2);
  return std::string();
}

ffi::Error meet_peers(const Driver& d, const PeerCall& c, const PeerRank& me, PeerParams* out) {
  if (ffi::Error e = refuse(d, c, me); e.failure()) return e;
  std::string bad;
  std::optional<double> limit = peer_timeout(&bad);
  if (!limit) return ffi::Error::InvalidArgument(where(me) + ": " + bad);
  // The rank operand holds the rank on the axis plus the axis size times the
  // group (jaxptx.jax._primitive._rank_operand).
  uint32_t code = 0;
  if (ffi::Error e = read_rank(d, c, me, &code); e.failure()) return e;
  out->rank = static_cast<uint32_t>(code % static_cast<uint64_t>(c.axis_size));
  const int64_t group = static_cast<int64_t>(code / static_cast<uint64_t>(c.axis_size));
  Arrival arrival{me.ctx, 0, {}, {}};
  CUresult rc = d.cuCtxGetDevice(&arrival.device);
  if (rc != CUDA_SUCCESS) {
    return ffi::Error::Internal(where(me) + ": cuCtxGetDevice failed: " + describe(d, rc));
  }
  for (int64_t t : c.buffers) {
    arrival.peers.push_back(reinterpret_cast<uint64_t>(me.tensors[static_cast<size_t>(t)]));
    arrival.nbytes.push_back(me.nbytes[static_cast<size_t>(t)]);
  }
  const Key key{me.kernel_id, c.site, c.axis_name, c.axis_size, group};
  const uint32_t rank = out->rank;
  std::shared_ptr<Meeting> m =
      join(key, static_cast<size_t>(c.axis_size), rank, std::move(arrival));
  Failure f = wait_full(key, m, c, me, rank, *limit);
  if (!f.message.empty()) return ffi::Error(f.code, f.message);
  // Every rank is here, and no entry of the meeting is written again.
  Failure mine = enable_peer_access(d, *m, c, me, rank);
  if (c.multimem != 0) {
    // Every rank's share of the workspaces is bound and mapped before any
    // rank's table lists them.
    if (mine.message.empty()) mine = ready_workspaces(d, *m, c, me, rank);
    f = wait_ready(*m, kBound, c, me, rank, mine, *limit);
    if (!f.message.empty()) return ffi::Error(f.code, f.message);
    mine = stage_workspaces(d, *m, c, me, rank, out);
  }
  if (mine.message.empty()) mine = write_table(d, *m, c, me, rank, &out->table);
  f = wait_ready(*m, kReady, c, me, rank, mine, *limit);
  if (!f.message.empty()) return ffi::Error(f.code, f.message);
  return ffi::Error::Success();
}

}  // namespace jaxptx::cu
