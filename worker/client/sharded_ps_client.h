#pragma once
// ShardedPsClient: the worker's client when the parameter server is S shard processes
// (cluster.servers), or when a tensor is larger than cluster.partition_mb: a composite over one
// carrier per shard (PsClient, ps_client.h). It places the model's partitions with
// transport/placement.h (tensors over partition_mb cut into near-equal flat parts whatever S
// is; parts on shards by largest-first bin packing), gives each shard's carrier a KeyCodecs of
// that shard's parts, and drives all shards at once: each call fans out as views of the
// caller's tensors (a part of a cut tensor is a flat slice of it) and the results land in
// place. Each part is a key of its own, with its own codec state, so S changes where parts
// live, never the math: the same seeds give the same weights with 1 shard and with S.
//
//   ShardedPsClient c(options, servers, partition_mb, make_shard);
//   c.Register(specs, bucket_keys);   // every shard, with the placement hash
//   c.PushPull(step, grads, &out);    // all shards concurrently
//
// Method 6's election runs on shard 0 (ranks are numbered per shard; the job uses shard 0's);
// published and pulled weights go to every shard. Only shard 0's carrier sends the dashboard's
// rows. A restarted shard that lost this worker is caught up here (WithCatchUp, RejoinShards),
// from the weights source or this worker's kept push of the step it lost.
// Thread-safety: as PsClient (concurrent PushPull for different buckets).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/placement.h"
#include "worker/client/key_codecs.h"
#include "worker/client/ps_client.h"

namespace gradpress {
class TaskThreads;
}

namespace gradpress::worker {

class ShardedPsClient : public PsClient, public CodecState, public ShardRejoin {
 public:
  // make_shard builds shard s's carrier from options (server, shard, shards and the
  // placement hash filled in) over `codecs`, the shard's own KeyCodecs.
  using ShardFactory =
      std::function<std::unique_ptr<PsClient>(const ClientOptions&, KeyCodecs* codecs)>;
  ShardedPsClient(ClientOptions options, std::vector<std::string> servers, double partition_mb,
                  ShardFactory make_shard);
  ~ShardedPsClient() override;

  // Whether a model needs this client: several servers, or a tensor over partition_mb.
  static bool Needed(const std::vector<torch::Tensor>& params, size_t servers, double partition_mb);

  RegisterInfo Register(const std::vector<TensorSpec>& model,
                        const std::vector<int>& bucket_keys = {},
                        int64_t catch_up_step = 0) override;
  bool InitOrPull(std::vector<torch::Tensor>* params) override;
  void AwaitInitWeights(std::vector<torch::Tensor>* params) override;
  using PsClient::PushPull;
  StepMetrics PushPull(const StepCall& call, const std::vector<torch::Tensor>& grads,
                       std::vector<torch::Tensor>* out) override;
  StepMetrics Pull(std::vector<torch::Tensor>* out, int64_t step = -1) override;
  int64_t Heartbeat() override;
  std::pair<int, double> Elect(int64_t round, double score) override;
  void PublishWeights(int64_t round, const std::vector<torch::Tensor>& params) override;
  void PullWeights(std::vector<torch::Tensor>* params, int64_t min_version = 0) override;
  void PullMomentum(std::vector<torch::Tensor>* buffers) override;
  std::string StatsText() override;
  // On shard 0 (the job's one place for a broadcast).
  void Broadcast(const std::string& name, int64_t round, bool root, std::string* data) override;

  // The shards' push codecs, one state (CodecState, key_codecs.h).
  std::string SaveState() const override;
  void LoadState(std::string_view state) override;
  void SetPushCodec(const CodecSpec& push) override;
  void SetKeyPushCodecs(const std::vector<CodecSpec>& per_key) override;  // a part: its tensor's
  bool SetPushDensity(double ratio) override;

  // After a call failed with LostByServer (ShardRejoin, ps_client.h).
  std::vector<int> ShardsBehind() override;
  void RejoinShards(const std::vector<int>& shards, int64_t step,
                    std::vector<torch::Tensor>* params) override;
  // Where a shard that lost this worker takes its weights from (the model's parameters, model
  // order), so a call that met the restarted shard catches it up and goes on. Unset: such a
  // call fails and the Trainer rejoins.
  void set_weights_source(std::function<std::vector<torch::Tensor>()> source) {
    weights_ = std::move(source);
  }
  const transport::Placement& placement() const { return placement_; }

 private:
  // Shard s's views of `ts` (the whole model, model order): a tensor, or a flat slice of it.
  std::vector<torch::Tensor> Views(int s, const std::vector<torch::Tensor>& ts) const;
  // Shard s's part of a call of `step`: fn(); if shard s lost this worker (it restarted) and
  // others did not, CatchUp(s, step, the weights source's), then fn() once more.
  StepMetrics WithCatchUp(int s, int64_t step, const std::function<StepMetrics()>& fn);
  // Registers again with shard s asking for `step`; the shard goes to the earliest step its
  // workers ask. At `step`: it takes (or gives) the weights; one step behind: this worker
  // completed that step, so it pushes its kept push of it again. Else throws.
  void CatchUp(int s, int64_t step, const std::vector<torch::Tensor>& weights);
  // Runs fn(s) for every shard in `which` (all if empty), concurrently when more than one
  // (on threads_, made once per client); rethrows the first failure once all have ended.
  void ForShards(const std::function<void(int)>& fn, const std::vector<int>& which = {});

  ClientOptions opt_;
  std::vector<std::string> servers_;
  double partition_mb_;
  ShardFactory make_shard_;
  std::vector<TensorSpec> model_;  // the caller's model: whole tensors
  transport::Placement placement_;
  std::vector<std::unique_ptr<KeyCodecs>> codecs_;  // per shard; outlive the carriers
  std::vector<std::unique_ptr<PsClient>> shards_;
  std::vector<std::vector<size_t>> parts_of_;            // per shard: indices into placement_.parts
  std::function<std::vector<torch::Tensor>()> weights_;  // set_weights_source
  std::vector<std::vector<TensorSpec>> specs_;           // per shard: its parts, as registered
  std::vector<std::vector<int>> split_;  // per shard: its bucket split, as registered
  // Per bucket of the caller's split, per shard: the shard's own bucket index, -1 if the
  // bucket has no part there.
  std::vector<std::vector<int>> local_bucket_;
  // Per shard: the last whole-model push that completed, as encoded, and its step: a
  // restarted shard that lost that step rebuilds it from this (CatchUp).
  std::vector<std::vector<KeyPush>> kept_;
  std::vector<int64_t> kept_step_;
  std::unique_ptr<TaskThreads> threads_;  // ForShards' calls; last, so it ends first
};

}  // namespace gradpress::worker
