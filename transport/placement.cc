#include "transport/placement.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "common/error.h"

namespace gradpress::transport {
namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ull, kFnvPrime = 1099511628211ull;

uint64_t Fnv(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

// The parts of every tensor, shards not yet chosen.
Placement Cut(const std::vector<NamedSize>& tensors, int shards, double partition_mb) {
  GP_ENFORCE(shards >= 1, "placement: shards must be >= 1, got ", shards);
  Placement p;
  p.shards = shards;
  p.shard_bytes.assign(shards, 0);
  std::set<std::string> seen;
  const double limit = partition_mb > 0 ? partition_mb * (1 << 20) / 4.0 : 0;  // elements
  for (size_t t = 0; t < tensors.size(); ++t) {
    const std::string& name = tensors[t].first;
    const int64_t numel = tensors[t].second;
    GP_ENFORCE(numel >= 0, "placement: tensor '", name, "' has ", numel, " elements");
    GP_ENFORCE(seen.insert(name).second, "placement: tensor '", name, "' appears twice");
    // Cut between rows (a 1-D or row-less tensor: every element is a row).
    const int64_t rows = tensors[t].rows > 0 ? tensors[t].rows : numel;
    GP_ENFORCE(rows == 0 || numel % rows == 0, "placement: tensor '", name, "' has ", numel,
               " elements, not a multiple of its ", rows, " rows");
    const int64_t row = rows > 0 ? numel / rows : 0;
    int64_t n =
        limit > 0 ? std::max<int64_t>(1, static_cast<int64_t>(std::ceil(numel / limit))) : 1;
    n = std::max<int64_t>(1, std::min(n, rows));
    for (int64_t i = 0; i < n; ++i) {
      PlacedPart part;
      part.key = n == 1 ? name : name + "#" + std::to_string(i);
      part.tensor = t;
      const int64_t r0 = rows * i / n, r1 = rows * (i + 1) / n;  // near-equal, every row once
      part.offset = r0 * row;
      part.numel = (r1 - r0) * row;
      part.rows = tensors[t].rows > 0 ? r1 - r0 : 0;
      p.parts.push_back(std::move(part));
    }
  }
  return p;
}

}  // namespace

double Placement::Imbalance() const {
  const int64_t total = std::accumulate(shard_bytes.begin(), shard_bytes.end(), int64_t{0});
  if (total == 0 || shards <= 1) return 1.0;
  const int64_t largest = *std::max_element(shard_bytes.begin(), shard_bytes.end());
  return static_cast<double>(largest) * shards / static_cast<double>(total);
}

uint64_t Placement::Hash() const {
  uint64_t h = Fnv(kFnvOffset, &shards, sizeof(shards));
  for (const PlacedPart& part : parts) {
    h = Fnv(h, part.key.data(), part.key.size() + 1);  // with the terminator: "a"+"bc" != "ab"+"c"
    h = Fnv(h, &part.numel, sizeof(part.numel));
    h = Fnv(h, &part.shard, sizeof(part.shard));
  }
  return h;
}

std::vector<size_t> Placement::PartsOf(int shard) const {
  std::vector<size_t> out;
  for (size_t i = 0; i < parts.size(); ++i)
    if (parts[i].shard == shard) out.push_back(i);
  return out;
}

Placement PlaceLargestFirst(const std::vector<NamedSize>& tensors, int shards,
                            double partition_mb) {
  Placement p = Cut(tensors, shards, partition_mb);
  std::vector<size_t> order(p.parts.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; equal sizes in model order, so the map depends on nothing else.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return p.parts[a].numel > p.parts[b].numel; });
  for (size_t i : order) {
    const int s = static_cast<int>(std::min_element(p.shard_bytes.begin(), p.shard_bytes.end()) -
                                   p.shard_bytes.begin());  // the lightest; ties: lowest index
    p.parts[i].shard = s;
    p.shard_bytes[s] += 4 * p.parts[i].numel;
  }
  return p;
}

Placement PlaceByHash(const std::vector<NamedSize>& tensors, int shards, double partition_mb) {
  Placement p = Cut(tensors, shards, partition_mb);
  for (PlacedPart& part : p.parts) {
    part.shard = static_cast<int>(Fnv(kFnvOffset, part.key.data(), part.key.size()) % shards);
    p.shard_bytes[part.shard] += 4 * part.numel;
  }
  return p;
}

}  // namespace gradpress::transport
