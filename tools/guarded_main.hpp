// Every transport program's main runs through guarded_main: no exception escapes an entry point
// (an uncaught one aborts with exit 134 and no message). What reaches here is a bug or the
// machine running out of memory; either way one line on stderr and exit 1.
#pragma once

#include <cstdio>
#include <exception>
#include <new>

namespace cgp::tools {

template <class Body>
int guarded_main(const char* program, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: out of memory\n", program);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", program, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: internal error\n", program);
  }
  return 1;
}

}  // namespace cgp::tools
