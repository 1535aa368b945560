#include "tests/reliability/elastic_reference.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/reliability/sum_reference.h"

namespace kvstore::testing {

absl::StatusOr<ElasticReference> ElasticReference::Create(uint64_t seed, int workers, int victim,
                                                          int64_t last) {
  if (victim < 0 || victim >= workers || last < 1 || last > 62) {
    return absl::InvalidArgumentError(absl::StrCat("an elastic reference needs a victim among ",
                                                   workers, " workers and 1..62 rounds, got ",
                                                   victim, " and ", last));
  }
  ElasticReference reference;
  reference.seed_ = seed;
  reference.workers_ = workers;
  reference.victim_ = victim;
  reference.last_ = last;
  const uint64_t every = (uint64_t{1} << (last + 1)) - 1;  // K = 0..last.
  for (const SumKey& k : SumKeys()) {
    std::vector<double> others(k.elements);
    std::vector<std::vector<double>> prefixes(k.elements);
    for (int64_t i = 0; i < k.elements; ++i) {
      others[i] = InitialValue(seed, k.key, i);
      std::vector<double>& prefix = prefixes[i];
      prefix.push_back(0.0);
      for (int64_t r = 1; r <= last; ++r) {
        prefix.push_back(prefix.back() + Gradient(seed, k.key, victim, r, i));
      }
    }
    reference.others_.push_back(std::move(others));
    reference.victim_sums_.push_back(std::move(prefixes));
    reference.masks_.emplace_back(k.elements, every);
  }
  return reference;
}

absl::Status ElasticReference::Check(int64_t round,
                                     const std::function<double(size_t, int64_t)>& pulled) {
  if (round != round_ + 1 || round > last_) {
    return absl::InvalidArgumentError(
        absl::StrCat("round ", round, " checked after round ", round_, " (last ", last_, ")"));
  }
  round_ = round;
  const std::vector<SumKey> keys = SumKeys();
  for (size_t k = 0; k < keys.size(); ++k) {
    for (int64_t i = 0; i < keys[k].elements; ++i) {
      for (int w = 0; w < workers_; ++w) {
        if (w != victim_) others_[k][i] += Gradient(seed_, keys[k].key, w, round, i);
      }
      const double got = pulled(k, i);
      const double residual = got - others_[k][i];
      uint64_t& mask = masks_[k][i];
      for (int64_t K = 0; K <= last_; ++K) {
        if ((mask >> K & 1) != 0 && victim_sums_[k][i][std::min(round, K)] != residual) {
          mask &= ~(uint64_t{1} << K);
        }
      }
      if (mask == 0) {
        std::vector<std::string> sums;
        for (int64_t r = 0; r <= round; ++r) sums.push_back(absl::StrCat(victim_sums_[k][i][r]));
        return absl::DataLossError(
            absl::StrCat("round ", round, " key ", keys[k].key, " element ", i, ": pulled ", got,
                         "; the other workers' pushes and the initial value make ", others_[k][i],
                         ", and no K makes up the difference ", residual, " with worker ", victim_,
                         "'s pushes of rounds 1..K (those sums for K = 0..", round, ": ",
                         absl::StrJoin(sums, " "), ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ElasticReference::Write(const std::string& path) const {
  std::ostringstream text;
  const std::vector<SumKey> keys = SumKeys();
  for (size_t k = 0; k < keys.size(); ++k) {
    for (int64_t i = 0; i < keys[k].elements; ++i) {
      text << keys[k].key << " " << i << " " << absl::StrCat(absl::Hex(masks_[k][i])) << "\n";
    }
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << text.str();
    if (!out.good()) return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ElasticReference::ElementMask>> ElasticReference::Read(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::vector<ElementMask> masks;
  std::string key, element, mask;
  while (in >> key >> element >> mask) {
    ElementMask m;
    if (!absl::SimpleAtoi(key, &m.key) || !absl::SimpleAtoi(element, &m.element) ||
        !absl::SimpleHexAtoi(mask, &m.mask)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": bad line \"", key, " ", element, " ", mask, "\""));
    }
    masks.push_back(m);
  }
  return masks;
}

}  // namespace kvstore::testing
