"""Builds the extension module ckptdb._ckptdb with the project's CMake build (pyproject.toml
has the package's metadata): `pip install .`."""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    """Configures the project (no tests, no benchmarks) for this interpreter, builds the
    _ckptdb target and puts the module where setuptools packages it."""

    def build_extension(self, ext):
        source = os.path.dirname(os.path.abspath(__file__))
        build = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        os.makedirs(build, exist_ok=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.run(["cmake", "-S", source, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                        f"-DPython3_EXECUTABLE={sys.executable}", "-DCKPTDB_BUILD_TESTS=OFF",
                        "-DCKPTDB_BUILD_BENCH=OFF", *os.environ.get("CKPTDB_CMAKE_ARGS",
                                                                    "").split()],
                       check=True)
        subprocess.run(["cmake", "--build", build, "--target", "_ckptdb", "-j", jobs],
                       check=True)
        built = os.path.join(build, "python", "ckptdb")
        module = next(f for f in os.listdir(built) if f.startswith("_ckptdb") and
                      f.endswith(".so"))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(built, module), target)


setup(ext_modules=[CMakeExtension("ckptdb._ckptdb")], cmdclass={"build_ext": CMakeBuild})
