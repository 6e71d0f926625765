#include "transport/raw_client.h"

#include <google/protobuf/descriptor.h>
#include <grpcpp/client_context.h>

#include <map>
#include <mutex>

#include "common/error.h"
#include "proto/gradpress.grpc.pb.h"

namespace gradpress::transport {

const std::string& MethodPath(std::string_view name) {
  static std::mutex mu;
  static std::map<std::string, std::string, std::less<>> paths;
  std::lock_guard<std::mutex> lock(mu);
  auto it = paths.find(name);
  if (it != paths.end()) return it->second;
  const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      proto::ParameterServer::service_full_name());
  GP_ENFORCE_AS(Internal, service != nullptr, "no service ",
                proto::ParameterServer::service_full_name(), " in the generated descriptors");
  const auto* method = service->FindMethodByName(std::string(name));
  GP_ENFORCE_AS(Internal, method != nullptr, "service ", service->full_name(), " has no rpc ",
                name);
  return paths.emplace(std::string(name), "/" + service->full_name() + "/" + method->name())
      .first->second;
}

RawCall::RawCall(grpc::GenericStub* stub, const std::string& path, grpc::ClientContext* ctx)
    : ctx_(ctx), call_(stub->PrepareCall(ctx, path, &cq_)) {
  call_->StartCall(this);
  alive_ = Wait();
}

RawCall::~RawCall() {
  if (!finished_) {
    ctx_->TryCancel();
    grpc::Status ignored;
    call_->Finish(&ignored, this);
    Wait();
  }
  cq_.Shutdown();
  void* tag;
  bool ok;
  while (cq_.Next(&tag, &ok)) {
  }
}

bool RawCall::Wait() {
  void* tag = nullptr;
  bool ok = false;
  GP_ENFORCE_AS(Internal, cq_.Next(&tag, &ok), "completion queue shut down with a call open");
  return ok;
}

bool RawCall::Write(const grpc::ByteBuffer& msg) {
  if (!alive_ || writes_done_) return false;
  call_->Write(msg, this);
  alive_ = Wait();
  return alive_;
}

void RawCall::WritesDone() {
  if (!alive_ || writes_done_) return;
  writes_done_ = true;
  call_->WritesDone(this);
  Wait();
}

bool RawCall::Read(grpc::ByteBuffer* msg) {
  call_->Read(msg, this);
  return Wait();
}

grpc::Status RawCall::Finish() {
  grpc::Status status;
  finished_ = true;
  call_->Finish(&status, this);
  Wait();
  return status;
}

}  // namespace gradpress::transport
