#include "transport/grpc_process.h"

#include <absl/synchronization/mutex.h>

namespace gradpress::transport {

void ConfigureGrpcProcess() { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); }

}  // namespace gradpress::transport
