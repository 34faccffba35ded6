# Cross-compiling cgpkit's client-only build (CGP_CLIENT_ONLY) for arm64 (aarch64-linux-gnu);
# scripts/client_build.sh arm64 does all of it; docs/embedding.md shows the Android NDK way.
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(cgp_triple aarch64-linux-gnu)
set(cgp_debian_arch arm64)
set(cgp_qemu qemu-aarch64)
include(${CMAKE_CURRENT_LIST_DIR}/debian-cross.cmake)
