# Cross-compiling cgpkit's client-only build (CGP_CLIENT_ONLY) for armhf (arm-linux-gnueabihf) with Debian's
# cross toolchain and multiarch libraries; tests run under qemu-user (scripts/client_build.sh armhf,
# which installs all of it with scripts/setup_cross.sh armhf).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR armv7l)
set(cgp_triple arm-linux-gnueabihf)
set(CMAKE_C_COMPILER ${cgp_triple}-gcc)
set(CMAKE_CXX_COMPILER ${cgp_triple}-g++)
set(CMAKE_LIBRARY_ARCHITECTURE ${cgp_triple})
# "/" keeps /usr/include and /usr/lib/<triple> searchable; the host's libraries live in
# /usr/lib/x86_64-linux-gnu, which a target search never enters.
set(CMAKE_FIND_ROOT_PATH /usr/${cgp_triple} /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)  # the host's protoc and pkg-config
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# pkg-config must see only the target's .pc files (libsodium).
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${cgp_triple}/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
# ctest runs the tests through qemu-user; the target's own ld.so and libc come with libc6:armhf.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-arm)
