#pragma once
// ShardedClient: the worker's client when the parameter server is S shard processes
// (cluster.servers), or when a tensor is larger than cluster.partition_mb. It places the
// model's partitions with transport/placement.h (tensors over partition_mb cut into near-equal
// flat parts whatever S is; parts on shards by largest-first bin packing), holds one client per
// shard (gRPC, or in-process for the sim) registered with that shard's parts, and drives all
// shards at once: each call fans out as views of the caller's tensors (a part of a cut tensor
// is a flat slice of it) and the results land in place. Each part is a key of its own, with its
// own codec state, so S changes where parts live, never the math: the same seeds give the
// same weights with 1 shard and with S.
//
//   auto c = std::make_unique<ShardedClient>(options, servers, partition_mb, make_shard);
//   c->Register(specs, bucket_keys);   // every shard, with the placement hash
//   c->PushPull(step, grads, &out);    // all shards concurrently
//
// Method 6's election runs on shard 0 (ranks are numbered per shard; the job uses shard 0's);
// published and pulled weights go to every shard.
// Thread-safety: as ServerClient (concurrent PushPullBucket for different buckets).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/placement.h"
#include "worker/server_client.h"

namespace gradpress {
class TaskThreads;
}

namespace gradpress::worker {

class ShardedClient : public ServerClient {
 public:
  // make_shard builds shard s's client from options with server, shard, shards and (after
  // Register has placed the model) placement_hash filled in.
  using ShardFactory = std::function<std::unique_ptr<ServerClient>(const ClientOptions&)>;
  ShardedClient(ClientOptions options, std::vector<std::string> servers, double partition_mb,
                ShardFactory make_shard);
  ~ShardedClient() override;

  // Whether a model needs this client: several servers, or a tensor over partition_mb.
  static bool Needed(const std::vector<torch::Tensor>& params, size_t servers, double partition_mb);

  RegisterInfo Register(const std::vector<TensorSpec>& model,
                        const std::vector<int>& bucket_keys = {}) override;
  bool InitOrPull(std::vector<torch::Tensor>* params) override;
  StepStats PushPull(int64_t step, const std::vector<torch::Tensor>& grads,
                     std::vector<torch::Tensor>* out, int64_t base_step = 0) override;
  StepStats PushPullBucket(int64_t step, int bucket, const std::vector<torch::Tensor>& grads,
                           std::vector<torch::Tensor>* out, Uplink* upload = nullptr) override;
  StepStats Push(int64_t step, const std::vector<torch::Tensor>& grads,
                 int64_t base_step = 0) override;
  StepStats Pull(std::vector<torch::Tensor>* out, int64_t step = -1) override;
  int64_t Heartbeat() override;
  std::pair<int, double> Elect(int64_t round, double score) override;
  void PublishWeights(int64_t round, const std::vector<torch::Tensor>& params) override;
  void PullWeights(std::vector<torch::Tensor>* params, int64_t min_version = 0) override;
  std::string StatsText() override;
  void Report(const proto::WorkerRow& row) override { shards_.at(0)->Report(row); }
  std::vector<int> ShardsBehind() override;
  void set_weights_source(std::function<std::vector<torch::Tensor>()> source) override {
    weights_ = std::move(source);
  }
  void RejoinShards(const std::vector<int>& shards, int64_t step,
                    std::vector<torch::Tensor>* params) override;

  std::string SaveState() const override;
  void LoadState(std::string_view state) override;
  void SetPushCodec(const CodecSpec& push) override;
  bool SetPushDensity(double ratio) override;
  void set_server_lr(double lr) override;

  const transport::Placement& placement() const { return placement_; }
  ServerClient& shard(int s) { return *shards_.at(s); }

 private:
  struct Call;  // one fanned-out call: views per shard, stats merged
  // Shard s's views of `ts` (the whole model, model order): a tensor, or a flat slice of it.
  std::vector<torch::Tensor> Views(int s, const std::vector<torch::Tensor>& ts) const;
  // Shard s's part of a call of `step`: fn(); if shard s lost this worker (it restarted) and
  // others did not, CatchUp(s, step, the weights source's), then fn() once more.
  StepStats WithCatchUp(int s, int64_t step, const std::function<StepStats()>& fn);
  // Registers again with shard s asking for `step`; the shard goes to the earliest step its
  // workers ask. At `step`: it takes (or gives) the weights; one step behind: this worker
  // completed that step, so it pushes its kept push of it again. Else throws.
  void CatchUp(int s, int64_t step, const std::vector<torch::Tensor>& weights);
  // Runs fn(s) for every shard in `which` (all if empty), concurrently when more than one
  // (on threads_, made once per client); rethrows the first failure once all have ended.
  void ForShards(const std::function<void(int)>& fn, const std::vector<int>& which = {});

  std::vector<std::string> servers_;
  double partition_mb_;
  ShardFactory make_shard_;
  transport::Placement placement_;
  std::vector<std::unique_ptr<ServerClient>> shards_;
  std::vector<std::vector<size_t>> parts_of_;            // per shard: indices into placement_.parts
  std::function<std::vector<torch::Tensor>()> weights_;  // set_weights_source
  std::vector<std::vector<TensorSpec>> specs_;           // per shard: its parts, as registered
  std::vector<std::vector<int>> split_;  // per shard: its bucket split, as registered
  // Per bucket of the caller's split, per shard: the shard's own bucket index, -1 if the
  // bucket has no part there.
  std::vector<std::vector<int>> local_bucket_;
  std::unique_ptr<TaskThreads> threads_;  // ForShards' calls; last, so it ends first
};

}  // namespace gradpress::worker
