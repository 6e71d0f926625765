"""setuptools driving the project's CMake build for `pip install .` (pyproject.toml).

The extension gradpress._C and gradpress-server are built by CMake (CMakeLists.txt), either in
a directory of the build's own (build-pip/cmake, Release, without tests and benchmarks) or,
with GRADPRESS_BUILD_DIR set, in an existing build tree (a developer's `build/`: only the two
targets are brought up to date there, its cache is left as it is). The wheel holds the Python
package, _C and bin/gradpress-server, which gradpress.launch finds beside itself.

Environment: GRADPRESS_BUILD_DIR (see above), GRADPRESS_BUILD_JOBS (default: the cores),
CMAKE_ARGS (more -D options for a fresh configure).
"""
import os
import pathlib
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent
(ROOT / "build-pip").mkdir(exist_ok=True)  # setuptools' build and egg-info go there (ignored)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def run(self):
        build_dir = os.environ.get("GRADPRESS_BUILD_DIR")
        if build_dir:
            build_dir = pathlib.Path(build_dir).resolve()
            if not (build_dir / "CMakeCache.txt").is_file():
                sys.exit(f"setup.py: GRADPRESS_BUILD_DIR={build_dir} is not a configured CMake "
                         "build directory (cmake -S . -B build first), or unset it")
        else:
            build_dir = pathlib.Path(self.build_temp).resolve() / "cmake"
            args = ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                    "-DGP_BUILD_TESTS=OFF", "-DGP_BUILD_BENCH=OFF",
                    f"-DGP_PYTHON_EXECUTABLE={sys.executable}"]
            if shutil.which("ccache"):
                args.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
            args += shlex.split(os.environ.get("CMAKE_ARGS", ""))
            self.spawn(args)
        jobs = os.environ.get("GRADPRESS_BUILD_JOBS", str(os.cpu_count() or 1))
        self.spawn(["cmake", "--build", str(build_dir), "-j", jobs, "--target", "gp_python",
                    "gradpress-server"])
        built = sorted((build_dir / "python" / "gradpress").glob("_C*.so"))
        if not built:
            sys.exit(f"setup.py: CMake built no gradpress._C in {build_dir}/python/gradpress: "
                     "the extension needs python3-dev, pybind11-dev and python3-torch "
                     "(scripts/setup.sh installs them)")
        target = pathlib.Path(self.get_ext_fullpath("gradpress._C"))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built[-1], target)
        bin_dir = pathlib.Path(self.build_lib) / "gradpress" / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build_dir / "server" / "gradpress-server", bin_dir / "gradpress-server")


setup(
    package_dir={"": "python"},
    packages=["gradpress", "gradpress.torch"],
    ext_modules=[CMakeExtension("gradpress._C")],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": "build-pip"}, "egg_info": {"egg_base": "build-pip"}},
    zip_safe=False,
)
