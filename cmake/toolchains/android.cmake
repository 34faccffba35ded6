# The client-only build for Android (documented, not run in CI: the NDK is not a Debian package).
# It wraps the NDK's own toolchain file and looks for protobuf, libsodium and SQLite built for
# the same ABI under CGP_ANDROID_DEPS (e.g. installed there with their own CMake/autotools
# builds and the same NDK):
#   cmake -S . -B build-android -G Ninja -DCGP_CLIENT_ONLY=ON -DCGP_BUILD_TESTS=OFF \
#     -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/android.cmake \
#     -DANDROID_ABI=armeabi-v7a -DANDROID_PLATFORM=android-24 -DCGP_ANDROID_DEPS=$HOME/deps/armv7
# armeabi-v7a and x86 have no __int128: the client takes the portable 128-bit path by itself
# (client-sdk/src/int128.hpp), with results identical to arm64-v8a's (known-answer tests).
if(NOT DEFINED ENV{ANDROID_NDK_HOME} AND NOT DEFINED ANDROID_NDK)
  message(FATAL_ERROR "set ANDROID_NDK_HOME (or -DANDROID_NDK=...) to the NDK's directory")
endif()
if(NOT DEFINED ANDROID_NDK)
  set(ANDROID_NDK "$ENV{ANDROID_NDK_HOME}")
endif()
include("${ANDROID_NDK}/build/cmake/android.toolchain.cmake")
if(CGP_ANDROID_DEPS)
  list(APPEND CMAKE_FIND_ROOT_PATH "${CGP_ANDROID_DEPS}")
  set(ENV{PKG_CONFIG_LIBDIR} "${CGP_ANDROID_DEPS}/lib/pkgconfig")
  set(ENV{PKG_CONFIG_SYSROOT_DIR} "")
endif()
