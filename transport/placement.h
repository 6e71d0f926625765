#pragma once
// Where a model's tensors live when the parameter server is S shard processes
// (cluster.servers): tensors over cluster.partition_mb are cut into near-equal partitions
// whatever S is (each partition is a key of its own, with its own codec state, so S changes
// where partitions live, never the math), and the partitions are placed on shards by
// largest-first bin packing over bytes (Graham's LPT rule: the next largest goes to the shard
// holding the fewest bytes). Both are deterministic from the tensors (names, sizes, order) and
// S, so every worker and shard computes the same map; Hash() names it in Register.
//
//   Placement p = PlaceLargestFirst({{"conv1.weight", 1728}, {"fc.weight", 5120000}}, 4, 4.0);
//   p.parts[1].key == "fc.weight#0";   p.parts[1].shard, .offset, .numel
//   p.Imbalance()   // the largest shard's bytes / the mean: 1.0 is perfect
//
// PlaceByHash is BytePS's rule for comparison: fixed-size partitions, shard = hash(name) % S,
// blind to load.
// Thread-safety: values and pure functions.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gradpress::transport {

struct PlacedPart {
  std::string key;     // "name" when the tensor is one part, "name#i" for part i of several
  size_t tensor = 0;   // index of its tensor in the input
  int64_t offset = 0;  // first element of the tensor's flat view
  int64_t numel = 0;
  int64_t rows = 0;  // rows of the tensor it holds (0 for a tensor given without rows)
  int shard = 0;
};

struct Placement {
  int shards = 1;
  std::vector<PlacedPart> parts;     // tensor order, then part order
  std::vector<int64_t> shard_bytes;  // float32 bytes per shard

  // Largest shard's bytes / mean bytes per shard (1 for S = 1 or an empty model).
  double Imbalance() const;
  // FNV-1a over S and every part's key, size and shard: equal maps, equal hashes.
  uint64_t Hash() const;
  // Indices into parts of shard s's parts, in parts order.
  std::vector<size_t> PartsOf(int shard) const;
};

// A tensor: its name, elements and rows (its first dimension; 0 = cut anywhere, as 1-D).
struct NamedSize {
  std::string first;   // name
  int64_t second = 0;  // elements
  int64_t rows = 0;
};

// Parts of at most partition_mb MiB of float32 each (ceil(bytes / limit) near-equal parts,
// cut between rows, so a part keeps the tensor's other dimensions; at most `rows` parts; a
// tensor at or under the limit is one part). partition_mb <= 0: no cutting.
// Throws InvalidArgument for shards < 1, a negative size or a repeated name.
Placement PlaceLargestFirst(const std::vector<NamedSize>& tensors, int shards, double partition_mb);
Placement PlaceByHash(const std::vector<NamedSize>& tensors, int shards, double partition_mb);

}  // namespace gradpress::transport
