# Cross-compiling cgpkit's client-only build (CGP_CLIENT_ONLY) for armhf (arm-linux-gnueabihf,
# ARMv7, no __int128); scripts/client_build.sh armhf does all of it.
set(CMAKE_SYSTEM_PROCESSOR armv7l)
set(cgp_triple arm-linux-gnueabihf)
set(cgp_debian_arch armhf)
set(cgp_qemu qemu-arm)
# GCC notes that the ABI for some aggregates changed in GCC 7.1: nothing of ours crosses it.
string(APPEND CMAKE_CXX_FLAGS_INIT " -Wno-psabi")
include(${CMAKE_CURRENT_LIST_DIR}/debian-cross.cmake)
