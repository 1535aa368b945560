#include "server/core/checkpoint_reshard.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/key.h"
#include "common/proto_convert.h"
#include "common/row_sparse.h"
#include "common/status_macros.h"
#include "common/table_wire.h"

namespace kvstore {
namespace {

// Piece: elements [offset, offset + count) of a value, or of one of a state's buffers, held in
// `bytes` (count elements).
struct Piece {
  int64_t offset = 0;
  int64_t count = 0;
  const std::string* bytes = nullptr;
  // The round the piece's chunks were cut at (CheckpointPartFor's pieces); -1: none carried.
  int64_t round = -1;
};

// Gather returns elements [begin, begin + count) of `element`-byte elements from `pieces`
// (sorted by offset, not overlapping); `covered` is set to whether every element was found.
std::string Gather(const std::vector<Piece>& pieces, int64_t begin, int64_t count, size_t element,
                   bool* covered) {
  std::string out(static_cast<size_t>(count) * element, '\0');
  int64_t found = 0;
  for (const Piece& piece : pieces) {
    const int64_t from = std::max(begin, piece.offset);
    const int64_t to = std::min(begin + count, piece.offset + piece.count);
    if (from >= to) continue;
    std::copy_n(piece.bytes->data() + (from - piece.offset) * element, (to - from) * element,
                out.data() + (from - begin) * element);
    found += to - from;
  }
  *covered = found == count;
  return out;
}

// KeyParts: what the set holds of one key.
struct KeyParts {
  proto::TensorHeader header;  // Of the first part seen (key, dtype, shape).
  DType dtype = DType::kFloat32;
  std::vector<Piece> values;
  std::vector<const proto::PartState*> states;
};

std::string Range(int64_t begin, int64_t count) {
  return absl::StrCat("[", begin, ", ", begin + count, ")");
}

// NewState returns the state of elements [begin, begin + count) of `key`, gathered from the
// old chunks' states that overlap them; false when none does (the key had no state there).
absl::StatusOr<bool> NewState(const Key& key, const std::vector<const proto::PartState*>& old,
                              int64_t begin, int64_t count, proto::PartState* out) {
  std::vector<const proto::PartState*> overlapping;
  for (const proto::PartState* s : old) {
    const int64_t end = s->offset() + std::max<int64_t>(s->count(), 1);
    if (s->offset() < begin + std::max<int64_t>(count, 1) && end > begin) {
      overlapping.push_back(s);
    }
  }
  if (overlapping.empty()) return false;
  const proto::PartState& first = *overlapping.front();
  auto refuse = [&](absl::string_view what) {
    return absl::FailedPreconditionError(absl::StrCat(
        "key ", key.Quoted(), ": the saved optimizer state of elements ", Range(begin, count),
        " comes from chunks with different ", what, "; it cannot be re-split"));
  };
  for (const proto::PartState* s : overlapping) {
    if (s->updates() != first.updates()) return refuse("update counts");
    if (s->m_schedule() != first.m_schedule()) return refuse("momentum schedules");
    if (s->dtype() != first.dtype()) return refuse("state types");
    if (s->buffers_size() != first.buffers_size()) return refuse("numbers of buffers");
    if (s->master().empty() != first.master().empty()) return refuse("master weights");
  }
  ASSIGN_OR_RETURN(const DType state_dtype, DTypeFromProto(first.dtype()));
  const size_t element = DTypeSize(state_dtype);
  *out = proto::PartState();
  *out->mutable_key() = first.key();
  out->set_offset(begin);
  out->set_count(count);
  out->set_updates(first.updates());
  out->set_m_schedule(first.m_schedule());
  out->set_dtype(first.dtype());
  auto gather = [&](auto bytes_of, size_t size) -> absl::StatusOr<std::string> {
    std::vector<Piece> pieces;
    for (const proto::PartState* s : overlapping) {
      const std::string& bytes = bytes_of(*s);
      if (bytes.size() != static_cast<size_t>(s->count()) * size) {
        return absl::DataLossError(absl::StrCat("key ", key.Quoted(), ": saved state of elements ",
                                                Range(s->offset(), s->count()), " holds ",
                                                bytes.size(), " bytes a buffer"));
      }
      pieces.push_back(Piece{s->offset(), s->count(), &bytes});
    }
    std::sort(pieces.begin(), pieces.end(),
              [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
    bool covered = false;
    std::string gathered = Gather(pieces, begin, count, size, &covered);
    if (!covered) {
      return absl::FailedPreconditionError(
          absl::StrCat("key ", key.Quoted(), ": the saved optimizer state covers only part of ",
                       "elements ", Range(begin, count), "; it cannot be re-split"));
    }
    return gathered;
  };
  for (int b = 0; b < first.buffers_size(); ++b) {
    // A buffer the optimizer does not use (empty in every chunk) stays empty.
    if (std::all_of(overlapping.begin(), overlapping.end(),
                    [b](const proto::PartState* s) { return s->buffers(b).empty(); })) {
      out->add_buffers();
      continue;
    }
    ASSIGN_OR_RETURN(
        *out->add_buffers(),
        gather([b](const proto::PartState& s) -> const std::string& { return s.buffers(b); },
               element));
  }
  if (!first.master().empty()) {
    ASSIGN_OR_RETURN(
        *out->mutable_master(),
        gather([](const proto::PartState& s) -> const std::string& { return s.master(); },
               sizeof(float)));
  }
  return true;
}

// ChunkRound returns the round the pieces overlapping `chunk` were cut at (0 when they carry
// none); FailedPrecondition naming the key when they differ.
absl::StatusOr<int64_t> ChunkRound(const Key& key, const std::vector<Piece>& pieces,
                                   const Slice& chunk) {
  std::optional<int64_t> round;
  for (const Piece& piece : pieces) {
    const bool overlaps = chunk.count == 0 ? piece.offset == chunk.offset
                                           : piece.offset < chunk.offset + chunk.count &&
                                                 piece.offset + piece.count > chunk.offset;
    if (!overlaps || piece.round < 0) continue;
    if (round.has_value() && *round != piece.round) {
      return absl::FailedPreconditionError(absl::StrCat(
          "key ", key.Quoted(), ": elements ", Range(chunk.offset, chunk.count),
          " were cut at rounds ", *round, " and ", piece.round, "; they cannot form one chunk"));
    }
    round = piece.round;
  }
  return round.value_or(0);
}

}  // namespace

namespace {

// ReshardTables adds to `out` (server `rank` of `num_servers`) the rows of every table of
// `files` that TableServerOf places there, with the ids counted for admission likewise; the
// table's round is the highest of the files'. Rows keep their order within each old file.
absl::Status ReshardTables(absl::Span<const proto::ShardCheckpoint> files, int rank,
                           int num_servers, proto::ShardCheckpoint* out) {
  // One table's rows of every file that land here, in the order the tables are first seen.
  struct Table {
    proto::Key key;
    const proto::TableSpec* spec = nullptr;
    int64_t round = 0;
    TableContents contents;
  };
  std::vector<std::string> order;       // Table keys' proto bytes, first seen first.
  std::map<std::string, Table> tables;  // By the key's proto bytes.
  for (const proto::ShardCheckpoint& file : files) {
    for (const proto::TableCheckpoint& piece : file.tables()) {
      const std::string bytes = piece.key().SerializeAsString();
      auto [it, fresh] = tables.try_emplace(bytes);
      Table& table = it->second;
      TableContents& c = table.contents;
      if (fresh) {
        order.push_back(bytes);
        table.key = piece.key();
        c.row_floats = piece.row_floats();
      }
      if (piece.has_spec()) {
        if (table.spec == nullptr) table.spec = &piece.spec();
        if (piece.spec().SerializeAsString() != table.spec->SerializeAsString()) {
          return absl::DataLossError("the set's files name a table with different specs");
        }
        table.round = std::max(table.round, piece.round());
        for (int i = 0; i < piece.counted_ids_size() && i < piece.counts_size(); ++i) {
          if (TableServerOf(piece.counted_ids(i), num_servers) != rank) continue;
          c.counted_ids.push_back(piece.counted_ids(i));
          c.counts.push_back(piece.counts(i));
        }
      }
      const size_t row_floats = static_cast<size_t>(piece.row_floats());
      if (piece.row_floats() != c.row_floats ||
          piece.values().size() !=
              static_cast<size_t>(piece.ids_size()) * row_floats * sizeof(float) ||
          piece.last_pushed_size() != piece.ids_size() || piece.steps_size() != piece.ids_size()) {
        return absl::DataLossError("a saved piece of a table does not fit its rows");
      }
      for (int r = 0; r < piece.ids_size(); ++r) {
        if (TableServerOf(piece.ids(r), num_servers) != rank) continue;
        c.ids.push_back(piece.ids(r));
        c.last_pushed.push_back(piece.last_pushed(r));
        c.steps.push_back(piece.steps(r));
        const size_t at = c.values.size();
        c.values.resize(at + row_floats);
        std::memcpy(c.values.data() + at, piece.values().data() + r * row_floats * sizeof(float),
                    row_floats * sizeof(float));
      }
    }
  }
  for (const std::string& bytes : order) {
    Table& table = tables.at(bytes);
    if (table.spec == nullptr) return absl::DataLossError("a saved table has no spec");
    // The counters start from the rows carried here.
    table.contents.admitted = static_cast<int64_t>(table.contents.ids.size());
    table.contents.evicted = 0;
    for (proto::TableCheckpoint& piece :
         TablePieces(table.key, *table.spec, table.round, table.contents)) {
      *out->add_tables() = std::move(piece);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<proto::ShardCheckpoint> ReshardCheckpoint(
    absl::Span<const proto::ShardCheckpoint> files, int rank, const Partitioner& partitioner,
    int64_t chunk_bytes, bool pieces) {
  if (files.empty()) return absl::InvalidArgumentError("no checkpoint files to re-split");
  const proto::ShardCheckpoint& first = files.front();
  for (const proto::ShardCheckpoint& file : files) {
    if (file.updater().SerializeAsString() != first.updater().SerializeAsString() ||
        file.updater_state().optimizer() != first.updater_state().optimizer()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the files of servers ", first.server_rank(), " and ", file.server_rank(),
                       " name different updaters"));
    }
    if (file.mode() != first.mode()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the files of servers ", first.server_rank(), " and ", file.server_rank(),
                       " name different modes"));
    }
  }
  // Every key's parts and chunk states, over all files, in the order the keys first appear.
  std::vector<std::pair<Key, std::string>> order;  // The key, and its proto bytes.
  std::map<std::string, KeyParts> keys;            // By the key's proto bytes.
  int64_t num_update = 0;
  for (const proto::ShardCheckpoint& file : files) {
    num_update = std::max(num_update, file.updater_state().num_update());
    for (const proto::CheckpointValue& value : file.values()) {
      const proto::TensorHeader& h = value.header();
      ASSIGN_OR_RETURN(const Key key, KeyFromProto(h.key()));
      ASSIGN_OR_RETURN(const DType dtype, DTypeFromProto(h.dtype()));
      auto [it, fresh] = keys.try_emplace(h.key().SerializeAsString());
      KeyParts& parts = it->second;
      if (fresh) {
        order.emplace_back(key, it->first);
        parts.header = h;
        parts.dtype = dtype;
      } else if (h.dtype() != parts.header.dtype() ||
                 !std::equal(h.shape().begin(), h.shape().end(), parts.header.shape().begin(),
                             parts.header.shape().end())) {
        return absl::DataLossError(
            absl::StrCat("key ", key.Quoted(), ": its parts name different dtypes or shapes"));
      }
      if (h.element_count() < 0 ||
          value.data().size() != static_cast<size_t>(h.element_count()) * DTypeSize(dtype)) {
        return absl::DataLossError(absl::StrCat("key ", key.Quoted(), ": a part of ",
                                                h.element_count(), " elements holds ",
                                                value.data().size(), " bytes"));
      }
      parts.values.push_back(Piece{h.element_offset(), h.element_count(), &value.data(),
                                   value.chunk_rounds_size() == 1 ? value.chunk_rounds(0) : -1});
    }
  }
  for (const proto::ShardCheckpoint& file : files) {
    for (const proto::PartState& state : file.updater_state().parts()) {
      auto it = keys.find(state.key().SerializeAsString());
      if (it == keys.end()) continue;  // State of a key without a value: nothing to restore.
      it->second.states.push_back(&state);
    }
  }

  proto::ShardCheckpoint out;
  out.set_server_rank(rank);
  out.set_num_servers(partitioner.num_servers());
  out.set_mode(first.mode());
  out.set_chunk_bytes(chunk_bytes);
  out.set_job_id(first.job_id());
  out.set_checkpoint_id(first.checkpoint_id());
  out.set_round(first.round());
  *out.mutable_updater() = first.updater();
  proto::UpdaterState* state = out.mutable_updater_state();
  state->set_optimizer(first.updater_state().optimizer());
  state->set_num_update(num_update);
  for (const auto& [key, bytes] : order) {
    KeyParts& parts = keys.at(bytes);
    std::sort(parts.values.begin(), parts.values.end(),
              [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
    const Shape shape(parts.header.shape().begin(), parts.header.shape().end());
    const int64_t n = NumElements(shape);
    // The parts must tile [0, n); pieces for one server must not overlap.
    int64_t next = 0;
    for (const Piece& piece : parts.values) {
      if (pieces) {
        if (piece.offset < next) {
          return absl::DataLossError(
              absl::StrCat("key ", key.Quoted(), ": two pieces hold element ", piece.offset));
        }
        next = piece.offset + piece.count;
        continue;
      }
      if (piece.offset != next) {
        return absl::DataLossError(absl::StrCat("key ", key.Quoted(), ": the set's parts ",
                                                piece.offset > next ? "leave out" : "repeat",
                                                " elements from ", std::min(next, piece.offset),
                                                " (is a server's file missing?)"));
      }
      next += piece.count;
    }
    if (!pieces && next != n) {
      return absl::DataLossError(absl::StrCat("key ", key.Quoted(), ": the set's parts hold ", next,
                                              " of its ", n, " elements"));
    }
    const size_t element = DTypeSize(parts.dtype);
    for (const Slice& slice : partitioner.Partition(key, n, RowElements(shape))) {
      if (slice.server != rank) continue;
      proto::CheckpointValue* value = out.add_values();
      proto::TensorHeader* header = value->mutable_header();
      *header->mutable_key() = parts.header.key();
      header->set_dtype(parts.header.dtype());
      *header->mutable_shape() = parts.header.shape();
      header->set_element_offset(slice.offset);
      header->set_element_count(slice.count);
      bool covered = false;
      *value->mutable_data() = Gather(parts.values, slice.offset, slice.count, element, &covered);
      if (!covered) {
        return absl::DataLossError(absl::StrCat("key ", key.Quoted(), ": no piece holds some of ",
                                                "elements ", Range(slice.offset, slice.count),
                                                " of server ", rank, "'s part"));
      }
      for (const Slice& chunk : ChunkSlice(slice, element, chunk_bytes)) {
        if (pieces) {
          ASSIGN_OR_RETURN(const int64_t round, ChunkRound(key, parts.values, chunk));
          value->add_chunk_rounds(round);
        }
        proto::PartState chunk_state;
        ASSIGN_OR_RETURN(const bool has_state,
                         NewState(key, parts.states, chunk.offset, chunk.count, &chunk_state));
        if (has_state) *state->add_parts() = std::move(chunk_state);
      }
    }
  }
  RETURN_IF_ERROR(ReshardTables(files, rank, partitioner.num_servers(), &out));
  return out;
}

absl::StatusOr<proto::ShardCheckpoint> CheckpointPartFor(const proto::ShardCheckpoint& file,
                                                         int rank, const Partitioner& partitioner) {
  proto::ShardCheckpoint out;
  out.set_server_rank(file.server_rank());
  out.set_num_servers(file.num_servers());
  out.set_mode(file.mode());
  out.set_chunk_bytes(file.chunk_bytes());
  out.set_job_id(file.job_id());
  out.set_checkpoint_id(file.checkpoint_id());
  out.set_round(file.round());
  *out.mutable_updater() = file.updater();
  out.mutable_updater_state()->set_optimizer(file.updater_state().optimizer());
  out.mutable_updater_state()->set_num_update(file.updater_state().num_update());
  // The new slices of `rank` per key (by the key's proto bytes), for the state parts below.
  std::map<std::string, std::vector<Slice>> slices;
  for (const proto::CheckpointValue& value : file.values()) {
    const proto::TensorHeader& h = value.header();
    ASSIGN_OR_RETURN(const Key key, KeyFromProto(h.key()));
    ASSIGN_OR_RETURN(const DType dtype, DTypeFromProto(h.dtype()));
    const size_t element = DTypeSize(dtype);
    const Shape shape(h.shape().begin(), h.shape().end());
    const int64_t n = NumElements(shape);
    const int64_t begin = h.element_offset(), count = h.element_count();
    if (count < 0 || begin < 0 || begin + count > n ||
        value.data().size() != static_cast<size_t>(count) * element) {
      return absl::DataLossError(absl::StrCat("key ", key.Quoted(), ": a part of ", count,
                                              " elements at ", begin, " holds ",
                                              value.data().size(), " bytes"));
    }
    const std::vector<Slice> chunks =
        ChunkSlice(Slice{0, begin, count}, element, file.chunk_bytes());
    if (value.chunk_rounds_size() > 0 &&
        static_cast<size_t>(value.chunk_rounds_size()) != chunks.size()) {
      return absl::DataLossError(absl::StrCat("key ", key.Quoted(), ": ", value.chunk_rounds_size(),
                                              " chunk rounds for ", chunks.size(), " chunks"));
    }
    std::vector<Slice>& mine = slices[h.key().SerializeAsString()];
    auto emit = [&](int64_t from, int64_t to, int64_t round) {
      proto::CheckpointValue* piece = out.add_values();
      *piece->mutable_header() = h;
      piece->mutable_header()->set_element_offset(from);
      piece->mutable_header()->set_element_count(to - from);
      piece->set_data(value.data().substr((from - begin) * element, (to - from) * element));
      if (round >= 0) piece->add_chunk_rounds(round);
    };
    for (const Slice& slice : partitioner.Partition(key, n, RowElements(shape))) {
      if (slice.server != rank) continue;
      mine.push_back(slice);
      if (n == 0) {  // A value of no elements: its one empty part moves whole.
        emit(0, 0, value.chunk_rounds_size() > 0 ? value.chunk_rounds(0) : -1);
        continue;
      }
      const int64_t from = std::max(slice.offset, begin);
      const int64_t to = std::min(slice.offset + slice.count, begin + count);
      if (from >= to) continue;
      if (value.chunk_rounds_size() == 0) {
        emit(from, to, -1);
        continue;
      }
      // One piece per stretch of old chunks cut at the same round.
      int64_t start = from;
      for (size_t c = 0; c < chunks.size(); ++c) {
        const int64_t chunk_end = chunks[c].offset + chunks[c].count;
        if (chunk_end <= from || chunks[c].offset >= to) continue;
        const int64_t end = std::min(chunk_end, to);
        const bool last = end == to;
        if (last || value.chunk_rounds(static_cast<int>(c) + 1) != value.chunk_rounds(c)) {
          emit(start, end, value.chunk_rounds(c));
          start = end;
        }
        if (last) break;
      }
    }
  }
  for (const proto::PartState& state : file.updater_state().parts()) {
    auto it = slices.find(state.key().SerializeAsString());
    if (it == slices.end()) continue;
    const int64_t end = state.offset() + std::max<int64_t>(state.count(), 1);
    for (const Slice& slice : it->second) {
      if (state.offset() < slice.offset + std::max<int64_t>(slice.count, 1) && end > slice.offset) {
        *out.mutable_updater_state()->add_parts() = state;
        break;
      }
    }
  }
  for (const proto::TableCheckpoint& piece : file.tables()) {
    const size_t row_bytes = static_cast<size_t>(piece.row_floats()) * sizeof(float);
    if (piece.values().size() != static_cast<size_t>(piece.ids_size()) * row_bytes ||
        piece.last_pushed_size() != piece.ids_size() || piece.steps_size() != piece.ids_size() ||
        piece.counts_size() != piece.counted_ids_size()) {
      return absl::DataLossError("a saved piece of a table does not fit its rows");
    }
    proto::TableCheckpoint* kept = out.add_tables();
    *kept = piece;
    kept->clear_ids();
    kept->clear_values();
    kept->clear_last_pushed();
    kept->clear_steps();
    kept->clear_counted_ids();
    kept->clear_counts();
    for (int r = 0; r < piece.ids_size(); ++r) {
      if (TableServerOf(piece.ids(r), partitioner.num_servers()) != rank) continue;
      kept->add_ids(piece.ids(r));
      kept->add_last_pushed(piece.last_pushed(r));
      kept->add_steps(piece.steps(r));
      kept->mutable_values()->append(piece.values(), r * row_bytes, row_bytes);
    }
    for (int i = 0; i < piece.counted_ids_size(); ++i) {
      if (TableServerOf(piece.counted_ids(i), partitioner.num_servers()) != rank) continue;
      kept->add_counted_ids(piece.counted_ids(i));
      kept->add_counts(piece.counts(i));
    }
  }
  return out;
}

}  // namespace kvstore
