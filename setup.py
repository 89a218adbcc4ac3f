"""Builds torch_spyre's native parts with CMake against the installed torch.

    pip install --no-build-isolation -e .     (or: python setup.py build_ext --inplace)

The CMake build lives in build-torch/ (override with SPYRE_TORCH_BUILD_DIR)
and is configured with -DSPYRE_BUILD_TORCH=ON. The results are laid out as
torch_spyre/_C*.so (RPATH $ORIGIN/lib) and torch_spyre/lib/lib*.so (RPATH
$ORIGIN). torch must already be installed: there is no build isolation
because the extension must match the installed torch exactly.
"""

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
PACKAGE = ROOT / "torch_spyre"


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def run(self):
        build_dir = Path(os.environ.get("SPYRE_TORCH_BUILD_DIR", ROOT / "build-torch"))
        build_type = os.environ.get("SPYRE_BUILD_TYPE", "RelWithDebInfo")
        jobs = os.environ.get("SPYRE_BUILD_JOBS", "2")
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir),
            f"-DCMAKE_BUILD_TYPE={build_type}",
            "-DSPYRE_BUILD_TORCH=ON",
            "-DSPYRE_BUILD_TESTS=OFF",
            "-DSPYRE_BUILD_BENCHMARKS=OFF",
            "-DSPYRE_WERROR=ON",
            "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
            f"-DPython3_EXECUTABLE={sys.executable}",
        ]
        if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
            configure += ["-G", "Ninja"]
        subprocess.check_call(configure)
        subprocess.check_call(
            ["cmake", "--build", str(build_dir), "--target", "_C", "-j", jobs])
        self._lay_out(build_dir)

    def _lay_out(self, build_dir):
        lib_dir = PACKAGE / "lib"
        lib_dir.mkdir(exist_ok=True)
        for lib in glob.glob(str(build_dir / "lib" / "lib*.so")):
            shutil.copy2(lib, lib_dir)
        modules = glob.glob(str(build_dir / "python" / "_C*.so"))
        if not modules:
            raise RuntimeError(f"no torch_spyre._C module was built in {build_dir}/python")
        for module in modules:
            shutil.copy2(module, PACKAGE)
        # A regular (non-editable) build also needs the files in build_lib.
        if not self.inplace:
            target = Path(self.build_lib) / "torch_spyre"
            (target / "lib").mkdir(parents=True, exist_ok=True)
            for lib in glob.glob(str(lib_dir / "lib*.so")):
                shutil.copy2(lib, target / "lib")
            for module in modules:
                shutil.copy2(module, target)


setup(
    ext_modules=[CMakeExtension("torch_spyre._C")],
    cmdclass={"build_ext": CMakeBuild},
)
