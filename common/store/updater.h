// Updaters: how a server merges the received (summed) value of a key into the stored one.
//
// An Updater is applied by the ShardStore once per key per push (local and dist_async) or per
// round (dist_sync). Updaters are created by name from an UpdaterRegistry, which a kvserver owns
// and a user may extend with their own C++ updaters before starting the server; no code ever
// travels over the wire. Built in: "assign" (stored = received, MXNet's default) and "sum"
// (stored += received).
#ifndef KVSTORE_COMMON_STORE_UPDATER_H_
#define KVSTORE_COMMON_STORE_UPDATER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/key.h"
#include "common/tensor.h"

namespace kvstore {

// PartStateData: an updater's state for one part of a value (a whole value, or one chunk of a
// kvserver's part): the update count, Nadam's schedule, the state buffers (each `count`
// elements of `dtype`, as raw bytes) and, for half values, the float32 master weights.
struct PartStateData {
  Key key = 0;
  int64_t offset = 0;
  int64_t count = 0;
  int64_t updates = 0;
  double m_schedule = 1.0;
  DType dtype = DType::kFloat32;
  std::vector<std::string> buffers;
  std::string master;
};

// UpdaterStateData: everything an updater needs to continue exactly where it was.
struct UpdaterStateData {
  std::string optimizer;  // The optimizer's name; empty for stateless updaters.
  int64_t num_update = 0;
  std::vector<PartStateData> parts;
};

// Threading: a ShardStore calls Update under its own lock, one call at a time. A kvserver holds
// big values in chunks (see docs/performance.md) and may call UpdateAt concurrently for
// different (key, offset) pairs, never twice at once for one pair.
class Updater {
 public:
  virtual ~Updater() = default;

  // Update merges `received` into `*stored`. The store has already checked that both are CPU
  // tensors with the same dtype and shape. An error leaves `*stored` as it was.
  virtual absl::Status Update(const Key& key, const Tensor& received, Tensor* stored) = 0;

  // UpdateAt is Update for the part of a value that starts at flattened element `offset` (a
  // kvserver updates big values chunk by chunk, as MXNet's servers update the slices of big
  // arrays). Updaters that keep state per key must key it on (key, offset); the default calls
  // Update, which suits stateless updaters.
  virtual absl::Status UpdateAt(const Key& key, int64_t offset, const Tensor& received,
                                Tensor* stored) {
    (void)offset;
    return Update(key, received, stored);
  }

  // piecewise is true when applying the update to the pieces of any split of a value gives
  // exactly the same bits as applying it once, whatever the key and offset (stateless
  // element-wise updaters such as assign and sum). A server may then apply it straight from
  // the received bytes, piece by piece, without first gathering them into one buffer, and to
  // the elements of several keys of one dtype that lie back to back in one call. A piecewise
  // updater's UpdateSpan never fails on checked inputs: a server may acknowledge such a push
  // before applying it (ServerEngine::PushGroup, Ack::kOrdered), and only logs a failure then.
  virtual bool piecewise() const { return false; }

  // UpdateSpan is UpdateAt over raw memory: `count` elements of `dtype` received at `received`,
  // merged into those at `stored` (a kvserver applies the members of a key group this way,
  // without a tensor per member). Called only for piecewise updaters; the default wraps both
  // in one-dimensional tensors and calls UpdateAt. `stored` holds the element at `offset`.
  virtual absl::Status UpdateSpan(const Key& key, int64_t offset, DType dtype, const void* received,
                                  void* stored, int64_t count);

  // UpdateSpanOfSum is UpdateSpan of the sum of `received.size()` (at least one) spans, formed
  // as SumRaw forms it (common/reduce.h: in order, rounded to `dtype` after each addition), so
  // that the result equals summing them into a buffer first and calling UpdateSpan on it, bit
  // for bit. A kvserver merges a dist_sync round's pushes this way in one pass, without writing
  // the round's sum anywhere. Called only when sums_in_place(); the default is Unimplemented.
  virtual bool sums_in_place() const { return false; }
  virtual absl::Status UpdateSpanOfSum(const Key& key, int64_t offset, DType dtype,
                                       absl::Span<const void* const> received, void* stored,
                                       int64_t count);

  // name returns the registry name, e.g. "assign".
  virtual absl::string_view name() const = 0;

  // SaveState returns the updater's state (optimizers); stateless updaters return none. Not
  // to be called while updates run.
  virtual UpdaterStateData SaveState() const { return UpdaterStateData(); }
  // LoadState replaces the state with `state`, keeping only the parts `keep` accepts (a server
  // keeps those of the values it holds). InvalidArgument naming what does not fit (another
  // optimizer's state, buffers of the wrong size); nothing changes then.
  virtual absl::Status LoadState(const UpdaterStateData& state,
                                 const std::function<bool(const PartStateData&)>& keep) {
    (void)keep;
    if (state.optimizer.empty() && state.parts.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("the updater \"", name(), "\" keeps no state; the saved state is of ",
                     state.optimizer.empty() ? "another updater" : state.optimizer));
  }

  // TakeState carries `previous`'s state over to this updater when it replaces it (SetOptimizer
  // with keep_state): by default LoadState(previous->SaveState()) over every part; optimizers
  // move it. Errors as LoadState's; `previous` is not used afterwards. Not to be called while
  // updates run on either.
  virtual absl::Status TakeState(Updater* previous) {
    return LoadState(previous->SaveState(), nullptr);
  }
};

// UpdateFunction is the form of a user updater in the SDK (MXNet's `_set_updater`).
using UpdateFunction = std::function<void(const Key& key, const Tensor& received, Tensor* stored)>;

// MakeFunctionUpdater wraps a user function as an Updater named `name`.
std::unique_ptr<Updater> MakeFunctionUpdater(std::string name, UpdateFunction function);

// MakeAssignUpdater returns the default updater: stored = received.
std::unique_ptr<Updater> MakeAssignUpdater();

// MakeSumUpdater returns stored += received.
std::unique_ptr<Updater> MakeSumUpdater();

// UpdaterRegistry maps names to factories. Not thread-safe for registration; register everything
// before sharing the registry, then Create concurrently.
class UpdaterRegistry {
 public:
  // A factory receives the updater's configuration string (empty when none was given) and
  // returns InvalidArgument when it cannot parse it.
  using Factory = std::function<absl::StatusOr<std::unique_ptr<Updater>>(absl::string_view config)>;

  // WithBuiltins returns a registry holding "assign" and "sum".
  static UpdaterRegistry WithBuiltins();

  // Register adds a factory; AlreadyExists when the name is taken, InvalidArgument when empty.
  absl::Status Register(std::string name, Factory factory);

  // Create returns a new updater; NotFound (listing the known names) for an unknown name.
  absl::StatusOr<std::unique_ptr<Updater>> Create(absl::string_view name,
                                                  absl::string_view config = "") const;

  // Names returns the registered names in sorted order.
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, Factory, std::less<>> factories_;
};

}  // namespace kvstore

#endif  // KVSTORE_COMMON_STORE_UPDATER_H_
