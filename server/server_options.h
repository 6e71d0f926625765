#pragma once
// The server's StoreOptions from an experiment Config (common/config.h).
//
//   StoreOptions o = StoreOptionsFromConfig(LoadConfig("configs/x.yaml"));
#include "common/config.h"
#include "server/parameter_store.h"

namespace gradpress::server {

StoreOptions StoreOptionsFromConfig(const Config& config);

}  // namespace gradpress::server
