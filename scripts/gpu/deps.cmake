# Included right after gradpress's project() (cmake -DCMAKE_PROJECT_INCLUDE=...) by
# scripts/gpu/build_and_test.sh, with GP_DEB_ROOT = the folder the Debian packages were
# extracted into. Two fixes for building against a pip wheel's LibTorch and Debian's gRPC:
#
# 1. Protobuf is found before Torch. The wheel's Caffe2Config.cmake (protobuf linked into
#    libtorch) defines protobuf::libprotobuf as an empty alias when no such target exists
#    yet; FindProtobuf then keeps that alias, gp_proto links nothing, and every executable
#    fails to link with undefined google::protobuf symbols.
# 2. re2::re2 is defined from the extracted tree. Debian's gRPCConfig.cmake finds re2
#    through pkg-config, whose re2.pc names the absolute /usr paths of an installed package
#    (and the GPU machine may have no pkg-config); with the target defined, gRPC's
#    Findre2.cmake stops there.
if(GP_DEB_ROOT)
  find_package(Protobuf REQUIRED)
  if(NOT TARGET re2::re2)
    add_library(re2::re2 SHARED IMPORTED)
    set_target_properties(re2::re2 PROPERTIES
      IMPORTED_LOCATION "${GP_DEB_ROOT}/usr/lib/x86_64-linux-gnu/libre2.so"
      INTERFACE_INCLUDE_DIRECTORIES "${GP_DEB_ROOT}/usr/include")
    set(re2_FOUND TRUE)
  endif()
endif()
