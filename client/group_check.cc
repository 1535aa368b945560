#include "client/group_check.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <vector>

namespace kvstore {

namespace {
// Lists of at least this many pieces are checked on two threads, in blocks of kCheckBlock.
constexpr size_t kSplitCheckPieces = 16384;
constexpr size_t kCheckBlock = 4096;

// What one block of a check found for one part: the start of the part that its pieces imply,
// in the buffer of `head` (its first piece's tensor; null: the block has none), unless they
// disagree (`scattered`).
struct SeenPart {
  uintptr_t base = 0;
  const Tensor* head = nullptr;
  bool scattered = false;
};

enum class BlockCheck { kOk, kMismatch, kOtherKeys };

// How a uniform check compares the call's keys: not at all (the call named no keys), as
// consecutive integers from the group's first, or against the group's integer keys.
enum class KeyCompare { kNone, kConsecutive, kListed };

// Checks pieces [begin, end) of a uniform group (piece k is key k, of `bytes` bytes at
// (k - first[p]) * bytes in part p, whose keys are [first[p], first[p + 1])), starting in part
// p: key k must be integer key listed[k] (key0 + k when consecutive) and differs(tensor(k))
// must be 0. Records into mine[p] where each part's pieces imply the part starts, and whether
// they agree. Other keys win over a tensor that does not match (the call then belongs to
// another group, which checks it again).
//
// This loop is the whole cost of checking a long list, so it has no branch per piece: each
// piece ORs what differs into three words, which are looked at once per part. Everything
// comes by value and the loop stores only to locals, so that the compiler keeps it all in
// registers.
template <KeyCompare kKeys, typename TensorAt, typename Differs>
BlockCheck CheckUniformBlock(size_t begin, size_t end, TensorAt tensor, Differs differs,
                             const Key* keys, const int64_t* listed, int64_t key0, size_t bytes,
                             const size_t* first, size_t p, SeenPart* mine) {
  uint64_t keys_differ = 0;
  uint64_t kinds_differ = 0;
  for (size_t k = begin; k < end; ++p) {
    const size_t part_first = first[p];
    const size_t stop = std::min(end, first[p + 1]);
    if (k == stop) continue;  // A part without keys.
    const Tensor& head = tensor(k);
    const uintptr_t base = reinterpret_cast<uintptr_t>(head.data()) - (k - part_first) * bytes;
    uintptr_t apart = 0;
    for (; k < stop; ++k) {
      if constexpr (kKeys != KeyCompare::kNone) {
        const int64_t want =
            kKeys == KeyCompare::kListed ? listed[k] : key0 + static_cast<int64_t>(k);
        keys_differ |= static_cast<uint64_t>(!keys[k].is_int()) |
                       static_cast<uint64_t>(keys[k].int_key() ^ want);
      }
      const Tensor& t = tensor(k);
      kinds_differ |= differs(t);
      apart |= (reinterpret_cast<uintptr_t>(t.data()) - (k - part_first) * bytes) ^ base;
      apart |= static_cast<uintptr_t>(!t.SameBuffer(head));
    }
    mine[p] = SeenPart{base, &head, apart != 0};
  }
  if (keys_differ != 0) return BlockCheck::kOtherKeys;
  return kinds_differ != 0 ? BlockCheck::kMismatch : BlockCheck::kOk;
}
// BlockFindings: what the blocks of one check found - per block and part, the start the
// block's pieces imply (blocks x parts, block-major) - and whether some tensor did not match
// or some key was another group's.
struct BlockFindings {
  size_t parts = 0;
  size_t block = 1;
  std::vector<SeenPart> seen;
  std::atomic<bool> mismatched{false};
  std::atomic<bool> other_keys{false};
};

// Agree records into `into` the part start `base` implied by a piece of tensor `t`.
void Agree(SeenPart& into, uintptr_t base, const Tensor& t) {
  if (into.head == nullptr) {
    into.head = &t;
    into.base = base;
  } else if (base != into.base || !t.SameBuffer(*into.head)) {
    into.scattered = true;
  }
}

// CheckUniformGroup checks a uniform group (one dtype and shape, a piece per key) block by
// block with CheckUniformBlock: no piece, dtype or shape to read per key.
template <typename TensorAt>
void CheckUniformGroup(const GroupPlan& group, absl::Span<const Key> keys, TensorAt tensor,
                       SplitLoop* split, BlockFindings* found) {
  const DType dtype = group.dtypes[0];
  const int64_t* dims = group.dims.data();
  const size_t rank = group.dims_at[1];
  const size_t bytes = group.uniform_bytes;
  const std::vector<size_t>& first = group.part_first;
  // Consecutive keys: key k is key0 + k, computed rather than read from int_keys.
  const int64_t* expected = group.consecutive ? nullptr : group.int_keys.data();
  const int64_t key0 = group.int_keys[0];
  // A small shape is compared through the handle's code, without reading its dimensions.
  const uint32_t code = ShapeCode(Shape(dims, dims + rank));
  const Key* const key_list = keys.empty() ? nullptr : keys.data();
  // A tensor of the group's small shape, dtype and device has this signature.
  const uint64_t signature = Tensor::Signature(dtype, code, Device::CPU());
  split->Run(group.pieces.size(), found->block, [&](size_t begin, size_t end) {
    const size_t p =
        static_cast<size_t>(std::upper_bound(first.begin(), first.end(), begin) - first.begin()) -
        1;
    SeenPart* mine = &found->seen[begin / found->block * found->parts];
    // One instantiation per way of comparing keys and tensors, each a loop of its own.
    auto run = [&](auto differs) {
      if (key_list == nullptr) {
        return CheckUniformBlock<KeyCompare::kNone>(begin, end, tensor, differs, key_list, expected,
                                                    key0, bytes, first.data(), p, mine);
      }
      if (expected == nullptr) {
        return CheckUniformBlock<KeyCompare::kConsecutive>(
            begin, end, tensor, differs, key_list, expected, key0, bytes, first.data(), p, mine);
      }
      return CheckUniformBlock<KeyCompare::kListed>(begin, end, tensor, differs, key_list, expected,
                                                    key0, bytes, first.data(), p, mine);
    };
    const BlockCheck result =
        code != 0 ? run([signature](const Tensor& t) { return t.signature() ^ signature; })
                  : run([dtype, dims, rank](const Tensor& t) {
                      return static_cast<uint64_t>(!MatchesShape(t, dtype, dims, rank));
                    });
    if (result == BlockCheck::kOtherKeys) found->other_keys.store(true, std::memory_order_relaxed);
    if (result == BlockCheck::kMismatch) found->mismatched.store(true, std::memory_order_relaxed);
  });
}

// CheckPieces checks any group piece by piece (Matches and SameKey once per key).
template <typename TensorAt>
void CheckPieces(const GroupPlan& group, absl::Span<const Key> keys, TensorAt tensor,
                 SplitLoop* split, BlockFindings* found) {
  split->Run(group.pieces.size(), found->block, [&](size_t begin, size_t end) {
    SeenPart* mine = &found->seen[begin / found->block * found->parts];
    size_t checked = std::numeric_limits<size_t>::max();
    for (size_t k = begin; k < end; ++k) {
      const GroupPlan::Piece& piece = group.pieces[k];
      const Tensor& t = tensor(piece.key);
      if (piece.key != checked) {
        if (!keys.empty() && !SameKey(group, piece.key, keys[piece.key])) {
          found->other_keys.store(true, std::memory_order_relaxed);
          return;
        }
        if (!Matches(group, piece.key, t)) {
          found->mismatched.store(true, std::memory_order_relaxed);
          return;
        }
        checked = piece.key;
      }
      SeenPart& part = mine[piece.part];
      if (part.scattered) continue;
      const uintptr_t data = reinterpret_cast<uintptr_t>(t.data());
      Agree(part, data + piece.value_offset - piece.packed_offset, t);
    }
  });
}

// CheckGroupTensors checks the call's tensors (`tensor(i)` for key i) with Matches, and the
// call's keys with SameKey unless `keys` is empty, and returns in `bases`, per part, where
// its members already lie back to back in one buffer in the part's order (null where they
// do not). Long lists are checked on two threads (`split`).
template <typename TensorAt>
GroupCheck CheckGroupTensors(const GroupPlan& group, absl::Span<const Key> keys, TensorAt tensor,
                             SplitLoop* split, std::vector<uint8_t*>* bases) {
  // A part's members lie back to back in one buffer when every piece implies the same start of
  // the part (its address less its offset in the part) in the same buffer. Each block of
  // pieces finds, per part, the start its pieces imply and whether they all agree; the blocks
  // are then merged in order.
  const size_t n = group.pieces.size();
  BlockFindings found;
  found.parts = group.parts.size();
  found.block = n >= kSplitCheckPieces ? kCheckBlock : std::max<size_t>(n, 1);
  const size_t blocks = (n + found.block - 1) / found.block;
  found.seen.resize(blocks * found.parts);
  if (group.uniform) {
    CheckUniformGroup(group, keys, tensor, split, &found);
  } else {
    CheckPieces(group, keys, tensor, split, &found);
  }
  // A block stops at its first key that differs (a uniform block looks at every key and
  // reports other keys first), so a tensor that did not match belongs to a key of the group's
  // list: with other keys the call is checked again against their group.
  if (found.other_keys.load(std::memory_order_relaxed)) return GroupCheck::kOtherKeys;
  if (found.mismatched.load(std::memory_order_relaxed)) return GroupCheck::kMismatch;
  bases->assign(found.parts, nullptr);
  for (size_t p = 0; p < found.parts; ++p) {
    SeenPart whole;
    for (size_t b = 0; b < blocks && !whole.scattered; ++b) {
      const SeenPart& part = found.seen[b * found.parts + p];
      if (part.head == nullptr) continue;
      if (part.scattered) whole.scattered = true;
      Agree(whole, part.base, *part.head);
    }
    if (!whole.scattered && whole.head != nullptr) {
      (*bases)[p] = reinterpret_cast<uint8_t*>(whole.base);
    }
  }
  return GroupCheck::kOk;
}

// SendFrom makes the bytes each part sends the caller's memory at bases[p], which
// `owner(part)` keeps alive (direct: nothing is copied).
template <typename Owner>
void SendFrom(const GroupPlan& group, const std::vector<uint8_t*>& bases, Owner owner,
              GroupWork* work) {
  for (size_t p = 0; p < group.parts.size(); ++p) {
    const GroupPlan::Part& part = group.parts[p];
    // Every dtype is 2, 4 or 8 bytes, so a part is whole 16-bit words; the handle keeps the
    // owner's buffer alive until the request is sent.
    work->packed.push_back(Tensor::Adopt(bases[p], DType::kFloat16,
                                         {static_cast<int64_t>(part.offsets.back() / 2)},
                                         Device::CPU(), [keep = owner(part)] {}));
  }
  work->direct = true;
}

// PackPieces copies every member from `key_data(i)` (key i's value) into the part's packed
// array, reusing the group's spare arrays.
template <typename KeyData>
void PackPieces(GroupPlan& group, KeyData key_data, GroupWork* work) {
  std::vector<Tensor>* packed = &work->packed;
  {
    absl::MutexLock lock(&group.spare_mu);
    while (!group.spare.empty() && packed->empty()) {
      std::vector<Tensor> candidate = std::move(group.spare.back());
      group.spare.pop_back();
      if (std::none_of(candidate.begin(), candidate.end(),
                       [](const Tensor& t) { return t.shared(); })) {
        *packed = std::move(candidate);
      }
    }
  }
  if (packed->empty()) {
    for (const GroupPlan::Part& part : group.parts) {
      const int64_t words = static_cast<int64_t>((part.offsets.back() + 3) / 4);
      packed->push_back(Tensor::Zeros(DType::kInt32, {std::max<int64_t>(words, 1)}));
    }
  }
  std::vector<uint8_t*> arrays;
  for (Tensor& t : *packed) arrays.push_back(static_cast<uint8_t*>(t.data()));
  for (const GroupPlan::Piece& piece : group.pieces) {
    std::memcpy(arrays[piece.part] + piece.packed_offset, key_data(piece.key) + piece.value_offset,
                piece.bytes);
  }
}

}  // namespace

GroupCheck PackGroup(GroupPlan& group, absl::Span<const Key> keys, absl::Span<const Tensor> values,
                     SplitLoop* split, GroupWork* work) {
  std::vector<uint8_t*> bases;
  const GroupCheck check = CheckGroupTensors(
      group, keys, [&](size_t i) -> const Tensor& { return values[i]; }, split, &bases);
  if (check != GroupCheck::kOk) return check;
  // Values already back to back in each part's order (views of one bucket) go as they are.
  if (std::none_of(bases.begin(), bases.end(), [](uint8_t* b) { return b == nullptr; })) {
    SendFrom(
        group, bases, [&](const GroupPlan::Part& part) { return values[part.members.front().key]; },
        work);
    return GroupCheck::kOk;
  }
  PackPieces(
      group, [&](size_t i) { return static_cast<const uint8_t*>(values[i].data()); }, work);
  return GroupCheck::kOk;
}

GroupCheck CheckGroupOutputs(const GroupPlan& group, absl::Span<const Key> keys,
                             absl::Span<Tensor* const> outs, SplitLoop* split, GroupWork* work) {
  const GroupCheck check = CheckGroupTensors(
      group, keys, [&](size_t i) -> const Tensor& { return *outs[i]; }, split, &work->out_bases);
  if (check != GroupCheck::kOk) return check;
  if (std::any_of(work->out_bases.begin(), work->out_bases.end(),
                  [](uint8_t* b) { return b == nullptr; })) {
    for (Tensor* out : outs) work->out_data.push_back(static_cast<uint8_t*>(out->data()));
  }
  return GroupCheck::kOk;
}

GroupCheck PrepareBucket(GroupPlan& group, const Tensor* in, Tensor* out, GroupWork* work) {
  if (!group.one_dtype) return GroupCheck::kMismatch;
  for (const Tensor* bucket : {in, static_cast<const Tensor*>(out)}) {
    if (bucket != nullptr && (bucket->dtype() != group.dtypes.front() ||
                              bucket->byte_size() != group.key_offsets.back())) {
      return GroupCheck::kMismatch;
    }
  }
  if (in != nullptr) {
    auto* data = static_cast<uint8_t*>(in->data());
    if (std::all_of(group.parts.begin(), group.parts.end(), [](const GroupPlan::Part& part) {
          return part.bucket_base != GroupPlan::kScattered;
        })) {
      std::vector<uint8_t*> bases;
      for (const GroupPlan::Part& part : group.parts) bases.push_back(data + part.bucket_base);
      SendFrom(
          group, bases, [&](const GroupPlan::Part&) { return *in; }, work);
    } else {
      PackPieces(
          group, [&](size_t i) { return data + group.key_offsets[i]; }, work);
    }
  }
  if (out != nullptr) {
    auto* data = static_cast<uint8_t*>(out->data());
    bool scattered = false;
    for (const GroupPlan::Part& part : group.parts) {
      scattered = scattered || part.bucket_base == GroupPlan::kScattered;
      work->out_bases.push_back(
          part.bucket_base == GroupPlan::kScattered ? nullptr : data + part.bucket_base);
    }
    if (scattered) {
      for (size_t i = 0; i + 1 < group.key_offsets.size(); ++i) {
        work->out_data.push_back(data + group.key_offsets[i]);
      }
    }
  }
  return GroupCheck::kOk;
}

}  // namespace kvstore
