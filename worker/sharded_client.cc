#include "worker/sharded_client.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <exception>
#include <mutex>

#include "common/byte_io.h"
#include "common/error.h"
#include "common/shape.h"
#include "common/task_threads.h"

namespace gradpress::worker {
namespace {

// Several shards' stats of one call: bytes, retries and CPU times add up; the calls ran at
// once, so their wall times (network, wait, server) are the longest one's.
void Merge(const StepStats& s, bool first, StepStats* into) {
  into->bytes_up += s.bytes_up;
  into->bytes_down += s.bytes_down;
  into->encode_ms += s.encode_ms;
  into->decode_ms += s.decode_ms;
  into->network_ms = std::max(into->network_ms, s.network_ms);
  into->wait_ms = std::max(into->wait_ms, s.wait_ms);
  into->server_ms = std::max(into->server_ms, s.server_ms);
  into->server_step = first ? s.server_step : std::min(into->server_step, s.server_step);
  into->contributors = first ? s.contributors : std::min(into->contributors, s.contributors);
  into->duplicate = first ? s.duplicate : into->duplicate && s.duplicate;
  into->retries += s.retries;
}

// One bucket's uplink turn shared by its shards' calls: the first to take it takes the
// caller's turn, the last to give it back gives it back.
class SharedTurn : public Uplink {
 public:
  explicit SharedTurn(Uplink* parent) : parent_(parent) {}
  void Acquire() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (holders_++ == 0 && parent_) parent_->Acquire();
  }
  void Release() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (--holders_ == 0 && parent_) parent_->Release();
  }

 private:
  Uplink* parent_;
  std::mutex mu_;
  int holders_ = 0;
};

// The stats of the shards in `which` (all if empty), merged.
StepStats MergeAll(const std::vector<StepStats>& st, const std::vector<int>& which = {}) {
  StepStats all;
  if (which.empty()) {
    for (size_t s = 0; s < st.size(); ++s) Merge(st[s], s == 0, &all);
  } else {
    for (size_t k = 0; k < which.size(); ++k) Merge(st[which[k]], k == 0, &all);
  }
  return all;
}

}  // namespace

ShardedClient::ShardedClient(ClientOptions options, std::vector<std::string> servers,
                             double partition_mb, ShardFactory make_shard)
    : ServerClient(std::move(options)),
      servers_(std::move(servers)),
      partition_mb_(partition_mb),
      make_shard_(std::move(make_shard)),
      threads_(std::make_unique<TaskThreads>()) {
  GP_ENFORCE(!servers_.empty(), "cluster.servers is empty");
  GP_ENFORCE(make_shard_, "ShardedClient needs a shard factory");
}

ShardedClient::~ShardedClient() = default;

bool ShardedClient::Needed(const std::vector<torch::Tensor>& params, size_t servers,
                           double partition_mb) {
  if (servers > 1) return true;
  if (partition_mb <= 0) return false;
  for (const auto& p : params)
    if (4.0 * static_cast<double>(p.numel()) > partition_mb * (1 << 20)) return true;
  return false;
}

RegisterInfo ShardedClient::Register(const std::vector<TensorSpec>& model,
                                     const std::vector<int>& bucket_keys) {
  const int S = static_cast<int>(servers_.size());
  std::vector<transport::NamedSize> sizes;
  for (const auto& t : model)  // cut between rows: a part keeps the other dimensions
    sizes.push_back({t.key, NumelOf(t.shape), t.shape.size() > 1 ? t.shape[0] : 0});
  placement_ = transport::PlaceLargestFirst(sizes, S, partition_mb_);
  const auto buckets = SplitBuckets(model, bucket_keys);
  // Each part's bucket: the bucket of its tensor.
  std::vector<int> bucket_of_tensor(model.size());
  for (size_t b = 0; b < buckets.size(); ++b)
    for (size_t t = buckets[b].first; t < buckets[b].second; ++t) bucket_of_tensor[t] = b;
  parts_of_.assign(S, {});
  local_bucket_.assign(buckets.size(), std::vector<int>(S, -1));
  std::vector<std::vector<TensorSpec>> specs(S);
  std::vector<std::vector<int>> split(S);  // per shard: parts per local bucket
  for (size_t i = 0; i < placement_.parts.size(); ++i) {
    const transport::PlacedPart& part = placement_.parts[i];
    const TensorSpec& whole = model[part.tensor];
    std::vector<int64_t> shape = whole.shape;  // a cut part: fewer rows, or a 1-D slice
    if (part.numel != NumelOf(whole.shape))
      shape = part.rows > 0 ? (shape[0] = part.rows, shape) : std::vector<int64_t>{part.numel};
    specs[part.shard].push_back({part.key, shape, whole.dtype});
    parts_of_[part.shard].push_back(i);
    int& local = local_bucket_[bucket_of_tensor[part.tensor]][part.shard];
    if (local < 0) {
      local = static_cast<int>(split[part.shard].size());
      split[part.shard].push_back(0);
    }
    ++split[part.shard][local];
  }
  for (int s = 0; s < S; ++s)
    GP_ENFORCE(!specs[s].empty(), "cluster.servers: shard ", s, " (", servers_[s],
               ") would hold no part of the model; use at most as many servers as parts (",
               placement_.parts.size(), ")");
  SetModel(model, buckets);  // the caller's view: whole tensors, its bucket split
  shards_.clear();
  for (int s = 0; s < S; ++s) {
    ClientOptions o = opt_;
    o.server = servers_[s];
    o.shard = s;
    o.shards = S;
    o.placement_hash = placement_.Hash();
    shards_.push_back(make_shard_(o));
  }
  specs_ = std::move(specs);
  split_.assign(S, {});
  if (buckets.size() > 1) split_ = std::move(split);
  std::vector<RegisterInfo> infos(S);
  ForShards([&](int s) { infos[s] = shards_[s]->Register(specs_[s], split_[s]); });
  RegisterInfo info = infos[0];
  for (const auto& i : infos) {
    info.server_step = std::min(info.server_step, i.server_step);
    info.initialized = info.initialized && i.initialized;
  }
  return info;
}

std::vector<torch::Tensor> ShardedClient::Views(int s, const std::vector<torch::Tensor>& ts) const {
  // Undefined tensors (the keys of other buckets) stay undefined; the shard's client checks
  // the shapes of the keys it uses.
  GP_ENFORCE(ts.size() == model().size(), "sharded call: ", ts.size(), " tensors for a model of ",
             model().size());
  std::vector<torch::Tensor> out;
  for (size_t i : parts_of_[s]) {
    const transport::PlacedPart& part = placement_.parts[i];
    const torch::Tensor& t = ts[part.tensor];
    if (t.defined())
      GP_ENFORCE(t.numel() == NumelOf(model()[part.tensor].shape), "sharded call: key '",
                 model()[part.tensor].key, "' has ", t.numel(), " elements, registered ",
                 ShapeToString(model()[part.tensor].shape));
    if (!t.defined() || part.numel == t.numel()) {
      out.push_back(t);
    } else {
      GP_ENFORCE(t.is_contiguous(), "a cut tensor must be contiguous (key '",
                 model()[part.tensor].key, "')");
      torch::Tensor flat = t.view({-1}).slice(0, part.offset, part.offset + part.numel);
      if (part.rows > 0) {  // the part's rows, other dimensions kept
        std::vector<int64_t> shape = t.sizes().vec();
        shape[0] = part.rows;
        flat = flat.view(shape);
      }
      out.push_back(flat);
    }
  }
  return out;
}

void ShardedClient::ForShards(const std::function<void(int)>& fn, const std::vector<int>& which) {
  std::vector<int> shards = which;
  if (shards.empty())
    for (int s = 0; s < static_cast<int>(shards_.size()); ++s) shards.push_back(s);
  if (shards.size() == 1) return fn(shards[0]);
  // On the client's long-lived threads: a thread per shard per call cost more than a small
  // bucket's call. Each shard's call starts at once (it may wait at its shard's barrier).
  threads_->ForEach(shards.size(), [&](size_t k) { fn(shards[k]); });
}

std::vector<int> ShardedClient::ShardsBehind() {
  std::vector<char> is_lost(shards_.size());
  ForShards([&](int s) {
    try {
      shards_[s]->Heartbeat();
    } catch (const Error& e) {
      if (!LostByServer(e)) throw;
      is_lost[s] = 1;
    }
  });
  std::vector<int> lost;
  for (int s = 0; s < static_cast<int>(shards_.size()); ++s)
    if (is_lost[s]) lost.push_back(s);
  if (lost.size() == shards_.size()) lost.clear();
  return lost;
}

void ShardedClient::RejoinShards(const std::vector<int>& shards, int64_t step,
                                 std::vector<torch::Tensor>* params) {
  ForShards([&](int s) { CatchUp(s, step, *params); }, shards);
}

bool ShardedClient::InitOrPull(std::vector<torch::Tensor>* params) {
  torch::NoGradGuard no_grad;
  std::vector<char> kept(shards_.size());
  ForShards([&](int s) {
    std::vector<torch::Tensor> views = Views(s, *params);
    kept[s] = shards_[s]->InitOrPull(&views);
  });
  return kept[0];
}

StepStats ShardedClient::PushPull(int64_t step, const std::vector<torch::Tensor>& grads,
                                  std::vector<torch::Tensor>* out, int64_t base_step) {
  std::vector<StepStats> st(shards_.size());
  ForShards([&](int s) {
    std::vector<torch::Tensor> views = Views(s, *out);
    st[s] = WithCatchUp(
        s, step, [&] { return shards_[s]->PushPull(step, Views(s, grads), &views, base_step); });
  });
  return MergeAll(st);
}

StepStats ShardedClient::WithCatchUp(int s, int64_t step, const std::function<StepStats()>& fn) {
  try {
    return fn();
  } catch (const Error& e) {
    if (!weights_ || shards_.size() < 2 || !LostByServer(e)) throw;
    spdlog::warn("{} step {}: shard {} ({}) lost this worker ({}); catching it up", opt_.worker_id,
                 step, s, servers_[s], e.message());
  }
  CatchUp(s, step, weights_());
  return fn();
}

void ShardedClient::CatchUp(int s, int64_t step, const std::vector<torch::Tensor>& weights) {
  ServerClient& c = *shards_.at(s);
  c.set_catch_up_step(step);
  RegisterInfo info;
  try {
    info = c.Register(specs_[s], split_[s]);  // returns once every worker has asked
  } catch (...) {
    c.set_catch_up_step(0);
    throw;
  }
  c.set_catch_up_step(0);
  torch::NoGradGuard no_grad;
  if (info.server_step == step) {
    std::vector<torch::Tensor> views = Views(s, weights);
    const bool seeded = c.InitOrPull(&views);
    spdlog::warn("{}: shard {} ({}) had lost this worker: registered again at step {}{}",
                 opt_.worker_id, s, servers_[s], step,
                 seeded ? "; it took this worker's weights" : "");
    return;
  }
  GP_REFUSE(FailedPrecondition, Reason::kBadRequest, info.server_step == step - 1, "shard ", s,
            " (", servers_[s], ") restarted at step ", info.server_step,
            " while this worker is at step ", step,
            ": more than a step apart; stop the job and start every process with --resume auto");
  // This worker completed step - 1 and another did not: the shard rebuilds it from both, this
  // worker's part being its kept push (the shard answered Register once a worker at step - 1
  // had given it the weights).
  GP_REFUSE(FailedPrecondition, Reason::kBadRequest, c.RepushKept(step - 1), "shard ", s, " (",
            servers_[s], ") lost step ", step - 1,
            " and this worker keeps no push of it: stop the job and start every process with "
            "--resume auto");
  spdlog::warn(
      "{}: shard {} ({}) had lost this worker and step {}: registered again and pushed "
      "its step {} once more",
      opt_.worker_id, s, servers_[s], step - 1, step - 1);
}

StepStats ShardedClient::PushPullBucket(int64_t step, int bucket,
                                        const std::vector<torch::Tensor>& grads,
                                        std::vector<torch::Tensor>* out, Uplink* upload) {
  BucketKeys(bucket);  // checks the index
  std::vector<int> which;
  for (int s = 0; s < static_cast<int>(shards_.size()); ++s)
    if (local_bucket_[bucket][s] >= 0) which.push_back(s);
  SharedTurn turn(upload);
  std::vector<StepStats> st(shards_.size());
  ForShards(
      [&](int s) {
        std::vector<torch::Tensor> views = Views(s, *out);
        st[s] = shards_[s]->PushPullBucket(step, local_bucket_[bucket][s], Views(s, grads), &views,
                                           upload ? &turn : nullptr);
      },
      which);
  return MergeAll(st, which);
}

StepStats ShardedClient::Push(int64_t step, const std::vector<torch::Tensor>& grads,
                              int64_t base_step) {
  std::vector<StepStats> st(shards_.size());
  ForShards([&](int s) { st[s] = shards_[s]->Push(step, Views(s, grads), base_step); });
  return MergeAll(st);
}

StepStats ShardedClient::Pull(std::vector<torch::Tensor>* out, int64_t step) {
  std::vector<StepStats> st(shards_.size());
  ForShards([&](int s) {
    std::vector<torch::Tensor> views = Views(s, *out);
    st[s] = shards_[s]->Pull(&views, step);
  });
  return MergeAll(st);
}

int64_t ShardedClient::Heartbeat() {
  std::vector<int64_t> steps(shards_.size());
  ForShards([&](int s) { steps[s] = shards_[s]->Heartbeat(); });
  return *std::min_element(steps.begin(), steps.end());
}

std::pair<int, double> ShardedClient::Elect(int64_t round, double score) {
  // Method 6's vote lives on shard 0, in shard 0's ranks (Register returns those): each shard
  // numbers workers in its own registration order. The other shards take the winner's
  // published weights without an election of their own.
  return shards_.at(0)->Elect(round, score);
}

void ShardedClient::PublishWeights(int64_t round, const std::vector<torch::Tensor>& params) {
  ForShards([&](int s) { shards_[s]->PublishWeights(round, Views(s, params)); });
}

void ShardedClient::PullWeights(std::vector<torch::Tensor>* params, int64_t min_version) {
  torch::NoGradGuard no_grad;
  ForShards([&](int s) {
    std::vector<torch::Tensor> views = Views(s, *params);
    shards_[s]->PullWeights(&views, min_version);
  });
}

std::string ShardedClient::StatsText() {
  std::string out;
  for (size_t s = 0; s < shards_.size(); ++s)
    out += "# shard " + std::to_string(s) + " (" + servers_[s] + ")\n" + shards_[s]->StatsText();
  return out;
}

std::string ShardedClient::SaveState() const {
  std::string out;
  ByteWriter w(&out);
  w.PutVarint(shards_.size());
  for (const auto& c : shards_) {
    const std::string state = c->SaveState();
    w.PutVarint(state.size());
    w.PutBytes(state.data(), state.size());
  }
  return out;
}

void ShardedClient::LoadState(std::string_view state) {
  ByteReader r(state, "sharded push codec state");
  const uint64_t n = r.GetVarint("shards");
  GP_ENFORCE(n == shards_.size(), "push codec state is for ", n, " shards, this job has ",
             shards_.size());
  std::vector<std::string_view> states;
  for (uint64_t s = 0; s < n; ++s) {
    const uint64_t size = r.GetVarint("shard state size");
    states.push_back(r.GetBytes(size, "shard state"));
  }
  for (size_t s = 0; s < n; ++s) shards_[s]->LoadState(states[s]);
}

void ShardedClient::SetPushCodec(const CodecSpec& push) {
  for (auto& c : shards_) c->SetPushCodec(push);
}

bool ShardedClient::SetPushDensity(double ratio) {
  bool all = true;
  for (auto& c : shards_) all = c->SetPushDensity(ratio) && all;
  return all;
}

void ShardedClient::set_server_lr(double lr) {
  ServerClient::set_server_lr(lr);
  for (auto& c : shards_) c->set_server_lr(lr);
}

}  // namespace gradpress::worker
