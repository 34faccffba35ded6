// 128-bit integers (a GCC/Clang extension), named once so that -Wpedantic stays quiet.
#pragma once

namespace cgp::client {

__extension__ typedef unsigned __int128 uint128;
__extension__ typedef __int128 int128;

}  // namespace cgp::client
