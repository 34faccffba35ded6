# The part of cgpkit's Debian cross toolchain files that is the same for every target: the
# including file sets cgp_triple (e.g. aarch64-linux-gnu), cgp_debian_arch (arm64) and cgp_qemu
# (qemu-aarch64), and CMAKE_SYSTEM_PROCESSOR. Compilers: Debian's cross g++; libraries: the
# sysroot scripts/setup_cross.sh unpacks (build-sysroot/ARCH, or $CGP_SYSROOT); tests: qemu-user.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_C_COMPILER ${cgp_triple}-gcc)
set(CMAKE_CXX_COMPILER ${cgp_triple}-g++)
set(CMAKE_LIBRARY_ARCHITECTURE ${cgp_triple})

set(cgp_sysroot "$ENV{CGP_SYSROOT}")
if(NOT cgp_sysroot)
  get_filename_component(cgp_sysroot "${CMAKE_CURRENT_LIST_DIR}/../../build-sysroot/${cgp_debian_arch}"
                         ABSOLUTE)
endif()
if(NOT EXISTS "${cgp_sysroot}/usr/include/google/protobuf")
  message(FATAL_ERROR
          "no ${cgp_debian_arch} sysroot in ${cgp_sysroot}: run scripts/setup_cross.sh ${cgp_debian_arch}")
endif()
# Libraries, headers and CMake packages from the sysroot and the toolchain's own libc only:
# never from the host.
set(CMAKE_FIND_ROOT_PATH "${cgp_sysroot}" /usr/${cgp_triple})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)  # the host's protoc and pkg-config
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(ENV{PKG_CONFIG_LIBDIR} "${cgp_sysroot}/usr/lib/${cgp_triple}/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${cgp_sysroot}")
set(ENV{PKG_CONFIG_PATH} "")
set(cgp_sysroot_libs "${cgp_sysroot}/usr/lib/${cgp_triple}:${cgp_sysroot}/lib/${cgp_triple}")
# The sysroot's libraries need each other (protobuf needs zlib) at link time.
string(APPEND CMAKE_EXE_LINKER_FLAGS_INIT " -Wl,-rpath-link,${cgp_sysroot_libs}")
string(APPEND CMAKE_SHARED_LINKER_FLAGS_INIT " -Wl,-rpath-link,${cgp_sysroot_libs}")
# ctest runs the tests through qemu-user with the toolchain's loader and libc and the
# sysroot's libraries.
set(CMAKE_CROSSCOMPILING_EMULATOR ${cgp_qemu} -L /usr/${cgp_triple} -E "LD_LIBRARY_PATH=${cgp_sysroot_libs}")
