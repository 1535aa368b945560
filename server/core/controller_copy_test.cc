// Tests of the copy of a shard a replacement server takes (controller commands 14 and 15): the
// copy carries the values, each chunk's rounds, the updater with its state and the applied
// request ids; the pushes the cut held, and later writes routed by an older view, are refused
// with the epoch they need; a damaged copy or a server that already holds keys is refused.
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "common/partitioner.h"
#include "common/proto_convert.h"
#include "common/state_file.h"
#include "common/status_macros.h"
#include "common/store/sgd_updater.h"
#include "common/table_wire.h"
#include "common/view_epoch.h"
#include "server/core/controller.h"
#include "server/core/engine_cuts.h"
#include "server/core/server_engine.h"
#include "server/core/server_engine_test_util.h"
#include "server/core/table_engine.h"
#include "tests/test_util.h"
namespace kvstore {
namespace {

using testing::Incoming;
using testing::NewEngine;
using testing::PullAll;
using testing::PullInto;
using testing::TestRng;

constexpr uint64_t kWorkerA = 2, kWorkerB = 3;

// PushBoth pushes `grads[w]` from each worker under request `id` and waits for the round.
void PushBoth(ServerEngine& engine, const std::vector<Key>& keys,
              const std::vector<std::vector<Tensor>>& grads, uint64_t id) {
  std::vector<absl::Notification> done(2);
  std::vector<absl::Status> status(2);
  for (int w = 0; w < 2; ++w) {
    std::vector<IncomingValue> values;
    for (size_t k = 0; k < keys.size(); ++k) values.push_back(Incoming(keys[k], grads[w][k]));
    engine.Push(w == 0 ? kWorkerA : kWorkerB, id, values, [&, w](absl::Status s) {
      status[w] = s;
      done[w].Notify();
    });
  }
  for (int w = 0; w < 2; ++w) {
    REQUIRE(done[w].WaitForNotificationWithTimeout(absl::Seconds(10)));
    REQUIRE(status[w].ok());
  }
}

// Pages cuts `copy` into pages of at most `page` bytes, ended where it says: the header's,
// in order, then the values' last first (a page goes where its offset says).
std::vector<std::pair<uint64_t, std::string>> Pages(const CopySource& copy, size_t page) {
  std::vector<std::pair<uint64_t, std::string>> head, values;
  for (uint64_t at = 0; at < copy.size();) {
    const uint64_t end = copy.PageEnd(at, page);
    std::string bytes(end - at, '\0');
    REQUIRE(copy.Read(at, end, bytes.data()).ok());
    (at < copy.head_bytes() ? head : values).emplace_back(at, std::move(bytes));
    at = end;
  }
  head.insert(head.end(), values.rbegin(), values.rend());
  return head;
}

// Transfer has `from` send the copy it holds (cut `id`) into `to` (command 14 "send"), in
// pages of `page` bytes, each with its CRC-32 (Pages), and loads it.
absl::StatusOr<std::string> Transfer(Controller& from, Controller& to, const std::string& id,
                                     const std::string& copied, size_t page) {
  const std::vector<std::string> f = absl::StrSplit(copied, ' ');
  REQUIRE(f.size() == 4);
  uint64_t bytes = 0;
  REQUIRE(absl::SimpleAtoi(f[1], &bytes));
  REQUIRE(to.Run(kCommandCopyIn, absl::StrCat("begin ", bytes, " 7 ", f[3])).ok());
  CHECK(to.copy_sender() == 7);
  from.SetCopySender(
      [&to, page](const std::string& address, bool backup, const CopySource& copy) -> absl::Status {
        CHECK(address == "127.0.0.1:9");
        CHECK(!backup);
        for (const auto& [offset, bytes] : Pages(copy, page)) {
          RETURN_IF_ERROR(
              to.Run(kCommandCopyIn, absl::StrCat("put ", offset, " ", Crc32(bytes), "\n", bytes))
                  .status());
        }
        return absl::OkStatus();
      });
  const absl::StatusOr<std::string> sent =
      from.Run(kCommandCopyOut, absl::StrCat("send ", id, " 127.0.0.1:9 0"));
  REQUIRE(sent.ok());
  CHECK(*sent == absl::StrCat("sent ", bytes));
  absl::StatusOr<std::string> loaded =
      to.Run(kCommandCopyIn, absl::StrCat("load ", f[1], " ", f[2]));
  CHECK(to.copy_sender() == 0);
  return loaded;
}

TEST_CASE(
    "Controller: a copied shard carries values, rounds, updater state and applied "
    "requests; held and stale writes are refused with the epoch they need",
    "[server][controller][replicas]") {
  TestRng rng;
  INFO(rng.Describe());
  UpdaterRegistry registry = UpdaterRegistry::WithBuiltins();
  REQUIRE(RegisterSgdUpdater(&registry).ok());
  const JobShape job{2, "dist_sync", 1 << 20};
  auto source = NewEngine(true, {kWorkerA, kWorkerB});
  Controller out(source.get(), &registry, nullptr, /*rank=*/1);
  out.SetJob(job);
  REQUIRE(
      out.Run(kCommandSetUpdater, absl::StrFormat("sgd lr=%.17g momentum=%.17g",
                                                  rng.Uniform(0.01, 0.5), rng.Uniform(0.1, 0.9)))
          .ok());
  const int num_keys = static_cast<int>(rng.Int(1, 5));
  std::vector<Key> keys;
  std::vector<Tensor> inits;
  for (int k = 0; k < num_keys; ++k) {
    keys.push_back(Key(static_cast<int64_t>(k * 7 + 1)));
    inits.push_back(rng.RandomTensor(DType::kFloat64, {static_cast<int64_t>(rng.Int(1, 40))}));
    REQUIRE(source->Init(kWorkerA, {Incoming(keys[k], inits[k])}).ok());
  }
  auto grads = [&] {
    std::vector<std::vector<Tensor>> g(2);
    for (int w = 0; w < 2; ++w) {
      for (int k = 0; k < num_keys; ++k) {
        g[w].push_back(rng.RandomTensor(DType::kFloat64, inits[k].shape()));
      }
    }
    return g;
  };
  const int rounds = static_cast<int>(rng.Int(1, 6));
  uint64_t id = 100;
  for (int r = 0; r < rounds; ++r) PushBoth(*source, keys, grads(), ++id);
  const uint64_t last_applied = id;

  // The cut: a push of the next round is held, then refused once the copy is taken.
  const std::string cut = "join-5-1";
  REQUIRE(out.Run(kCommandCutBegin, cut).value() == absl::StrCat(rounds));
  absl::Notification held_done;
  absl::Status held_status;
  const std::vector<std::vector<Tensor>> next = grads();
  std::vector<IncomingValue> held_values;
  for (int k = 0; k < num_keys; ++k) held_values.push_back(Incoming(keys[k], next[0][k]));
  source->Push(kWorkerA, ++id, held_values, [&](absl::Status s) {
    held_status = s;
    held_done.Notify();
  });
  CHECK_FALSE(held_done.HasBeenNotified());
  REQUIRE(out.Run(kCommandCutLimit, absl::StrCat(cut, " ", rounds)).ok());
  std::vector<std::vector<double>> before;
  for (int k = 0; k < num_keys; ++k) before.push_back(PullAll(*source, keys[k], inits[k]));
  const absl::StatusOr<std::string> copied =
      out.Run(kCommandCopyOut, absl::StrCat("cut ", cut, " ", rounds, " 5"));
  INFO(copied.status().ToString());
  REQUIRE(copied.ok());
  REQUIRE(absl::StartsWith(*copied, "copied "));
  REQUIRE(held_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  CHECK(RequiredViewEpoch(held_status) == 5);
  for (int k = 0; k < num_keys; ++k) CHECK(PullAll(*source, keys[k], inits[k]) == before[k]);
  // Writes routed by an older view are refused from now on; reads and newer writes are not.
  CHECK(RequiredViewEpoch(source->view_floor().Check(4, /*write=*/true)) == 5);
  CHECK(source->view_floor().Check(5, true).ok());
  CHECK(source->view_floor().Check(0, /*write=*/false).ok());

  // Into an empty engine of the same rank, in pages of a random size.
  auto target = NewEngine(true, {kWorkerA, kWorkerB});
  Controller in(target.get(), &registry, nullptr, /*rank=*/1);
  in.SetJob(job);
  const size_t page = static_cast<size_t>(rng.Int(1, 300));
  const absl::StatusOr<std::string> loaded = Transfer(out, in, cut, *copied, page);
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  CHECK(*loaded == absl::StrCat("loaded ", num_keys, " keys"));
  CHECK(target->cuts().MaxRoundStarted() == source->cuts().MaxRoundStarted());
  for (int k = 0; k < num_keys; ++k) CHECK(PullAll(*target, keys[k], inits[k]) == before[k]);
  // An applied request sent again is not applied again on the copy.
  {
    absl::Notification again;
    std::vector<IncomingValue> values;
    for (int k = 0; k < num_keys; ++k) values.push_back(Incoming(keys[k], next[1][k]));
    target->Push(kWorkerB, last_applied, values, [&](absl::Status s) {
      CHECK(s.ok());
      again.Notify();
    });
    REQUIRE(again.WaitForNotificationWithTimeout(absl::Seconds(10)));
    for (int k = 0; k < num_keys; ++k) CHECK(PullAll(*target, keys[k], inits[k]) == before[k]);
  }
  // Both copies go on alike: the optimizer's momentum came along.
  REQUIRE(out.Run(kCommandCopyOut, absl::StrCat("end ", cut)).ok());
  for (int r = 0; r < 3; ++r) {
    const std::vector<std::vector<Tensor>> g = grads();
    PushBoth(*source, keys, g, ++id);
    PushBoth(*target, keys, g, id);
  }
  for (int k = 0; k < num_keys; ++k) {
    CHECK(PullAll(*target, keys[k], inits[k]) == PullAll(*source, keys[k], inits[k]));
  }
  CHECK(target->cuts().MaxRoundStarted() == rounds + 3);
}

TEST_CASE(
    "Controller: a copied shard carries its tables; a table push waiting for its round when "
    "the copy is taken, and later ones routed by an older view, are refused with the epoch "
    "they need",
    "[server][controller][replicas][tables]") {
  TestRng rng;
  INFO(rng.Describe());
  UpdaterRegistry registry = UpdaterRegistry::WithBuiltins();
  const JobShape job{2, "dist_sync", 1 << 20};
  auto source = NewEngine(true, {kWorkerA, kWorkerB});
  TableEngine source_tables(TableEngineOptions{}, &source->workers(), nullptr,
                            &source->view_floor());
  Controller out(source.get(), &registry, nullptr, /*rank=*/0);
  out.SetJob(job);
  out.SetTables(&source_tables);
  TableConfig config;
  config.dim = rng.Int(1, 5);
  config.optimizer.kind = RowOptimizer::Kind::kAdagrad;
  config.optimizer.lr = 0.1;
  config.admit_after = 2;
  const Key key("emb");
  REQUIRE(source_tables.Init(kWorkerA, key, TableSpecToProto(config)).ok());
  uint64_t id = 10;
  auto random_grads = [&](size_t rows) {
    std::vector<float> grads(rows * config.dim);
    for (float& g : grads) g = static_cast<float>(rng.Int(-4, 4));
    return grads;
  };
  auto push_grads = [&](TableEngine& tables, uint64_t worker, uint64_t request,
                        const std::vector<int64_t>& ids, uint64_t epoch,
                        const std::vector<float>& grads) {
    auto status = std::make_shared<std::optional<absl::Status>>();
    tables.Push(
        worker, request, key, ids, grads, [status](absl::Status s) { *status = s; }, epoch);
    return status;
  };
  auto push = [&](TableEngine& tables, uint64_t worker, uint64_t request,
                  const std::vector<int64_t>& ids, uint64_t epoch) {
    return push_grads(tables, worker, request, ids, epoch, random_grads(ids.size()));
  };
  std::vector<int64_t> ids(20);
  for (int r = 0; r < 4; ++r) {
    for (int64_t& i : ids) i = rng.Int(0, 30);
    auto a = push(source_tables, kWorkerA, ++id, ids, 0);
    auto b = push(source_tables, kWorkerB, id, ids, 0);
    REQUIRE(a->has_value());
    REQUIRE(a->value().ok());
  }
  // Worker A's push of the next round waits for worker B's when the copy is taken.
  auto waiting = push(source_tables, kWorkerA, ++id, ids, 0);
  CHECK_FALSE(waiting->has_value());
  std::vector<int64_t> all(31);
  for (int64_t i = 0; i <= 30; ++i) all[i] = i;
  std::string before;
  REQUIRE(PullInto(source_tables, kWorkerA, key, all, &before).ok());
  const std::string cut = "join-7-0";
  REQUIRE(out.Run(kCommandCutBegin, cut).ok());
  REQUIRE(out.Run(kCommandCutLimit, absl::StrCat(cut, " 0")).ok());
  const absl::StatusOr<std::string> copied =
      out.Run(kCommandCopyOut, absl::StrCat("cut ", cut, " 0 7"));
  INFO(copied.status().ToString());
  REQUIRE(copied.ok());
  REQUIRE(waiting->has_value());
  CHECK(RequiredViewEpoch(waiting->value()) == 7);
  // A push routed by the old view is refused; by the new one, it waits for its round.
  auto stale = push(source_tables, kWorkerB, ++id, ids, 6);
  REQUIRE(stale->has_value());
  CHECK(RequiredViewEpoch(stale->value()) == 7);

  auto target = NewEngine(true, {kWorkerA, kWorkerB});
  TableEngine target_tables(TableEngineOptions{}, &target->workers(), nullptr,
                            &target->view_floor());
  Controller in(target.get(), &registry, nullptr, /*rank=*/0);
  in.SetJob(job);
  in.SetTables(&target_tables);
  const absl::StatusOr<std::string> loaded = Transfer(out, in, cut, *copied, 4096);
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  std::string after;
  REQUIRE(PullInto(target_tables, kWorkerA, key, all, &after).ok());
  CHECK(after == before);
  CHECK(target_tables.Tables()[0].round == source_tables.Tables()[0].round);
  CHECK(target_tables.Tables()[0].stats.counting == source_tables.Tables()[0].stats.counting);
  // The refused pushes sent again to both copies under the new view: both go on alike.
  REQUIRE(out.Run(kCommandCopyOut, absl::StrCat("end ", cut)).ok());
  const std::vector<float> ga = random_grads(ids.size()), gb = random_grads(ids.size());
  for (TableEngine* tables : {&source_tables, &target_tables}) {
    auto a = push_grads(*tables, kWorkerA, id + 1, ids, 7, ga);
    auto b = push_grads(*tables, kWorkerB, id + 1, ids, 7, gb);
    REQUIRE(b->has_value());
    REQUIRE(b->value().ok());
  }
  REQUIRE(PullInto(source_tables, kWorkerA, key, all, &before).ok());
  REQUIRE(PullInto(target_tables, kWorkerA, key, all, &after).ok());
  CHECK(after == before);
  CHECK(source_tables.Tables()[0].round == 5);
  CHECK(target_tables.Tables()[0].round == 5);
}

TEST_CASE("Controller: a damaged copy, a server holding keys and an aborted copy",
          "[server][controller][replicas]") {
  TestRng rng;
  INFO(rng.Describe());
  UpdaterRegistry registry = UpdaterRegistry::WithBuiltins();
  const JobShape job{2, "dist_sync", 1 << 20};
  auto source = NewEngine(true, {kWorkerA});
  Controller out(source.get(), &registry, nullptr, 0);
  out.SetJob(job);
  const Tensor init = rng.RandomTensor(DType::kFloat32, {static_cast<int64_t>(rng.Int(2, 30))});
  REQUIRE(source->Init(kWorkerA, {Incoming(Key(int64_t{9}), init)}).ok());
  REQUIRE(out.Run(kCommandCutBegin, "c").ok());
  REQUIRE(out.Run(kCommandCutLimit, "c 0").ok());
  const std::string copied = out.Run(kCommandCopyOut, "cut c 0 3").value();
  // No way to send it yet; then a copy not held, and a bad BACKUP field.
  CHECK(absl::IsFailedPrecondition(out.Run(kCommandCopyOut, "send c 127.0.0.1:9 0").status()));
  std::string whole;
  out.SetCopySender([&whole](const std::string&, bool, const CopySource& copy) {
    whole.assign(copy.size(), '\0');
    return copy.Read(0, copy.size(), whole.data());
  });
  CHECK(absl::IsFailedPrecondition(out.Run(kCommandCopyOut, "send other 127.0.0.1:9 0").status()));
  CHECK(absl::IsInvalidArgument(out.Run(kCommandCopyOut, "send c 127.0.0.1:9 2").status()));
  CHECK(absl::IsInvalidArgument(out.Run(kCommandCopyOut, "cut c 0").status()));
  REQUIRE(out.Run(kCommandCopyOut, "send c 127.0.0.1:9 0").ok());
  std::vector<std::string> f = absl::StrSplit(copied, ' ');
  REQUIRE(f.size() == 4);
  size_t head = 0;
  REQUIRE(absl::SimpleAtoi(f[3], &head));
  REQUIRE(head < whole.size());
  const std::string begin = absl::StrCat("begin ", whole.size(), " 0 ", head);
  auto put = [](uint64_t offset, absl::string_view bytes) {
    return absl::StrCat("put ", offset, " ", Crc32(bytes), "\n", bytes);
  };
  auto target = NewEngine(true, {kWorkerA});
  Controller in(target.get(), &registry, nullptr, 0);
  in.SetJob(job);
  CHECK(absl::IsInvalidArgument(
      in.Run(kCommandCopyIn, absl::StrCat("begin ", whole.size())).status()));  // No sender named.
  CHECK(absl::IsInvalidArgument(
      in.Run(kCommandCopyIn, absl::StrCat("begin ", head, " 0 ", whole.size())).status()));
  REQUIRE(in.Run(kCommandCopyIn, begin).ok());
  // A page past what was begun, a page whose CRC-32 does not match: refused.
  CHECK(absl::IsOutOfRange(in.Run(kCommandCopyIn, put(whole.size(), "x")).status()));
  const absl::Status bad_page =
      in.Run(kCommandCopyIn,
             absl::StrCat("put 0 ", Crc32(whole.substr(0, head)) ^ 1, "\n", whole.substr(0, head)))
          .status();
  CHECK(absl::IsDataLoss(bad_page));
  CHECK(target->stats().num_keys == 0);
  // The values before the whole header: refused.
  CHECK(absl::IsFailedPrecondition(
      in.Run(kCommandCopyIn, put(head, absl::string_view(whole).substr(head))).status()));
  REQUIRE(in.Run(kCommandCopyIn, put(0, absl::string_view(whole).substr(0, head))).ok());
  CHECK(target->stats().num_keys == 1);  // Made from the header, zeros until filled.
  REQUIRE(in.Run(kCommandCopyIn, put(head, absl::string_view(whole).substr(head))).ok());
  // The header's CRC-32 does not match: refused, and the parts made for it removed.
  uint32_t crc = 0;
  REQUIRE(absl::SimpleAtoi(f[2], &crc));
  const absl::Status damaged =
      in.Run(kCommandCopyIn, absl::StrCat("load ", f[1], " ", crc ^ 1)).status();
  INFO(damaged.ToString());
  CHECK(absl::IsDataLoss(damaged));
  CHECK(target->stats().num_keys == 0);
  CHECK(target->held_bytes() == 0);
  // A page missing: refused at the load, naming what arrived, nothing loaded.
  REQUIRE(in.Run(kCommandCopyIn, begin).ok());
  REQUIRE(in.Run(kCommandCopyIn, put(0, absl::string_view(whole).substr(0, head))).ok());
  const absl::Status partial =
      in.Run(kCommandCopyIn, absl::StrCat("load ", f[1], " ", f[2])).status();
  INFO(partial.ToString());
  CHECK(absl::IsDataLoss(partial));
  CHECK(partial.message().find(absl::StrCat("received ", head, " bytes")) !=
        absl::string_view::npos);
  CHECK(target->stats().num_keys == 0);
  // A copy begun again before the last was loaded: the parts the last one made go.
  REQUIRE(in.Run(kCommandCopyIn, begin).ok());
  REQUIRE(in.Run(kCommandCopyIn, put(0, absl::string_view(whole).substr(0, head))).ok());
  CHECK(target->stats().num_keys == 1);
  REQUIRE(in.Run(kCommandCopyIn, begin).ok());
  CHECK(target->stats().num_keys == 0);
  CHECK(target->held_bytes() == 0);
  REQUIRE(in.Run(kCommandCopyIn, "unstage").ok());
  // A server that already holds keys takes no copy.
  CHECK(Transfer(out, in, "c", copied, 1 << 20).ok());
  const absl::Status twice = in.Run(kCommandCopyIn, begin).status();
  CHECK(absl::IsFailedPrecondition(twice));
  CHECK_THAT(std::string(twice.message()), Catch::Contains("already holds 1 keys"));
  // Aborted: the floor the copy set is lifted, old writes are accepted again.
  CHECK(RequiredViewEpoch(source->view_floor().Check(2, true)) == 3);
  REQUIRE(out.Run(kCommandCopyOut, "abort c").ok());
  CHECK(source->view_floor().Check(2, true).ok());
  CHECK(absl::IsFailedPrecondition(out.Run(kCommandCopyOut, "send c 127.0.0.1:9 0").status()));
}

}  // namespace
}  // namespace kvstore

namespace kvstore {
namespace {

// One server's shard re-placed onto 2 servers through a rescale's verbs (commands 14 and 15):
// its own part kept in place ("keeppart"), the other sent ("part", "sendpart") and staged, each
// merged and swapped in; every value lands where the placement over 2 servers puts it.
TEST_CASE("Controller: a rescale's parts, merged and swapped in; its refusals",
          "[server][controller][rescale]") {
  TestRng rng;
  INFO(rng.Describe());
  UpdaterRegistry registry = UpdaterRegistry::WithBuiltins();
  // The engines' chunk size (NewEngine's), as a job's servers share it.
  const JobShape job{1, "dist_sync", kDefaultChunkBytes, /*big_value_bound=*/10};
  auto source = NewEngine(true, {kWorkerA, kWorkerB});
  auto empty = NewEngine(true, {kWorkerA, kWorkerB});
  Controller from(source.get(), &registry, nullptr, 0);
  Controller to(empty.get(), &registry, nullptr, 1);
  from.SetJob(job);
  to.SetJob(JobShape{2, "dist_sync", kDefaultChunkBytes, 10});
  std::vector<Key> keys;
  std::vector<Tensor> values;
  for (int k = 0; k < 6; ++k) {
    keys.push_back(Key(static_cast<int64_t>(100 + k)));
    values.push_back(rng.RandomTensor(DType::kFloat32, {k == 0 ? 40 : 3}));  // Key 100 splits.
    REQUIRE(source->Init(kWorkerA, {Incoming(keys[k], values[k])}).ok());
  }
  // Refusals before anything is cut or staged.
  CHECK(absl::IsFailedPrecondition(from.Run(kCommandCopyOut, "part r 1 2").status()));
  CHECK(absl::IsFailedPrecondition(to.Run(kCommandCopyIn, "merge 1 2").status()));
  CHECK(absl::IsFailedPrecondition(to.Run(kCommandCopyIn, "swap 3").status()));
  REQUIRE(from.Run(kCommandCutBegin, "r").ok());
  REQUIRE(from.Run(kCommandCutLimit, "r 0").ok());
  const absl::StatusOr<std::string> cut = from.Run(kCommandCopyOut, "cutparts r 0 3");
  REQUIRE(cut.ok());
  CHECK(*cut == "cut 6 keys");
  CHECK(absl::IsInvalidArgument(from.Run(kCommandCopyOut, "part r 2 2").status()));
  CHECK(
      absl::IsFailedPrecondition(from.Run(kCommandCopyOut, "sendpart r 1 127.0.0.1:9 0").status()));
  // Server 0's own part stays; server 1's goes over.
  const absl::StatusOr<std::string> kept = from.Run(kCommandCopyOut, "keeppart r 0 2");
  INFO(kept.status().ToString());
  REQUIRE(kept.ok());
  const absl::StatusOr<std::string> part = from.Run(kCommandCopyOut, "part r 1 2");
  REQUIRE(part.ok());
  const std::vector<std::string> f = absl::StrSplit(*part, ' ');
  REQUIRE(f.size() == 3);
  REQUIRE(to.Run(kCommandCopyIn, absl::StrCat("begin ", f[1], " 7")).ok());
  from.SetCopySender([&to](const std::string&, bool, const CopySource& copy) {
    std::string bytes(copy.size(), '\0');
    RETURN_IF_ERROR(copy.Read(0, copy.size(), bytes.data()));
    return to.Run(kCommandCopyIn, absl::StrCat("put 0\n", bytes)).status();
  });
  REQUIRE(from.Run(kCommandCopyOut, "sendpart r 1 127.0.0.1:9 0").ok());
  // A damaged part is refused, and nothing staged from it.
  CHECK(absl::IsDataLoss(to.Run(kCommandCopyIn, absl::StrCat("stage ", f[1], " 1")).status()));
  REQUIRE(to.Run(kCommandCopyIn, absl::StrCat("begin ", f[1], " 7")).ok());
  REQUIRE(from.Run(kCommandCopyOut, "sendpart r 1 127.0.0.1:9 0").ok());
  REQUIRE(to.Run(kCommandCopyIn, absl::StrCat("stage ", f[1], " ", f[2])).ok());
  std::vector<proto::ShardCheckpoint> swapped(2);
  for (Controller* c : {&from, &to}) {
    c->SetShardSwapper(
        [&swapped](const proto::ShardCheckpoint& shard, int rank, int servers, uint64_t epoch) {
          CHECK(servers == 2);
          CHECK(epoch == 3);
          swapped[rank] = shard;
          return absl::OkStatus();
        });
  }
  REQUIRE(from.Run(kCommandCopyIn, "merge 0 2").ok());
  REQUIRE(to.Run(kCommandCopyIn, "merge 1 2").ok());
  REQUIRE(from.Run(kCommandCopyIn, "swap 3").ok());
  REQUIRE(to.Run(kCommandCopyIn, "swap 3").ok());
  // Every element where the placement over 2 servers puts it, with its value.
  const Partitioner two = Partitioner::Create(2, 10).value();
  for (size_t k = 0; k < keys.size(); ++k) {
    for (const Slice& slice : two.Partition(keys[k], values[k].num_elements())) {
      const proto::CheckpointValue* found = nullptr;
      proto::Key key_proto;
      KeyToProto(keys[k], &key_proto);
      for (const proto::CheckpointValue& v : swapped[slice.server].values()) {
        if (v.header().key().SerializeAsString() == key_proto.SerializeAsString()) found = &v;
      }
      INFO("key " << keys[k].Quoted() << " on server " << slice.server);
      REQUIRE(found != nullptr);
      CHECK(found->header().element_offset() == slice.offset);
      CHECK(found->data() ==
            std::string(static_cast<const char*>(values[k].data()) + slice.offset * sizeof(float),
                        slice.count * sizeof(float)));
    }
  }
  // A rescale left half done by a lost scheduler: its staged parts are dropped.
  REQUIRE(to.Run(kCommandCopyIn, absl::StrCat("begin ", f[1], " 7")).ok());
  REQUIRE(from.Run(kCommandCopyOut, "sendpart r 1 127.0.0.1:9 0").ok());
  REQUIRE(to.Run(kCommandCopyIn, absl::StrCat("stage ", f[1], " ", f[2])).ok());
  const absl::StatusOr<std::string> abandoned = to.AbandonCut();
  REQUIRE(abandoned.ok());
  CHECK(absl::StrContains(*abandoned, "unstaged 1 parts"));
  CHECK(absl::IsFailedPrecondition(to.Run(kCommandCopyIn, "merge 1 2").status()));
}

}  // namespace
}  // namespace kvstore
