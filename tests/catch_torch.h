#pragma once
// Include this instead of <catch2/catch.hpp> in tests that use LibTorch: LibTorch pulls in
// glog, whose CHECK macro collides with Catch's. LibTorch first, then Catch's CHECK wins.
#include <torch/torch.h>
#undef CHECK
#include <catch2/catch.hpp>
