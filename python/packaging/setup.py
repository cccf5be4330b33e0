# The extension is already built by CMake (cephalo/_cephalo*.so beside this file): setuptools
# only copies the package, marked as platform-specific so the wheel is tagged for this ABI.
from setuptools import setup
from setuptools.dist import Distribution


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(packages=["cephalo"], package_data={"cephalo": ["_cephalo*.so"]},
      distclass=BinaryDistribution)
