#include "compressors/efsignsgd.h"

#include "common/error.h"

namespace gradpress::compressors {

CodecSpec ExpandEfSignSgd(const CodecSpec& config) {
  GP_ENFORCE(config.params.count("scaling") == 0,
             "efsignsgd is onebit with scaling=mean; it takes no 'scaling' (use codec: onebit)");
  GP_ENFORCE(config.then == nullptr, "'then' follows a sparsifier; efsignsgd is not one");
  CodecSpec onebit = config;
  onebit.codec = "onebit";
  onebit.params["scaling"] = "mean";
  onebit.error_feedback = true;
  return onebit;
}

}  // namespace gradpress::compressors
