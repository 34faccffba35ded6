// The executables that build the tests' shared precompiled headers (tests/CMakeLists.txt). Each
// is compiled as a test is and links only what its header needs, so that the macros it is built
// with are a subset of every target's that reuses it (GCC refuses a header built with a macro
// the user lacks).
int main() {
  return 0;
}
