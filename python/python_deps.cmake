# Finds what the Python extension gradpress._C (python/CMakeLists.txt) needs and sets
# GP_HAVE_PYTHON: the interpreter and its headers (python3-dev), pybind11 (pybind11-dev) and
# the torch package of that interpreter (python3-torch, whose LibTorch must be the one this
# build links: Debian's libtorch-dev). Missing any of them: a status line, no extension.
# GP_PYTHON_EXECUTABLE picks the interpreter (default /usr/bin/python3, Debian's). Sanitizer
# and fuzzing builds leave it out.
set(GP_HAVE_PYTHON OFF)
if(GP_SANITIZE OR GP_FUZZ)  # an instrumented module cannot load into Debian's python3
  message(STATUS "gradpress: sanitizer or fuzzing build; gradpress._C is not built")
  return()
endif()
set(GP_PYTHON_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "interpreter the extension is built for")
set(Python3_EXECUTABLE ${GP_PYTHON_EXECUTABLE})
find_package(Python3 COMPONENTS Interpreter Development.Module QUIET)
if(NOT Python3_FOUND OR NOT Python3_Development.Module_FOUND)
  message(STATUS "gradpress: no Python 3 headers (python3-dev) for ${GP_PYTHON_EXECUTABLE}; "
                 "gradpress._C is not built")
  return()
endif()
find_package(pybind11 CONFIG QUIET)
if(NOT pybind11_FOUND)
  message(STATUS "gradpress: no pybind11 (pybind11-dev); gradpress._C is not built")
  return()
endif()
# The torch package: its version, library directory (libtorch_python.so) and the pybind11 ABI
# tags torch was built with (torch.utils.cpp_extension passes the same three).
execute_process(
  COMMAND ${Python3_EXECUTABLE} -c
    "import torch, torch.utils.cpp_extension as c; print(torch.__version__); print(';'.join(c.library_paths())); print(torch._C._PYBIND11_COMPILER_TYPE); print(torch._C._PYBIND11_STDLIB); print(torch._C._PYBIND11_BUILD_ABI)"
  RESULT_VARIABLE gp_torch_rc OUTPUT_VARIABLE gp_torch_out ERROR_QUIET
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT gp_torch_rc EQUAL 0)
  message(STATUS "gradpress: ${Python3_EXECUTABLE} cannot import torch (python3-torch); "
                 "gradpress._C is not built")
  return()
endif()
string(REPLACE "\n" ";" gp_torch_out "${gp_torch_out}")
list(GET gp_torch_out 0 gp_torch_version)
list(GET gp_torch_out 1 gp_torch_libdirs)
list(GET gp_torch_out 2 GP_PYBIND11_COMPILER_TYPE)
list(GET gp_torch_out 3 GP_PYBIND11_STDLIB)
list(GET gp_torch_out 4 GP_PYBIND11_BUILD_ABI)
string(REGEX MATCH "^[0-9]+\\.[0-9]+" gp_torch_mm "${gp_torch_version}")
string(REGEX MATCH "^[0-9]+\\.[0-9]+" gp_libtorch_mm "${Torch_VERSION}")
if(NOT gp_torch_mm STREQUAL gp_libtorch_mm)
  message(STATUS "gradpress: the Python torch ${gp_torch_version} is not the LibTorch "
                 "${Torch_VERSION} this build links; gradpress._C is not built")
  return()
endif()
find_library(GP_TORCH_PYTHON_LIBRARY torch_python PATHS ${gp_torch_libdirs} NO_DEFAULT_PATH)
if(NOT GP_TORCH_PYTHON_LIBRARY)
  message(STATUS "gradpress: no libtorch_python in ${gp_torch_libdirs}; gradpress._C is not built")
  return()
endif()
message(STATUS "gradpress: building gradpress._C for ${Python3_EXECUTABLE} "
               "(Python ${Python3_VERSION}, torch ${gp_torch_version})")
set(GP_HAVE_PYTHON ON)
