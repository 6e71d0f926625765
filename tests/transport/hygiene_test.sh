#!/usr/bin/env bash
# What the hardening pass ruled out, checked over the source tree:
# - no grpc::internal anywhere (raw methods are bound through the generated
#   WithRawCallbackMethod_* templates and grpc::GenericStub);
# - no error text matched in daemon or library code: a what() or error_message() searched
#   or compared to a string. Code branches on the error's code and Reason (common/error.h).
#   Tests may still check what a message says.
#   tests/transport/hygiene_test.sh SOURCE_DIR
set -euo pipefail
cd "$1"
bad=0
if grep -rn --include='*.cc' --include='*.h' 'grpc::internal' \
    common compressors transport server worker sim bench fuzz tests; then
  echo "hygiene: grpc::internal is used (above)" >&2
  bad=1
fi
if grep -rnE --include='*.cc' --include='*.h' \
    '(what|error_message)\(\)\)?\.(find|rfind|compare|starts_with)\(|(what|error_message)\(\)\)? *[!=]= *"' \
    common compressors transport server worker sim bench fuzz; then
  echo "hygiene: error text is matched in code (above): branch on code and Reason" >&2
  bad=1
fi
if [[ $bad -eq 0 ]]; then echo "hygiene: ok"; fi
exit "$bad"
