// PsClient, part two: the weights (initial, published, pulled), method 6's elections, and
// the push codecs' state (checkpoints, dynamic compression, DGC warm-up).
#include <string>
#include <string_view>

#include "common/byte_io.h"
#include "common/timer.h"
#include "transport/status.h"
#include "worker/ps_client_internal.h"

namespace gradpress::worker {

namespace {
// Lossless ("none") payloads of the caller's tensors, for initial or published weights.
std::vector<KeyPayload> WeightPayloads(const PsClient::Impl& impl,
                                       const std::vector<torch::Tensor>& params) {
  std::vector<KeyPayload> out;
  for (size_t i = 0; i < params.size(); ++i) {
    compressors::Payload p;
    p.codec = "none";
    p.shape = params[i].sizes().vec();
    p.bytes = TensorToBytes(params[i].to(torch::kFloat32));
    out.push_back({impl.model[i].key, std::move(p)});
  }
  return out;
}
}  // namespace

// Streams lossless weights through InitWeights or PublishWeights; returns `accepted`.
bool PsClient::UploadWeights(bool publish, int64_t round,
                             const std::vector<torch::Tensor>& params) {
  CheckTensors(impl_->model, params, publish ? "PublishWeights" : "InitWeights");
  const std::vector<KeyPayload> payloads = WeightPayloads(*impl_, params);
  return WithRetry(
      *impl_, opt_, publish ? "PublishWeights" : "InitWeights", [&](grpc::ClientContext* ctx) {
        proto::InitReply reply;
        auto writer = publish ? impl_->stub->PublishWeights(ctx, &reply)
                              : impl_->stub->InitWeights(ctx, &reply);
        proto::PushMessage header;
        FillHeader(opt_, round, 0, std::nullopt, &header);
        if (writer->Write(header)) WritePayloads(writer.get(), payloads);
        writer->WritesDone();
        transport::ThrowIfError(writer->Finish(), publish ? "PublishWeights" : "InitWeights");
        return reply.accepted();
      });
}

bool PsClient::InitOrPull(std::vector<torch::Tensor>* params) {
  const bool accepted = UploadWeights(/*publish=*/false, 0, *params);
  PullWeights(params, 0);
  return accepted;
}

void PsClient::PublishWeights(int64_t round, const std::vector<torch::Tensor>& params) {
  UploadWeights(/*publish=*/true, round, params);
}

void PsClient::PullWeights(std::vector<torch::Tensor>* params, int64_t min_version) {
  CheckTensors(impl_->model, *params, "PullWeights");
  proto::PullRequest req;
  req.set_worker_id(opt_.worker_id);
  req.set_incarnation(opt_.incarnation);
  req.set_step(min_version);
  std::vector<KeyPayload> got =
      WithRetry(*impl_, opt_, "PullWeights", [&](grpc::ClientContext* ctx) {
        auto reader = impl_->stub->PullWeights(ctx, req);
        proto::PullHeader header;
        auto payloads = ReadResult(reader.get(), impl_->model, &header);
        transport::ThrowIfError(reader->Finish(), "PullWeights");
        return payloads;
      });
  uint64_t bytes = 0;
  DecodeInto(*impl_, got, params, &bytes);
}

std::pair<int, double> PsClient::Elect(int64_t round, double score) {
  proto::ElectRequest req;
  req.set_worker_id(opt_.worker_id);
  req.set_incarnation(opt_.incarnation);
  req.set_round(round);
  req.set_score(score);
  const proto::ElectReply r = WithRetry(*impl_, opt_, "Elect", [&](grpc::ClientContext* ctx) {
    proto::ElectReply reply;
    transport::ThrowIfError(impl_->stub->Elect(ctx, req, &reply), "Elect");
    return reply;
  });
  return {r.best_rank(), r.best_score()};
}

std::string PsClient::SaveState() const {
  std::string out;
  ByteWriter w(&out);
  w.PutVarint(impl_->push.size());
  for (size_t i = 0; i < impl_->push.size(); ++i) {
    const std::string& key = impl_->model[i].key;
    std::string state;
    impl_->push[i]->SaveState(&state);
    w.PutVarint(key.size());
    w.PutBytes(key.data(), key.size());
    w.PutVarint(state.size());
    w.PutBytes(state.data(), state.size());
  }
  return out;
}

void PsClient::LoadState(std::string_view state) {
  ByteReader r(state, "push codec state");
  const uint64_t n = r.GetVarint("key count");
  GP_ENFORCE(n == impl_->push.size(), "push codec state holds ", n, " keys, the model ",
             impl_->push.size(), " (Register first, with the same model)");
  // Restore into fresh codecs first, so a bad state leaves the current ones untouched.
  std::vector<std::unique_ptr<Compressor>> fresh;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t len = r.GetVarint("key length");
    GP_ENFORCE(len <= r.remaining(), "push codec state: key of ", len, " bytes");
    const std::string key(r.GetBytes(len, "key"));
    GP_ENFORCE(key == impl_->model[i].key, "push codec state: key ", i, " is '", key,
               "', the model's '", impl_->model[i].key, "'");
    const uint64_t size = r.GetVarint("state length");
    GP_ENFORCE(size <= r.remaining(), "push codec state of '", key, "': ", size, " bytes");
    fresh.push_back(MakePushCodec(opt_, impl_->model[i]));
    fresh.back()->LoadState(r.GetBytes(size, "state"));
  }
  r.ExpectEnd();
  impl_->push = std::move(fresh);
}

void PsClient::SetPushCodec(const compressors::CompressorConfig& push) {
  GP_ENFORCE(!impl_->model.empty(), "SetPushCodec before Register");
  ClientOptions o = opt_;
  o.push = push;
  std::vector<std::unique_ptr<Compressor>> fresh;
  for (const auto& s : impl_->model) fresh.push_back(MakePushCodec(o, s));  // validates all
  opt_.push = push;
  impl_->push = std::move(fresh);
}

bool PsClient::SetPushDensity(double ratio) {
  bool any = false;
  for (size_t i = 0; i < impl_->push.size(); ++i)
    if (compressors::TravelsCompressed(impl_->model[i].shape, opt_.min_numel, opt_.skip_1d))
      any = impl_->push[i]->SetDensity(ratio) || any;
  return any;
}

double DecodeInto(PsClient::Impl& impl, const std::vector<KeyPayload>& got,
                  std::vector<torch::Tensor>* out, uint64_t* bytes) {
  GP_ENFORCE(got.size() == impl.model.size(), "server sent ", got.size(),
             " tensors for a model of ", impl.model.size(), " keys");
  Timer t;
  for (size_t i = 0; i < got.size(); ++i) {
    GP_ENFORCE(got[i].key == impl.model[i].key, "server sent key '", got[i].key, "' where '",
               impl.model[i].key, "' was expected");
    *bytes += got[i].payload.bytes.size();
    const compressors::Payload& p = got[i].payload;
    torch::Tensor& o = (*out)[i];
    GP_ENFORCE(p.shape == impl.model[i].shape, "server sent key '", got[i].key, "' with shape ",
               ShapeToString(p.shape));
    if (o.device().is_cpu() && o.scalar_type() == torch::kFloat32 && o.is_contiguous()) {
      impl.Decoder(p.codec).DecodeTo(p.bytes, o.numel(), o.data_ptr<float>());  // in place
    } else {
      torch::NoGradGuard no_grad;
      o.copy_(impl.Decoder(p.codec).Decode(p));
    }
  }
  return t.ElapsedMs();
}

int64_t PsClient::Heartbeat() {
  proto::HeartbeatRequest req;
  req.set_worker_id(opt_.worker_id);
  req.set_incarnation(opt_.incarnation);
  return WithRetry(*impl_, opt_, "Heartbeat", [&](grpc::ClientContext* ctx) {
    proto::HeartbeatReply r;
    transport::ThrowIfError(impl_->stub->Heartbeat(ctx, req, &r), "Heartbeat");
    return r.server_step();
  });
}

std::string PsClient::StatsText() {
  return WithRetry(*impl_, opt_, "Stats", [&](grpc::ClientContext* ctx) {
    proto::StatsReply r;
    transport::ThrowIfError(impl_->stub->Stats(ctx, proto::StatsRequest{}, &r), "Stats");
    return r.prometheus();
  });
}

}  // namespace gradpress::worker
