// ShardedPsClient: a composite over one carrier per shard (sharded_ps_client.h).
#include "worker/client/sharded_ps_client.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <exception>
#include <mutex>

#include "common/byte_io.h"
#include "common/error.h"
#include "common/shape.h"
#include "common/task_threads.h"
#include "compressors/registry.h"

namespace gradpress::worker {
namespace {

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

// The metrics of the shards in `which` (all if empty): calls that ran at once.
StepMetrics MergeAll(const std::vector<StepMetrics>& st, const std::vector<int>& which = {}) {
  StepMetrics all;
  if (which.empty()) {
    for (size_t s = 0; s < st.size(); ++s) Merge(st[s], Concurrency::kParallel, &all, s == 0);
  } else {
    for (size_t k = 0; k < which.size(); ++k)
      Merge(st[which[k]], Concurrency::kParallel, &all, k == 0);
  }
  return all;
}

}  // namespace

ShardedPsClient::ShardedPsClient(ClientOptions options, std::vector<std::string> servers,
                                 double partition_mb, ShardFactory make_shard)
    : opt_(std::move(options)),
      servers_(std::move(servers)),
      partition_mb_(partition_mb),
      make_shard_(std::move(make_shard)),
      threads_(std::make_unique<TaskThreads>(1 << 30, std::chrono::seconds(30), "gp-shard-call")) {
  GP_ENFORCE(!servers_.empty(), "cluster.servers is empty");
  GP_ENFORCE(make_shard_, "ShardedPsClient needs a shard factory");
  KeyCodecs check(opt_);  // a bad push codec fails here, not at Register
}

ShardedPsClient::~ShardedPsClient() = default;

bool ShardedPsClient::Needed(const std::vector<torch::Tensor>& params, size_t servers,
                             double partition_mb) {
  if (servers > 1) return true;
  if (partition_mb <= 0) return false;
  for (const auto& p : params)
    if (4.0 * static_cast<double>(p.numel()) > partition_mb * (1 << 20)) return true;
  return false;
}

RegisterInfo ShardedPsClient::Register(const std::vector<TensorSpec>& model,
                                       const std::vector<int>& bucket_keys, int64_t catch_up_step) {
  const int S = static_cast<int>(servers_.size());
  std::vector<transport::NamedSize> sizes;
  for (const auto& t : model)  // cut between rows: a part keeps the other dimensions
    sizes.push_back({t.key, NumelOf(t.shape), t.shape.size() > 1 ? t.shape[0] : 0});
  placement_ = transport::PlaceLargestFirst(sizes, S, partition_mb_);
  // The caller's buckets: keys [begin, end) each (one without a split).
  std::vector<std::pair<size_t, size_t>> buckets;
  size_t begin = 0;
  for (int n : KeyCodecs::CheckSplit(model.size(), bucket_keys)) {
    buckets.emplace_back(begin, begin + n);
    begin += n;
  }
  if (buckets.empty()) buckets.emplace_back(0, model.size());
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
  model_ = model;
  shards_.clear();
  codecs_.clear();
  for (int s = 0; s < S; ++s) {
    ClientOptions o = opt_;
    o.server = servers_[s];
    o.shard = s;
    o.shards = S;
    o.placement_hash = placement_.Hash();
    if (s > 0) o.rows = nullptr;  // the dashboard's rows go to shard 0
    codecs_.push_back(std::make_unique<KeyCodecs>(o));
    shards_.push_back(make_shard_(o, codecs_.back().get()));
  }
  kept_.assign(S, {});
  kept_step_.assign(S, -1);
  specs_ = std::move(specs);
  split_.assign(S, {});
  if (buckets.size() > 1) split_ = std::move(split);
  std::vector<RegisterInfo> infos(S);
  ForShards([&](int s) { infos[s] = shards_[s]->Register(specs_[s], split_[s], catch_up_step); });
  RegisterInfo info = infos[0];
  for (const auto& i : infos) {
    info.server_step = std::min(info.server_step, i.server_step);
    info.initialized = info.initialized && i.initialized;
  }
  return info;
}

std::vector<torch::Tensor> ShardedPsClient::Views(int s,
                                                  const std::vector<torch::Tensor>& ts) const {
  // Undefined tensors (the keys of other buckets) stay undefined; the shard's client checks
  // the shapes of the keys it uses.
  GP_ENFORCE(ts.size() == model_.size(), "sharded call: ", ts.size(), " tensors for a model of ",
             model_.size());
  std::vector<torch::Tensor> out;
  for (size_t i : parts_of_[s]) {
    const transport::PlacedPart& part = placement_.parts[i];
    const torch::Tensor& t = ts[part.tensor];
    if (t.defined())
      GP_ENFORCE(t.numel() == NumelOf(model_[part.tensor].shape), "sharded call: key '",
                 model_[part.tensor].key, "' has ", t.numel(), " elements, registered ",
                 ShapeToString(model_[part.tensor].shape));
    if (!t.defined() || part.numel == t.numel()) {
      out.push_back(t);
    } else {
      GP_ENFORCE(t.is_contiguous(), "a cut tensor must be contiguous (key '",
                 model_[part.tensor].key, "')");
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

void ShardedPsClient::ForShards(const std::function<void(int)>& fn, const std::vector<int>& which) {
  std::vector<int> shards = which;
  if (shards.empty())
    for (int s = 0; s < static_cast<int>(shards_.size()); ++s) shards.push_back(s);
  if (shards.size() == 1) return fn(shards[0]);
  // On the client's long-lived threads: a thread per shard per call cost more than a small
  // bucket's call. Each shard's call starts at once (it may wait at its shard's barrier).
  threads_->ForEach(shards.size(), [&](size_t k) { fn(shards[k]); });
}

std::vector<int> ShardedPsClient::ShardsBehind() {
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

void ShardedPsClient::RejoinShards(const std::vector<int>& shards, int64_t step,
                                   std::vector<torch::Tensor>* params) {
  ForShards([&](int s) { CatchUp(s, step, *params); }, shards);
}

bool ShardedPsClient::InitOrPull(std::vector<torch::Tensor>* params) {
  torch::NoGradGuard no_grad;
  std::vector<char> kept(shards_.size());
  ForShards([&](int s) {
    std::vector<torch::Tensor> views = Views(s, *params);
    kept[s] = shards_[s]->InitOrPull(&views);
  });
  return kept[0];
}

void ShardedPsClient::AwaitInitWeights(std::vector<torch::Tensor>* params) {
  torch::NoGradGuard no_grad;
  ForShards([&](int s) {
    std::vector<torch::Tensor> views = Views(s, *params);
    shards_[s]->AwaitInitWeights(&views);
  });
}

void ShardedPsClient::Broadcast(const std::string& name, int64_t round, bool root,
                                std::string* data) {
  GP_ENFORCE(!shards_.empty(), "Broadcast: call Register first");
  shards_[0]->Broadcast(name, round, root, data);
}

StepMetrics ShardedPsClient::WithCatchUp(int s, int64_t step,
                                         const std::function<StepMetrics()>& fn) {
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

void ShardedPsClient::CatchUp(int s, int64_t step, const std::vector<torch::Tensor>& weights) {
  PsClient& c = *shards_.at(s);
  const RegisterInfo info = c.Register(specs_[s], split_[s], step);  // once every worker asked
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
  GP_REFUSE(FailedPrecondition, Reason::kBadRequest, kept_step_[s] == step - 1 && !kept_[s].empty(),
            "shard ", s, " (", servers_[s], ") lost step ", step - 1,
            " and this worker keeps no push of it: stop the job and start every process with "
            "--resume auto");
  std::vector<torch::Tensor> scratch;  // the result: this worker applied it already
  for (const TensorSpec& t : specs_[s]) scratch.push_back(torch::zeros(t.shape));
  codecs_[s]->ResendNext(kept_[s]);
  c.PushPull(step - 1, scratch, &scratch);
  spdlog::warn(
      "{}: shard {} ({}) had lost this worker and step {}: registered again and pushed "
      "its step {} once more",
      opt_.worker_id, s, servers_[s], step - 1, step - 1);
}

StepMetrics ShardedPsClient::PushPull(const StepCall& call, const std::vector<torch::Tensor>& grads,
                                      std::vector<torch::Tensor>* out) {
  GP_ENFORCE(!shards_.empty(), "PushPull: call Register first");
  GP_ENFORCE(call.bucket < static_cast<int>(local_bucket_.size()), "bucket ", call.bucket,
             " outside the ", local_bucket_.size(), " registered");
  GP_ENFORCE(call.bucket >= 0 || local_bucket_.size() == 1, "the model is split into ",
             local_bucket_.size(), " buckets: exchange them one bucket at a time");
  std::vector<int> which;  // the shards holding a part of the call's keys
  for (int s = 0; s < static_cast<int>(shards_.size()); ++s)
    if (call.bucket < 0 || local_bucket_[call.bucket][s] >= 0) which.push_back(s);
  // A whole-model push is kept per shard until the next one, for a shard that restarts
  // behind this step (CatchUp).
  const bool keep = call.bucket < 0 && call.wait && shards_.size() > 1;
  SharedTurn turn(call.uplink);
  std::vector<StepMetrics> st(shards_.size());
  ForShards(
      [&](int s) {
        StepCall c = call;
        c.bucket = call.bucket < 0 ? -1 : local_bucket_[call.bucket][s];
        std::vector<double> key_lr;  // the shard's keys' (parts of the model's keys)
        if (call.lr && call.key_lr && !call.key_lr->empty()) {
          for (size_t i : parts_of_[s])
            key_lr.push_back(call.key_lr->at(placement_.parts[i].tensor));
          c.key_lr = &key_lr;
        }
        c.uplink = call.uplink ? &turn : nullptr;
        std::vector<torch::Tensor> views;
        if (call.wait) views = Views(s, *out);
        auto once = [&] {
          if (keep) codecs_[s]->KeepNextPushes();
          return shards_[s]->PushPull(c, Views(s, grads), call.wait ? &views : nullptr);
        };
        // A bucket's call does not catch a shard up: the others' results of the step may be
        // in the weights already; the Trainer rejoins (RejoinShards) instead.
        st[s] = call.bucket < 0 ? WithCatchUp(s, call.step, once) : once();
        if (keep) {  // the call succeeded
          kept_[s] = codecs_[s]->TakeKeptPushes();
          kept_step_[s] = call.step;
        }
      },
      which);
  return MergeAll(st, which);
}

StepMetrics ShardedPsClient::Pull(std::vector<torch::Tensor>* out, int64_t step) {
  std::vector<StepMetrics> st(shards_.size());
  ForShards([&](int s) {
    std::vector<torch::Tensor> views = Views(s, *out);
    st[s] = shards_[s]->Pull(&views, step);
  });
  return MergeAll(st);
}

int64_t ShardedPsClient::Heartbeat() {
  std::vector<int64_t> steps(shards_.size());
  ForShards([&](int s) { steps[s] = shards_[s]->Heartbeat(); });
  return *std::min_element(steps.begin(), steps.end());
}

std::pair<int, double> ShardedPsClient::Elect(int64_t round, double score) {
  // Method 6's vote lives on shard 0, in shard 0's ranks (Register returns those): each shard
  // numbers workers in its own registration order. The other shards take the winner's
  // published weights without an election of their own.
  return shards_.at(0)->Elect(round, score);
}

void ShardedPsClient::PublishWeights(int64_t round, const std::vector<torch::Tensor>& params) {
  ForShards([&](int s) { shards_[s]->PublishWeights(round, Views(s, params)); });
}

void ShardedPsClient::PullWeights(std::vector<torch::Tensor>* params, int64_t min_version) {
  torch::NoGradGuard no_grad;
  ForShards([&](int s) {
    std::vector<torch::Tensor> views = Views(s, *params);
    shards_[s]->PullWeights(&views, min_version);
  });
}

void ShardedPsClient::PullMomentum(std::vector<torch::Tensor>* buffers) {
  torch::NoGradGuard no_grad;
  ForShards([&](int s) {
    std::vector<torch::Tensor> views = Views(s, *buffers);
    shards_[s]->PullMomentum(&views);
  });
}

std::string ShardedPsClient::StatsText() {
  std::string out;
  for (size_t s = 0; s < shards_.size(); ++s)
    out += "# shard " + std::to_string(s) + " (" + servers_[s] + ")\n" + shards_[s]->StatsText();
  return out;
}

std::string ShardedPsClient::SaveState() const {
  std::string out;
  ByteWriter w(&out);
  w.PutVarint(codecs_.size());
  for (const auto& c : codecs_) {
    const std::string state = c->SaveState();
    w.PutVarint(state.size());
    w.PutBytes(state.data(), state.size());
  }
  return out;
}

void ShardedPsClient::LoadState(std::string_view state) {
  ByteReader r(state, "sharded push codec state");
  const uint64_t n = r.GetVarint("shards");
  GP_ENFORCE(n == codecs_.size(), "push codec state is for ", n, " shards, this job has ",
             codecs_.size());
  std::vector<std::string_view> states;
  for (uint64_t s = 0; s < n; ++s) {
    const uint64_t size = r.GetVarint("shard state size");
    states.push_back(r.GetBytes(size, "shard state"));
  }
  for (size_t s = 0; s < n; ++s) codecs_[s]->LoadState(states[s]);
}

void ShardedPsClient::SetPushCodec(const CodecSpec& push) {
  for (auto& c : codecs_) c->SetPushCodec(push);
}

void ShardedPsClient::SetKeyPushCodecs(const std::vector<CodecSpec>& per_key) {
  GP_ENFORCE(per_key.size() == model_.size(), "SetKeyPushCodecs: ", per_key.size(),
             " codecs for a model of ", model_.size(), " keys");
  for (const CodecSpec& spec : per_key) compressors::MakeCompressor(spec);  // all valid first
  for (size_t s = 0; s < codecs_.size(); ++s) {
    std::vector<CodecSpec> mine;
    for (size_t i : parts_of_[s]) mine.push_back(per_key[placement_.parts[i].tensor]);
    codecs_[s]->SetKeyPushCodecs(mine);
  }
}

bool ShardedPsClient::SetPushDensity(double ratio) {
  bool all = true;
  for (auto& c : codecs_) all = c->SetPushDensity(ratio) && all;
  return all;
}

}  // namespace gradpress::worker
